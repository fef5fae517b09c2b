"""links: how fast data moves between GPUs, from the host to a GPU, and through NCCL, judged
against floors that follow the topology the host snapshot reports (NVLink generation and
active links, else the PCIe generation and width). Pure and standard library only: it judges
readings others took (copies.py: peer and host-to-device copies; ddp.py: the all-reduce, and
NCCL's transports through nccl_log.py); transports.py says which link each transport is.

Every floor is a fraction of a theoretical figure, with the source of both in FLOORS and the
tables of link_floors.py; the host copies are judged in host_links.py. Where the snapshot
does not say which route a pair of GPUs takes (a 4-GPU NVLink mesh and 4 GPUs of an NVSwitch
board look the same to NVML), the stricter floor is not judged and the finding says so:
never a failure from a guessed topology.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.contract import gpus as gpus_table
from imagekit.contract.checks import CheckResult, Status
from imagekit.contract.host_snapshot import Gpu, HostSnapshot, Nccl, PeerCopy, SweepPoint
from imagekit.contract.records import given, or_default, or_none
from imagekit.contract.transports import (
    TCP_PROFILES,
    local_name,
    networks,
    split,
    transport_problem,
)
from imagekit.selfcheck.verdicts import grace
from imagekit.selfcheck.verdicts.findings import Finding, fail, name_of, result_of, skip, warn
from imagekit.selfcheck.verdicts.host_links import HOST_WAYS, gbps_of, h2d_figure, h2d_findings
from imagekit.selfcheck.verdicts.link_floors import (
    FLOORS,
    Floor,
    Link,
    by_index,
    num,
    nvlink_link,
    on_nvswitch,
    pcie_link,
    slower,
)

# nccl-tests#212: "256M is too small to reach peak bandwidth"; at 512 MiB and up a healthy
# host is within FLOORS.
BUSBW_MESSAGE_BYTES = 512 * 2**20

# Skip rules that stand for one reading that was measured but could not be judged.
PER_READING = frozenset({"p2p-pair", "h2d-link", "d2h-link", "nccl-busbw"})

# The floor of each transport within a node, where NVLink is not known to carry it.
LOCAL_FLOOR = {"P2P": "nccl-pcie", "SHM": "nccl-shm"}


# -- p2p --------------------------------------------------------------------------------------


def p2p_findings(snapshot: HostSnapshot) -> list[Finding]:
    """Each ordered pair's peer copy against its route's floor: NVLink where the GPUs surely
    sit on NVSwitch; otherwise the PCIe floor, which no healthy peer route falls under."""
    pairs = or_none(snapshot.p2p)
    gpus = by_index(snapshot)
    if pairs is None:
        return [skip("p2p", "peer bandwidth not measured")]
    if not pairs:
        return [_no_peers(list(gpus.values()))]
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


def _no_peers(gpus: list[Gpu]) -> Finding:
    """No pair with peer access: one GPU has none to have; on two or more data-center GPUs
    every collective then goes through host memory, a failure. GeForce and workstation
    drivers do not enable P2P on most boards: a warning there."""
    # The GPUs the probe measured (torch's, where the snapshot says which), not every GPU
    # NVML sees: CUDA_VISIBLE_DEVICES may give this process one of them.
    measured = [g for g in gpus if given(g.torch_index)]
    gpus = measured or gpus
    if len(gpus) < 2:
        return skip("p2p", "no pair of GPUs has peer access: one GPU")
    if any(g.mig_mode for g in gpus):
        return skip("p2p", "MIG devices have no peer access: not judged")
    text = (
        f"no pair of the {len(gpus)} GPUs has peer access: P2P is off (a VM without peer "
        "support, the IOMMU or PCIe ACS in the way, or the driver), so every copy between GPUs "
        "goes through host memory"
    )
    names = [gpus_table.match(name_of(g)) for g in gpus]
    if all(p is not None and p.datacenter for p in names):
        return fail("p2p-none", text)
    return warn("p2p-none", text + " (a GeForce or workstation driver may not enable P2P)")


def _pair_finding(pair: PeerCopy, gpus: dict[int, Gpu], switch: bool) -> Finding | None:
    src, dst, gbps = or_none(pair.src), or_none(pair.dst), pair.gbps
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


# -- NCCL -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    floor: Floor
    link: Link
    transport: str  # the transport whose floor this is

    @property
    def need(self) -> float:
        return self.floor.fraction * self.link.gbps


def nccl_findings(snapshot: HostSnapshot) -> list[Finding]:
    nccl = snapshot.nccl
    if not given(nccl):
        return [skip("nccl", "NCCL all-reduce not measured")]
    world = nccl.world_size
    if not isinstance(world, int) or world < 2:
        return [skip("nccl", "bus bandwidth needs 2 or more GPUs (one rank moves no data)")]
    profile, transports = or_none(snapshot.profile), split(or_none(nccl.transport))
    nodes = nccl.nodes
    multi_node = isinstance(nodes, int) and nodes > 1
    out: list[Finding] = []
    if problem := transport_problem(profile, transports, multi_node=multi_node):
        out.append(fail("nccl-transport", problem))
    elif not transports:
        out.append(skip("nccl-transport", "NCCL's transport not read (no NCCL_DEBUG log)"))
    out += _busbw_findings(snapshot, nccl, profile, transports)
    return out


def _busbw_findings(
    snapshot: HostSnapshot, nccl: Nccl, profile: Any, transports: tuple[str, ...]
) -> list[Finding]:
    busbw = nccl.busbw_gbps
    if not isinstance(busbw, (int, float)):
        return [skip("nccl", "all-reduce bus bandwidth not measured")]
    expected = nccl_expectation(snapshot, nccl, profile, transports)
    if isinstance(expected, str):
        return [skip("nccl-busbw", f"{busbw:g} GB/s busbw measured, not judged: {expected}")]
    floor, link, need = expected.floor, expected.link, expected.need
    if busbw >= need:
        return []
    over = "+".join(transports)
    if len(transports) > 1:
        over += f" (judged by {expected.transport}, the slowest it used)"
    text = (
        f"all-reduce busbw {busbw:g} GB/s over {over}, below {num(need)} GB/s "
        f"({floor.fraction:.0%} of {link.what} = {num(link.gbps)} GB/s; {floor.source})"
    )
    size = nccl.message_bytes
    if isinstance(size, int) and size < BUSBW_MESSAGE_BYTES:
        note = (
            f"; the {size / 2**20:.0f} MiB message is below the {BUSBW_MESSAGE_BYTES // 2**20} MiB"
        )
        return [warn("nccl-busbw", text + note + " that bus bandwidth needs: not failed")]
    return [fail("nccl-busbw", text)]


def nccl_expectation(
    snapshot: HostSnapshot, nccl: Nccl, profile: Any, transports: Any
) -> Expectation | str:
    """The floor and the link of the slowest transport the all-reduce used (a ring with P2P
    and SHM hops runs at its SHM hops' pace), or why there is none. Between nodes the
    network decides; within a node each transport's floor follows the GPUs' links."""
    seen = split(transports)
    if not seen:
        return "NCCL's transport not read"
    nodes = nccl.nodes
    if (isinstance(nodes, int) and nodes > 1) or any(local_name(t) is None for t in seen):
        return _multinode_expectation(nccl, profile, seen)
    gpus = list(by_index(snapshot).values())
    if not gpus:
        return "no GPU in the snapshot"
    switch = on_nvswitch(gpus, seen)
    names = sorted({str(local_name(t)) for t in seen})
    each = [_local_expectation(name, gpus, switch) for name in names]
    unread = [e for e in each if isinstance(e, str)]
    if unread:  # the slowest hop cannot be told
        return unread[0]
    return min(each, key=lambda e: (e.need, e.transport))  # type: ignore[union-attr]


def _local_expectation(name: str, gpus: list[Gpu], switch: bool) -> Expectation | str:
    if name == "NVLS" or (name == "P2P" and switch):
        link = _slowest([nvlink_link(g) for g in gpus])
        return Expectation(FLOORS["nccl-nvlink"], link, name) if link else "NVLink links not read"
    # With NVLink on some pairs a ring still crosses PCIe somewhere unless on NVSwitch; the
    # PCIe floor is the one no healthy ring falls under.
    link = _slowest([pcie_link(g) for g in gpus])
    if link is None:
        return "PCIe generation and width not read"
    return Expectation(FLOORS[LOCAL_FLOOR[name]], link, name)


def _multinode_expectation(nccl: Nccl, profile: Any, seen: tuple[str, ...]) -> Expectation | str:
    nets = networks(seen)
    if profile in TCP_PROFILES or "Socket" in nets:
        return "TCP sockets between nodes: measured only (no floor for Ethernet over TCP)"
    if not nets:
        return f"no network in NCCL's log ({'+'.join(seen)}): no floor between nodes"
    if any(n != "IB" for n in nets):
        return f"multi-node transport {'+'.join(n for n in nets if n != 'IB')}: no floor"
    rate = nccl.net_gbps  # the node's NIC line rate, Gb/s, where the snapshot has it
    if isinstance(rate, (int, float)) and rate > 0:
        link = Link("ib", rate / 8, f"InfiniBand {rate:g} Gb/s", "the NIC's line rate")
        return Expectation(FLOORS["nccl-ib"], link, "IB")
    return "InfiniBand's rate not read: judged by the transport only"


def _slowest(links: list[Link | None]) -> Link | None:
    if not links or any(link is None for link in links):
        return None
    return min(links, key=lambda link: link.gbps)  # type: ignore[arg-type,return-value]


# -- the check ------------------------------------------------------------------------------


def check_links(snapshot: HostSnapshot) -> CheckResult:
    gpus = list(by_index(snapshot).values())
    findings = p2p_findings(snapshot) + h2d_findings(snapshot) + nccl_findings(snapshot)
    mnnvl, mnnvl_judged = grace.mnnvl_findings(snapshot, gpus)
    findings += grace.omp_findings(snapshot, gpus) + mnnvl
    nccl = or_default(snapshot.nccl, Nccl())
    figures = [h2d_figure(g) for g in gpus if given(g.h2d_gbps)]
    if given(nccl.sweep):
        figures.append(sweep_figure(nccl.sweep))
    layout = [f for f in map(grace.layout_figure, gpus) if f]
    return result_of(
        findings,
        judged_readings(snapshot, findings) + mnnvl_judged,
        p2p_pairs=len(snapshot.p2p or []),
        nccl_transport=or_none(nccl.transport),
        nccl_busbw_GBps=or_none(nccl.busbw_gbps),
        figures="; ".join(figures),
        **({"grace": "; ".join(layout)} if layout else {}),
    )


def sweep_figure(sweep: Sequence[SweepPoint]) -> str:
    """e.g. "all-reduce busbw 8 MiB 91.2, 32 MiB 180, 1024 MiB 371 GB/s"."""
    points = [
        f"{p.bytes / 2**20:g} MiB {p.busbw_gbps:g}"
        for p in sweep
        if isinstance(p.bytes, int) and isinstance(p.busbw_gbps, (int, float))
    ]
    return f"all-reduce busbw {', '.join(points)} GB/s"


def judged_readings(snapshot: HostSnapshot, findings: list[Finding]) -> int:
    """Readings that met their floor or failed it: every measured one, less those a skip
    finding names (one skip per reading that could not be judged)."""
    measured = len(snapshot.p2p or [])
    measured += sum(
        isinstance(gbps_of(g, name), (int, float))
        for g in by_index(snapshot).values()
        for name, _ in HOST_WAYS
    )
    nccl = snapshot.nccl
    if nccl and isinstance(nccl.busbw_gbps, (int, float)):
        measured += or_default(nccl.world_size, 0) >= 2
    unjudged = sum(f.level == Status.SKIPPED and f.rule in PER_READING for f in findings)
    return max(0, measured - unjudged)
