"""Which kind of link each NCCL transport is, and what a launch profile promises about the
link between nodes. Pure and standard library only: the links verdict (over the host
snapshot) and the multi-node probe (which must exit non-zero in a Slurm job on its own, and
whose verdict the host takes as written) ask the same question here, so neither imports the
other's module.

A reading of the transport is nccl_log.transport_from_log's: every transport NCCL used,
joined with "+" ("IB+P2P"); older snapshots hold one name ("NVLS", "P2P/NVLink").
"""

from __future__ import annotations

from collections.abc import Iterable

# How a run that used several transports writes them in one reading ("NVLS+IB"): the
# NCCL log reader joins with it, the verdicts split by it.
SEPARATOR = "+"

# Within one node. The snapshot schema's P2P/NVLink and P2P/PCIe are P2P.
WITHIN_NODE = frozenset({"NVLS", "P2P", "SHM"})
# Between nodes without a network: P2P over a multi-node NVLink domain (GB200 NVL72).
NVLINK_BETWEEN_NODES = frozenset({"MNNVL"})
# In-network reduction (SHARP): rides the network; NCCL's rings still show the network.
OFFLOAD = frozenset({"CollNet"})
RDMA = frozenset({"IB"})  # NCCL's IB verbs transport: InfiniBand or RoCE
# multi-node-nvlink: NVLink between the nodes of one rack (MNNVL), InfiniBand between racks.
RDMA_PROFILES = frozenset({"multi-node-ib", "multi-node-nvlink"})
NVLINK_PROFILES = frozenset({"multi-node-nvlink"})
FIX_MNNVL = (
    "NCCL 2.25.2+, an IMEX channel in the container, NCCL_MNNVL_ENABLE and NCCL_CUMEM_ENABLE "
    "not 0, the nodes in one NVLink domain (the links check says which is missing)"
)
TCP_PROFILES = frozenset({"multi-node-ethernet", "multi-node-tcp"})
# What the multi-node check records for gloo, which has no log to read: PyTorch's gloo
# backend moves tensors over TCP sockets (its only transport in PyTorch's Linux builds).
GLOO_TRANSPORT = "gloo/TCP"
FIX_RDMA = "check NCCL_IB_HCA, the RDMA device plugin, /dev/infiniband"


def split(reading: str | Iterable[str] | None) -> tuple[str, ...]:
    """The transports of one reading: "IB+P2P", a list of names, or None (not read)."""
    if reading is None:
        return ()
    names = reading.split(SEPARATOR) if isinstance(reading, str) else list(reading)
    return tuple(dict.fromkeys(n.strip() for n in names if n and n.strip()))


def local_name(name: str) -> str | None:
    """NVLS, P2P or SHM for a transport within a node, else None."""
    if name.startswith("P2P/"):  # the schema's P2P/NVLink and P2P/PCIe
        name = "P2P"
    return name if name in WITHIN_NODE else None


def networks(reading: str | Iterable[str] | None) -> tuple[str, ...]:
    """The network transports between nodes in a reading (IB, Socket, a plugin's name)."""
    return tuple(
        n
        for n in split(reading)
        if local_name(n) is None and n not in NVLINK_BETWEEN_NODES | OFFLOAD
    )


def transport_problem(
    profile: str | None, reading: str | Iterable[str] | None, multi_node: bool = False
) -> str:
    """What breaks the profile's promise, "" when nothing does. A multi-node-ib image must
    move data between nodes over InfiniBand/RDMA, judged by its weakest hop: any other
    network NCCL used (Socket: TCP) fails. A multi-node-nvlink image likewise, and a run over
    several nodes must show MNNVL (a job across racks adds IB between them). Where the run
    spanned nodes (`multi_node`), the log must also show the link between them: no transport
    read, or only transports within a node, is no proof of RDMA and fails too. Within one node
    nothing is promised."""
    if profile not in RDMA_PROFILES:
        return ""
    seen = split(reading)
    slow = [n for n in networks(seen) if n not in RDMA]
    if slow:
        return f"NCCL used {'+'.join(slow)}, profile {profile} needs InfiniBand/RDMA ({FIX_RDMA})"
    if profile in NVLINK_PROFILES and multi_node and not set(seen) & NVLINK_BETWEEN_NODES:
        shown = "+".join(seen) or "no transport"
        return (
            f"NCCL's log shows {shown}, not MNNVL: profile {profile} moves data between the "
            f"rack's nodes over multi-node NVLink ({FIX_MNNVL})"
        )
    if not multi_node or set(seen) & (RDMA | NVLINK_BETWEEN_NODES | OFFLOAD):
        return ""
    shown = f"only {'+'.join(seen)}, no network between the nodes" if seen else "no connection"
    return (
        f"NCCL's log shows {shown}: nothing proves the InfiniBand/RDMA that profile {profile} "
        f"needs ({FIX_RDMA})"
    )
