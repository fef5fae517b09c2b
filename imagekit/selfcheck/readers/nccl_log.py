"""What NCCL moved data over, read from its own INFO log (NCCL_DEBUG=INFO, subsystems INIT
and NET: ddp.nccl_log_env). Pure and standard library only: the ddp and multi-node probes
read their ranks' logs with it; what a transport is worth is decided elsewhere
(transports.py, links.py).

The lines it reads, as NCCL 2.21 to 2.28 print them (tests/test_selfcheck_nccl_log.py builds
lines from these format strings, version by version), each after NCCL's prefix
`[timestamp] host:pid:tid [dev] NCCL INFO ` (src/debug.cc; the timestamp only where
NCCL_DEBUG_TIMESTAMP_LEVELS asks), which is not required here:

  src/transport/p2p.cc  Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/direct pointer%s
                        ... via P2P/%s%s%s        (CUMEM, or MNNVL between nodes; /read; /CE)
                        ... via P2P/IPC%s%s       ... via P2P/indirect/%d[%d]%s
  src/transport/shm.cc  Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s    (direct or CE)
  src/transport/net.cc  Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s
                        (the network's name, its device, /GDRDMA, 2.26+: (PCI), /Shared)
  src/transport/coll_net.cc  CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s
  src/init.cc           %d coll channels, %d collnet channels, %d nvls channels, ...
  src/transport/nvls.cc NVLS multicast support is %savailable on dev %d (2.27+:
                        " (NVLS_NCHANNELS %d)"); NVLS comm %p headRank %d ...

"Using network IB" (src/init.cc) alone proves nothing: NCCL names its network on every host
with an HCA, also when every peer is on the same node; "Connected all rings" and "Connected
all trees" (src/transport/generic.cc) say the rings were built, not over what.
"""

from __future__ import annotations

import re

from imagekit.contract.transports import SEPARATOR

# Every transport this parser names, in the order a summary lists them: the network between
# nodes first (TCP before RDMA), then within a node from host memory up to NVLink SHARP. A
# network plugin's own name (e.g. "Libfabric") sorts with the networks, after Socket.
ORDER = ("Socket", "IB", "CollNet", "SHM", "P2P", "MNNVL", "NVLS")

_CHANNEL = r"\bChannel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\] (?:\[(?:send|receive)\] )?via "
_NET = re.compile(_CHANNEL + r"NET/(?P<name>[^/\n]+?)/\d")
_LOCAL = re.compile(_CHANNEL + r"(?P<kind>P2P|SHM)/(?P<how>[A-Za-z]+)")
_COLLNET = re.compile(r"\bCollNet \d+/\d+ : \d+ \[(?:send|receive)\] via COLLNET/")
_NVLS_CHANNELS = re.compile(r"\b(\d+) nvls channels\b")
_NVLS_COMM = re.compile(r"\bNVLS comm \S+ headRank \d+")
_NVLS_MULTICAST = re.compile(
    r"\bNVLS multicast support is (?P<not>not )?available on dev \d+"
    r"(?: \(NVLS_NCHANNELS (?P<channels>\d+)\))?"
)


def transports_from_log(text: str) -> tuple[str, ...]:
    """Every transport NCCL connected ranks over, in ORDER; empty when the log shows none.

    "IB" is NCCL's IB verbs transport and NVIDIA's IB plugins (HPC-X's IBext_v8, ...), on
    InfiniBand or RoCE; "Socket" is TCP; another plugin keeps its name. "P2P" does not say
    NVLink or PCIe (NCCL prints the same line for both: the GPUs' links say which); "MNNVL"
    is P2P between nodes over a multi-node NVLink domain; "NVLS" where NCCL set up NVLink
    SHARP channels (its rings still show P2P)."""
    seen = {_net_name(m.group("name")) for m in _NET.finditer(text)}
    for m in _LOCAL.finditer(text):
        seen.add("MNNVL" if m.group("how") == "MNNVL" else m.group("kind"))
    if _COLLNET.search(text):
        seen.add("CollNet")
    if _nvls_set_up(text):
        seen.add("NVLS")
    return tuple(sorted(seen, key=_rank))


def transport_from_log(text: str) -> str | None:
    """transports_from_log as one snapshot reading: the names joined with "+" in ORDER
    ("IB+P2P", "SHM+P2P"), or None when the log shows no connection."""
    return SEPARATOR.join(transports_from_log(text)) or None


def _net_name(name: str) -> str:
    # NVIDIA's IB plugins name themselves IBext, IBext_v8, IBext_v9, ...
    return "IB" if name == "IB" or name.startswith("IBext") else name


def _rank(name: str) -> tuple[int, str]:
    if name not in ORDER:
        return ORDER.index("IB"), name  # another network plugin: after Socket, before IB
    return ORDER.index(name) + (name != "Socket"), name


def _nvls_set_up(text: str) -> bool:
    """The channel count NCCL settled on decides; without it (a log cut short), NVLS buffers
    set up, else multicast reported available with channels to use."""
    counts = [int(n) for n in _NVLS_CHANNELS.findall(text)]
    if counts:
        return max(counts) > 0
    if _NVLS_COMM.search(text):
        return True
    return any(
        not m.group("not") and m.group("channels") != "0" for m in _NVLS_MULTICAST.finditer(text)
    )
