"""links: how fast data moves between GPUs, from the host to a GPU, and through NCCL, judged
against floors that follow the topology the host snapshot reports (NVLink generation and
active links, else the PCIe generation and width). Standard library only; the two readers
(measure_p2p, measure_h2d) take torch as an argument and are the only code that touches it.

Every floor is a fraction of a theoretical figure, with the source of both in FLOORS and the
tables below. Where the snapshot does not say which route a pair of GPUs takes (a 4-GPU
NVLink mesh and 4 GPUs of an NVSwitch board look the same to NVML), the stricter floor is
not judged and the finding says so: never a failure from a guessed topology.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from imagekit.selfcheck.findings import SKIP, Finding, fail, result_of, skip, warn
from imagekit.selfcheck.results import Result

COPY_BYTES = 256 * 2**20  # big enough that launch overhead is noise (<1% at 400 GB/s)
COPY_REPEAT = 5

# -- theoretical figures ---------------------------------------------------------------------

# PCIe, GB/s per lane per direction after line encoding: 8b/10b up to Gen2, 128b/130b for
# Gen3-5, FLIT mode for Gen6 (PCI-SIG base specifications; the table at
# https://en.wikipedia.org/wiki/PCI_Express#Comparison_table). x16: Gen4 31.5, Gen5 63.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_SOURCE = "PCI-SIG line rates (https://en.wikipedia.org/wiki/PCI_Express#Comparison_table)"

# NVLink, GB/s per link per direction, by the GPU architecture (compute capability major):
# P100 4 links 160 GB/s both ways, V100 6 x 50, A100 12 x 50, H100 18 x 50, B200 18 x 100
# (https://www.nvidia.com/en-us/data-center/nvlink/; hwloc's hwloc/topology-nvml.c counts
# 20 and 25 the same way). By architecture first, NVML's nvlink_version only as a fallback:
# that number is an enum whose encoding changed (hwloc reads 1-4 for P100-H100; nvml.h's
# nvmlNvlinkVersion_t has 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0). Both
# encodings agree on the rate below except 7, which only the newer one uses (NVLink 5.0).
NVLINK_GBPS_BY_ARCH = {6: 20.0, 7: 25.0, 8: 25.0, 9: 25.0, 10: 50.0}
NVLINK_GBPS_BY_VERSION = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}
NVLINK_SOURCE = "NVLink per-link rates (https://www.nvidia.com/en-us/data-center/nvlink/)"
# GA10x boards (A40, RTX A6000: compute capability 8.6) bridge 4 links for 112.5 GB/s both
# ways: 14.06 GB/s per link per direction (A40 datasheet), not GA100's 25.
NVLINK_GBPS_GA10X = 14.06

# Parts that only come on HGX baseboards. With more than 4 of them visible the board is the
# 8-GPU one, whose every GPU reaches every other through NVSwitch with all its links (HGX
# A100/H100/H200/B200 8-GPU). 4-GPU HGX boards have no NVSwitch: each pair shares a third of
# the links (4 x H100: NV6 per pair, https://github.com/NVIDIA/cuda-samples/issues/392).
HGX_PART = re.compile(r"SXM|H100 80GB HBM3|H800$|H200$|H20$|B200$|B300", re.IGNORECASE)


@dataclass(frozen=True)
class Floor:
    fraction: float  # of the theoretical figure
    why: str
    source: str


# The fractions, each with what a healthy host measures (sources are public reports).
FLOORS = {
    # HGX H100: 371-376 GB/s unidirectional peer writes, 83% of 18 x 25 = 450
    # (p2pBandwidthLatencyTest, https://github.com/NVIDIA/nccl/issues/1264).
    "p2p-nvlink": Floor(
        0.6, "peer copy over NVSwitch", "https://github.com/NVIDIA/nccl/issues/1264"
    ),
    # Peer copies through a PCIe switch or root complex reach 70-85% of the link; a broken
    # route gives a fraction (P2P on at 9.9 GB/s, slower than through host memory at 22:
    # https://github.com/NVIDIA/nccl/issues/814). Lenient: routes through the CPU differ.
    "p2p-pcie": Floor(0.4, "peer copy over PCIe", "https://github.com/NVIDIA/nccl/issues/814"),
    # Pinned host-to-device copies reach 75-85% of the link (Gen4 x16: 24-26 GB/s; HGX H100
    # Gen5 x16: 37 GB/s through host memory both ways, nccl#1264's P2P=Disabled matrix).
    "h2d": Floor(0.5, "pinned host-to-device copy", "https://github.com/NVIDIA/nccl/issues/1264"),
    # NVLS all-reduce on 8 x H100 peaks at ~480 GB/s busbw (107% of the 450 GB/s line
    # rate); rings reach ~370 (82%) (NCCL's maintainer, nccl-tests#212). H800 (8 links,
    # 200 GB/s): 215 GB/s busbw with NVLS (nccl#1374).
    "nccl-nvlink": Floor(
        0.6, "all-reduce over NVSwitch", "https://github.com/NVIDIA/nccl-tests/issues/212"
    ),
    # A PCIe ring moves each byte over the link once per direction: busbw near the link's
    # achievable rate with P2P, lower through host memory (SHM: copied in and out).
    "nccl-pcie": Floor(0.4, "all-reduce over PCIe (P2P)", "imagekit: as p2p-pcie"),
    "nccl-shm": Floor(0.2, "all-reduce through host memory (SHM)", "imagekit: half of nccl-pcie"),
    # Multi-node all-reduce busbw approaches the node's NIC line rate (bytes) per GPU rail.
    "nccl-ib": Floor(
        0.5, "all-reduce over InfiniBand", "https://github.com/NVIDIA/nccl-tests/issues/212"
    ),
}

# nccl-tests#212: "256M is too small to reach peak bandwidth"; at 512 MiB and up a healthy
# host is within the floors above.
BUSBW_MESSAGE_BYTES = 512 * 2**20

# Skip rules that stand for one reading that was measured but could not be judged.
PER_READING = frozenset({"p2p-pair", "h2d-link", "nccl-busbw"})

INTRA_NODE = frozenset({"NVLS", "P2P", "SHM", "P2P/NVLink", "P2P/PCIe"})
RDMA_PROFILES = frozenset({"multi-node-ib"})
TCP_PROFILES = frozenset({"multi-node-ethernet", "multi-node-tcp"})
# What the multi-node check records for gloo, which has no log to read: PyTorch's gloo
# backend moves tensors over TCP sockets (its only transport in PyTorch's Linux builds).
GLOO_TRANSPORT = "gloo/TCP"


# -- live readers (torch passed in; not run here: no GPU) ------------------------------------


def measure_p2p(torch: Any) -> list[dict[str, Any]]:
    """Peer copy GB/s for every ordered pair of GPUs with peer access."""
    count = torch.cuda.device_count()
    pairs = []
    for src in range(count):
        for dst in range(count):
            if src != dst and torch.cuda.can_device_access_peer(src, dst):
                gbps = _timed_copy(torch, src, f"cuda:{src}", f"cuda:{dst}")
                pairs.append({"src": src, "dst": dst, "gbps": round(gbps, 1)})
    return pairs


def measure_h2d(torch: Any, index: int) -> float:
    """Pinned host -> device GB/s on GPU `index`."""
    return round(_timed_copy(torch, index, "pinned", f"cuda:{index}"), 1)


def _timed_copy(torch: Any, index: int, source: str, target: str) -> float:
    """GB/s of COPY_REPEAT copies, timed with CUDA events on GPU `index`'s stream after a
    warm-up (which also enables peer access or maps the pinned pages)."""
    if source == "pinned":
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    else:
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=source)
    dst = torch.empty(COPY_BYTES, dtype=torch.uint8, device=target)
    with torch.cuda.device(index):  # torch copies between GPUs on the source GPU's stream
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(COPY_REPEAT):
            dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    return COPY_BYTES * COPY_REPEAT / seconds / 1e9


# -- topology ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    kind: str  # "nvlink" or "pcie"
    gbps: float  # theoretical, per direction
    what: str  # e.g. "PCIe Gen5 x16" or "18 NVLinks x 25 GB/s"
    source: str


def pcie_link(gpu: dict[str, Any]) -> Link | None:
    """The GPU's PCIe link at its best (max gen and width where read: the current ones drop
    at idle to save power), or None when neither was read."""
    gen = gpu.get("pcie_max_gen") or gpu.get("pcie_gen")
    width = gpu.get("pcie_max_width") or gpu.get("pcie_width")
    if not isinstance(gen, int) or not isinstance(width, int) or gen not in PCIE_LANE_GBPS:
        return None
    return Link("pcie", PCIE_LANE_GBPS[gen] * width, f"PCIe Gen{gen} x{width}", PCIE_SOURCE)


def nvlink_rate(gpu: dict[str, Any]) -> float | None:
    """GB/s per NVLink per direction for this GPU, or None when it cannot be told."""
    cc = str(gpu.get("compute_capability") or "")
    major, _, minor = cc.partition(".")
    if major.isdigit():
        if (int(major), minor) == (8, "6"):
            return NVLINK_GBPS_GA10X
        return NVLINK_GBPS_BY_ARCH.get(int(major))
    return NVLINK_GBPS_BY_VERSION.get(gpu.get("nvlink_version"))  # type: ignore[arg-type]


def nvlink_link(gpu: dict[str, Any]) -> Link | None:
    """All the GPU's active NVLinks together, or None without any (or unread)."""
    active = gpu.get("nvlinks_active")
    rate = nvlink_rate(gpu)
    if not isinstance(active, int) or active <= 0 or rate is None:
        return None
    return Link("nvlink", active * rate, f"{active} NVLinks x {rate:g} GB/s", NVLINK_SOURCE)


def on_nvswitch(gpus: list[dict[str, Any]], transport: str | None = None) -> bool:
    """Every GPU reaches every other through NVSwitch with all its links: NCCL used NVLS
    (which needs NVSwitch), or more than 4 HGX parts with NVLinks are visible."""
    if transport == "NVLS":
        return True
    hgx = [g for g in gpus if HGX_PART.search(str(g.get("name", ""))) and nvlink_link(g)]
    return len(gpus) > 4 and len(hgx) == len(gpus)


def slower(a: Link | None, b: Link | None) -> Link | None:
    if a is None or b is None:
        return None
    return a if a.gbps <= b.gbps else b


def num(value: float) -> str:
    """GB/s as people write it: 12.6, 31.5, 270."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def by_index(snapshot: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {g["index"]: g for g in snapshot.get("gpus") or [] if isinstance(g.get("index"), int)}


# -- p2p --------------------------------------------------------------------------------------


def p2p_findings(snapshot: dict[str, Any]) -> list[Finding]:
    """Each ordered pair's peer copy against its route's floor: NVLink where the GPUs surely
    sit on NVSwitch; otherwise the PCIe floor, which no healthy peer route falls under."""
    pairs = snapshot.get("p2p")
    gpus = by_index(snapshot)
    if pairs is None:
        return [skip("p2p", "peer bandwidth not measured")]
    if not pairs:
        return [skip("p2p", "no pair of GPUs has peer access (one GPU, or P2P unsupported)")]
    switch = on_nvswitch(list(gpus.values()))
    out = [_pair_finding(pair, gpus, switch) for pair in pairs]
    if not switch and any(nvlink_link(g) for g in gpus.values()):
        out.append(
            skip(
                "p2p-nvlink",
                "NVLink pairs judged by the PCIe floor only: which pairs share how many "
                "NVLinks is not in the snapshot (not on an 8-GPU NVSwitch board)",
            )
        )
    return [f for f in out if f is not None]


def _pair_finding(
    pair: dict[str, Any], gpus: dict[int, dict[str, Any]], switch: bool
) -> Finding | None:
    src, dst, gbps = pair.get("src"), pair.get("dst"), pair.get("gbps")
    a, b = gpus.get(src), gpus.get(dst)  # type: ignore[arg-type]
    if a is None or b is None or not isinstance(gbps, (int, float)):
        return skip("p2p-pair", f"pair {src}->{dst}: GPU or reading missing from the snapshot")
    if switch:
        link, floor = slower(nvlink_link(a), nvlink_link(b)), FLOORS["p2p-nvlink"]
    else:
        link, floor = slower(pcie_link(a), pcie_link(b)), FLOORS["p2p-pcie"]
    if link is None:
        return skip("p2p-pair", f"pair {src}->{dst}: link generation and width not read", src)
    need = floor.fraction * link.gbps
    if gbps >= need:
        return None
    return fail(
        "p2p-bandwidth",
        f"peer copy to GPU {dst} at {gbps:g} GB/s, below {num(need)} GB/s "
        f"({floor.fraction:.0%} of {link.what} = {num(link.gbps)} GB/s per direction; "
        f"{floor.source})",
        src,
    )


# -- h2d --------------------------------------------------------------------------------------


def h2d_findings(snapshot: dict[str, Any]) -> list[Finding]:
    """Each GPU's pinned host-to-device copy against its PCIe link's floor."""
    gpus = list(by_index(snapshot).values())
    if not gpus:
        return [skip("h2d", "no GPU in the snapshot")]
    return [f for f in (_h2d_finding(g) for g in gpus) if f is not None]


def _h2d_finding(gpu: dict[str, Any]) -> Finding | None:
    index, gbps = gpu["index"], gpu.get("h2d_gbps")
    if not isinstance(gbps, (int, float)):
        return skip("h2d", "host-to-device bandwidth not measured", index)
    if "GH200" in str(gpu.get("name", "")) or "GB200" in str(gpu.get("name", "")):
        return skip("h2d-link", "the host link is NVLink-C2C, not PCIe: not judged", index)
    link = pcie_link(gpu)
    if link is None:
        return skip("h2d-link", f"{gbps:g} GB/s; PCIe generation and width not read", index)
    floor = FLOORS["h2d"]
    need = floor.fraction * link.gbps
    if gbps >= need:
        return None
    return fail(
        "h2d-bandwidth",
        f"host-to-device copy at {gbps:g} GB/s, below {num(need)} GB/s "
        f"({floor.fraction:.0%} of {link.what} = {num(link.gbps)} GB/s per direction): a "
        "downtrained link, a slot wired narrower, or memory pinned on the far socket",
        index,
    )


# -- NCCL -------------------------------------------------------------------------------------


def transport_problem(profile: str | None, transport: str | None) -> str:
    """The profile's transport rule, "" when kept: a multi-node-ib image must move data
    between nodes over InfiniBand/RDMA, so any other network NCCL used there (Socket: TCP)
    is a failure. Transports within a node (NVLS, P2P, SHM) and an unread one are no
    evidence either way."""
    if profile not in RDMA_PROFILES or transport is None:
        return ""
    if transport == "IB" or transport in INTRA_NODE:
        return ""
    return (
        f"NCCL used {transport}, profile {profile} needs InfiniBand/RDMA (check NCCL_IB_HCA, "
        "the RDMA device plugin, /dev/infiniband)"
    )


def nccl_findings(snapshot: dict[str, Any]) -> list[Finding]:
    nccl = snapshot.get("nccl")
    if not isinstance(nccl, dict):
        return [skip("nccl", "NCCL all-reduce not measured")]
    world = nccl.get("world_size")
    if not isinstance(world, int) or world < 2:
        return [skip("nccl", "bus bandwidth needs 2 or more GPUs (one rank moves no data)")]
    profile, transport = snapshot.get("profile"), nccl.get("transport")
    out: list[Finding] = []
    if problem := transport_problem(profile, transport):
        out.append(fail("nccl-transport", problem))
    if transport is None:
        out.append(skip("nccl-transport", "NCCL's transport not read (no NCCL_DEBUG log)"))
    out += _busbw_findings(snapshot, nccl, profile, transport)
    return out


def _busbw_findings(
    snapshot: dict[str, Any], nccl: dict[str, Any], profile: Any, transport: Any
) -> list[Finding]:
    busbw = nccl.get("busbw_gbps")
    if not isinstance(busbw, (int, float)):
        return [skip("nccl", "all-reduce bus bandwidth not measured")]
    expected = nccl_expectation(snapshot, nccl, profile, transport)
    if isinstance(expected, str):
        return [skip("nccl-busbw", f"{busbw:g} GB/s busbw measured, not judged: {expected}")]
    floor, link = expected
    need = floor.fraction * link.gbps
    if busbw >= need:
        return []
    text = (
        f"all-reduce busbw {busbw:g} GB/s over {transport}, below {num(need)} GB/s "
        f"({floor.fraction:.0%} of {link.what} = {num(link.gbps)} GB/s; {floor.source})"
    )
    size = nccl.get("message_bytes")
    if isinstance(size, int) and size < BUSBW_MESSAGE_BYTES:
        note = (
            f"; the {size / 2**20:.0f} MiB message is below the {BUSBW_MESSAGE_BYTES // 2**20} MiB"
        )
        return [warn("nccl-busbw", text + note + " that bus bandwidth needs: not failed")]
    return [fail("nccl-busbw", text)]


def nccl_expectation(
    snapshot: dict[str, Any], nccl: dict[str, Any], profile: Any, transport: Any
) -> tuple[Floor, Link] | str:
    """The floor and the link for the topology the all-reduce ran on, or why there is none."""
    gpus = list(by_index(snapshot).values())
    nodes = nccl.get("nodes")
    if transport is None:
        return "NCCL's transport not read"
    if (isinstance(nodes, int) and nodes > 1) or transport not in INTRA_NODE:
        return _multinode_expectation(nccl, profile, transport)
    if transport.startswith("P2P"):  # the schema's P2P/NVLink and P2P/PCIe: the links decide
        transport = "P2P"
    if not gpus:
        return "no GPU in the snapshot"
    if transport == "NVLS" or (transport == "P2P" and on_nvswitch(gpus)):
        link = _slowest([nvlink_link(g) for g in gpus])
        return (FLOORS["nccl-nvlink"], link) if link else "NVLink links not read"
    if transport in ("P2P", "SHM"):
        link = _slowest([pcie_link(g) for g in gpus])
        if link is None:
            return "PCIe generation and width not read"
        # With NVLink on some pairs a ring still crosses PCIe somewhere unless on NVSwitch;
        # the PCIe floor is the one no healthy ring falls under.
        return (FLOORS["nccl-pcie" if transport == "P2P" else "nccl-shm"], link)
    return f"transport {transport} has no floor here"


def _multinode_expectation(
    nccl: dict[str, Any], profile: Any, transport: Any
) -> tuple[Floor, Link] | str:
    if profile in TCP_PROFILES or transport == "Socket":
        return "TCP sockets between nodes: measured only (no floor for Ethernet over TCP)"
    rate = nccl.get("net_gbps")  # the node's NIC line rate, Gb/s, where the snapshot has it
    if transport == "IB" and isinstance(rate, (int, float)) and rate > 0:
        link = Link("ib", rate / 8, f"InfiniBand {rate:g} Gb/s", "the NIC's line rate")
        return FLOORS["nccl-ib"], link
    if transport == "IB":
        return "InfiniBand's rate not read: judged by the transport only"
    return f"multi-node transport {transport}: no floor"


def _slowest(links: list[Link | None]) -> Link | None:
    if not links or any(link is None for link in links):
        return None
    return min(links, key=lambda link: link.gbps)  # type: ignore[arg-type,return-value]


# -- NCCL's log -------------------------------------------------------------------------------

# Real lines (NCCL_DEBUG=INFO), e.g.
#   host:4015539:4015652 [0] NCCL INFO Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA
#   host:1884:2298 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1
#   host:9621:9692 [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0
#   host:5666:5808 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[4] via P2P/CUMEM
#   host:533:1765 [2] NCCL INFO Channel 07 : 2[6] -> 3[7] via SHM/direct/direct
#   host:33347:33366 [6] NCCL INFO 16 coll channels, 0 nvls channels, 16 p2p channels, ...
#   host:5668:5722 [5] NCCL INFO NVLS multicast support is available on dev 5
_VIA = re.compile(r"NCCL INFO Channel [0-9/]+ : .* via (NET/([^/\s][^/]*)|P2P|SHM|COLLNET)")
_NVLS_CHANNELS = re.compile(r"NCCL INFO (\d+) nvls channels|NCCL INFO .*, (\d+) nvls channels")
_NVLS_USED = re.compile(r"NCCL INFO NVLS comm 0x|NVLS multicast support is available")


def transport_from_log(text: str) -> str | None:
    """What NCCL moved the data over, from its own INFO log: the network between nodes when
    there was one ("IB", "Socket", or a plugin's name), else "NVLS" where NCCL set up NVLink
    SHARP, else "P2P" or "SHM" within the node; None when the log shows no connection.

    "P2P" does not say NVLink or PCIe (NCCL prints the same line for both): the judge reads
    that from the GPUs' links. "Using network IB" alone proves nothing: NCCL names its
    network on every host with an HCA, also when every peer is on the same node."""
    routes = {m.group(2) or m.group(1) for m in _VIA.finditer(text)}
    nets = {_net_name(r) for r in routes if r not in ("P2P", "SHM", "COLLNET")}
    if nets:
        for name in ("IB", "Socket"):
            if name in nets:
                return name
        return sorted(nets)[0]
    if _nvls_set_up(text):
        return "NVLS"
    if "P2P" in routes:
        return "P2P"
    if "SHM" in routes:
        return "SHM"
    return None


def _net_name(route: str) -> str:
    # NVIDIA's HPC-X plugin calls its IB transport IBext_v8, IBext_v9, ...
    return "IB" if route == "IB" or route.startswith("IBext") else route


def _nvls_set_up(text: str) -> bool:
    counts = [int(a or b) for a, b in _NVLS_CHANNELS.findall(text)]
    if counts:
        return max(counts) > 0
    return bool(_NVLS_USED.search(text))


# -- the check ------------------------------------------------------------------------------


def check_links(snapshot: dict[str, Any]) -> Result:
    findings = p2p_findings(snapshot) + h2d_findings(snapshot) + nccl_findings(snapshot)
    nccl = snapshot.get("nccl") if isinstance(snapshot.get("nccl"), dict) else {}
    return result_of(
        findings,
        judged_readings(snapshot, findings),
        p2p_pairs=len(snapshot.get("p2p") or []),
        nccl_transport=nccl.get("transport"),  # type: ignore[union-attr]
        nccl_busbw_GBps=nccl.get("busbw_gbps"),  # type: ignore[union-attr]
    )


def judged_readings(snapshot: dict[str, Any], findings: list[Finding]) -> int:
    """Readings that met their floor or failed it: every measured one, less those a skip
    finding names (one skip per reading that could not be judged)."""
    measured = len(snapshot.get("p2p") or [])
    measured += sum(
        isinstance(g.get("h2d_gbps"), (int, float)) for g in by_index(snapshot).values()
    )
    nccl = snapshot.get("nccl")
    if isinstance(nccl, dict) and isinstance(nccl.get("busbw_gbps"), (int, float)):
        measured += nccl.get("world_size", 0) >= 2
    unjudged = sum(f.level == SKIP and f.rule in PER_READING for f in findings)
    return max(0, measured - unjudged)
