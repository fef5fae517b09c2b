"""links: how fast data moves between GPUs, from the host to a GPU, and through NCCL, judged
against floors that follow the topology the host snapshot reports (NVLink generation and
active links, else the PCIe generation and width). Pure and standard library only: it judges
readings others took (copies.py: peer and host-to-device copies; ddp.py: the all-reduce, and
NCCL's transports through nccl_log.py); transports.py says which link each transport is.

Every floor is a fraction of a theoretical figure, with the source of both in FLOORS and the
tables below. Where the snapshot does not say which route a pair of GPUs takes (a 4-GPU
NVLink mesh and 4 GPUs of an NVSwitch board look the same to NVML), the stricter floor is
not judged and the finding says so: never a failure from a guessed topology.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from imagekit.contract import gpus as gpus_table
from imagekit.contract.checks import CheckResult, Status
from imagekit.contract.transports import (
    TCP_PROFILES,
    local_name,
    networks,
    split,
    transport_problem,
)
from imagekit.selfcheck.verdicts import grace
from imagekit.selfcheck.verdicts.findings import Finding, fail, result_of, skip, warn

# -- theoretical figures ---------------------------------------------------------------------

# PCIe, GB/s per lane per direction after line encoding: 8b/10b up to Gen2, 128b/130b for
# Gen3-5, FLIT mode for Gen6 (PCI-SIG base specifications; the table at
# https://en.wikipedia.org/wiki/PCI_Express#Comparison_table). x16: Gen4 31.5, Gen5 63.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_SOURCE = "PCI-SIG line rates (https://en.wikipedia.org/wiki/PCI_Express#Comparison_table)"

# NVLink, GB/s per link per direction, by the GPU architecture (compute capability major):
# P100 4 links 160 GB/s both ways, V100 6 x 50, A100 12 x 50, H100 18 x 50, B200 18 x 100
# (https://www.nvidia.com/en-us/data-center/nvlink/; hwloc's hwloc/topology-nvml.c counts
# 20 and 25 the same way). By architecture first; the snapshot's nvlink_version only as a
# fallback. That key holds the NVLink generation, not NVML's nvmlNvlinkVersion_t enum
# (2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0): nvml_links.py converts the enum with
# its NVLINK_GENERATION before the snapshot holds it (A100 3, H100 4, B200 5), so the rate
# is keyed by generation: NVLink 1.0 (P100) 20, 2.0-4.0 (V100, A100, H100) 25, 5.0 (B200)
# 50.
NVLINK_GBPS_BY_ARCH = {6: 20.0, 7: 25.0, 8: 25.0, 9: 25.0, 10: 50.0}
NVLINK_GBPS_BY_GENERATION = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
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
    # Pinned copies between host and device, each way, on PCIe Gen4 and older: a healthy
    # Gen4 x16 A100 host copies 25.1 GB/s (nvbandwidth#42; its README's sample 25.9-26.2),
    # 0.80-0.83 of 31.5; Azure's health checks require 21 GB/s (0.67) on A100 VMs
    # (conf/nd96asr_v4.conf: check_gpu_bw 21). The floor sits just under Azure's.
    "h2d": Floor(
        0.65,
        "pinned copy between host and device",
        "https://github.com/NVIDIA/nvbandwidth/issues/42; Azure/azurehpc-health-checks",
    ),
    # Gen5 and newer: a healthy H200 (PCIe Gen5 x16) copies 55.2-55.3 GB/s host to device,
    # 0.88 of the 63 GB/s line, timed alone and settled (issue 52); H100 hosts 56.7-57.1 host
    # to device (nvbandwidth#6) and 52.8 device to host (nvbandwidth#24). Azure's health
    # checks require 48 GB/s (0.76) both ways on H100/H200 VMs (conf/nd96isr_h100_v5.conf:
    # check_gpu_bw 48 335). The floor sits just under Azure's, so no host Azure passes fails
    # here, and a host at 0.44 (a copy timed right after a large free, issue 52) does.
    "h2d-gen5": Floor(
        0.75,
        "pinned copy between host and device on PCIe Gen5+",
        "imagekit: docs/selfcheck-gpu.md (issue 52); Azure/azurehpc-health-checks",
    ),
    # GH200: 346 GB/s host to device over NVLink-C2C, 0.77 of 450 (nvbandwidth's copy engine,
    # https://github.com/NVIDIA/nvbandwidth/issues/23). Half catches a copy that took PCIe's
    # speed or memory pinned on the wrong Grace, never a healthy superchip.
    "h2d-c2c": Floor(
        0.5,
        "pinned host-to-device copy over NVLink-C2C",
        "https://github.com/NVIDIA/nvbandwidth/issues/23",
    ),
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
PER_READING = frozenset({"p2p-pair", "h2d-link", "d2h-link", "nccl-busbw"})

# The floor of each transport within a node, where NVLink is not known to carry it.
LOCAL_FLOOR = {"P2P": "nccl-pcie", "SHM": "nccl-shm"}


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
    return NVLINK_GBPS_BY_GENERATION.get(gpu.get("nvlink_version"))  # type: ignore[arg-type]


def nvlink_link(gpu: dict[str, Any]) -> Link | None:
    """All the GPU's active NVLinks together, or None without any (or unread)."""
    active = gpu.get("nvlinks_active")
    rate = nvlink_rate(gpu)
    if not isinstance(active, int) or active <= 0 or rate is None:
        return None
    return Link("nvlink", active * rate, f"{active} NVLinks x {rate:g} GB/s", NVLINK_SOURCE)


def on_nvswitch(gpus: list[dict[str, Any]], transport: Any = None) -> bool:
    """Every GPU reaches every other through NVSwitch with all its links: NCCL used NVLS
    (which needs NVSwitch), or more than 4 HGX parts with NVLinks are visible."""
    if "NVLS" in split(transport):
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


def _no_peers(gpus: list[dict[str, Any]]) -> Finding:
    """No pair with peer access: one GPU has none to have; on two or more data-center GPUs
    every collective then goes through host memory, a failure. GeForce and workstation
    drivers do not enable P2P on most boards: a warning there."""
    # The GPUs the probe measured (torch's, where the snapshot says which), not every GPU
    # NVML sees: CUDA_VISIBLE_DEVICES may give this process one of them.
    measured = [g for g in gpus if "torch_index" in g]
    gpus = measured or gpus
    if len(gpus) < 2:
        return skip("p2p", "no pair of GPUs has peer access: one GPU")
    if any(g.get("mig_mode") for g in gpus):
        return skip("p2p", "MIG devices have no peer access: not judged")
    text = (
        f"no pair of the {len(gpus)} GPUs has peer access: P2P is off (a VM without peer "
        "support, the IOMMU or PCIe ACS in the way, or the driver), so every copy between GPUs "
        "goes through host memory"
    )
    names = [gpus_table.match(str(g.get("name", ""))) for g in gpus]
    if all(p is not None and p.datacenter for p in names):
        return fail("p2p-none", text)
    return warn("p2p-none", text + " (a GeForce or workstation driver may not enable P2P)")


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


# -- host copies ------------------------------------------------------------------------------

# The two ways a pinned host copy goes: its name (the snapshot's key is `<name>_gbps`, its
# rules `<name>`, `<name>-bandwidth`, `<name>-link`) and its words.
HOST_WAYS = (("h2d", "host-to-device"), ("d2h", "device-to-host"))
# A snapshot without `host_copies` was written before the copies were timed apart from the
# memory test: its host-to-device figure may hold the wake of that test's free.
UNRECORDED_CONDITIONS = (
    "; measured by a self-check that recorded no copy conditions (before issue 52 it timed the "
    "copy right after its memory test freed the GPU's memory, which halves the figure on an "
    "H200): run the self-check again"
)


def h2d_findings(snapshot: dict[str, Any]) -> list[Finding]:
    """Each GPU's pinned copies, host to device and device to host, against its host link's
    floor (PCIe by generation and width, or a Grace superchip's NVLink-C2C share)."""
    gpus = list(by_index(snapshot).values())
    if not gpus:
        return [skip("h2d", "no GPU in the snapshot")]
    note = "" if isinstance(snapshot.get("host_copies"), dict) else UNRECORDED_CONDITIONS
    found = [_host_finding(g, way, note) for g in gpus for way in HOST_WAYS]
    return [f for f in found if f is not None]


def _host_finding(gpu: dict[str, Any], way: tuple[str, str], note: str) -> Finding | None:
    way_name, words = way
    key = f"{way_name}_gbps"
    index, gbps = gpu["index"], gpu.get(key)
    if not isinstance(gbps, (int, float)):
        # A snapshot from before device-to-host was measured (no conditions) has none.
        if key == "d2h_gbps" and note:
            return None
        return skip(way_name, f"{words} bandwidth not measured", index)
    limit = host_link_limit(gpu)
    if isinstance(limit, str):
        return skip(f"{way_name}-link", f"{words} {gbps:g} GB/s; {limit}", index)
    floor, need, what, why = limit
    if gbps >= need:
        return None
    if gpu.get("host_copy_settled") is False:
        why += "; its timed batches never agreed"
    if not note and "host_copy_cpus" not in gpu and not grace.is_c2c(gpu):
        why += "; the probe's pinned memory was not placed near this GPU (its CPUs unread)"
    return fail(
        f"{way_name}-bandwidth",
        f"{words} copy at {gbps:g} GB/s, below {num(need)} GB/s ({floor.fraction:.0%} of "
        f"{what} per direction; {floor.source}): {why}{note if key == 'h2d_gbps' else ''}",
        index,
    )


def host_link_limit(gpu: dict[str, Any]) -> tuple[Floor, float, str, str] | str:
    """The floor of a pinned host copy on this GPU's host link: (floor, GB/s needed, the
    link in words, what a shortfall means), or why there is none."""
    if grace.is_c2c(gpu):
        share, what = grace.c2c_gbps(gpu)
        floor = FLOORS["h2d-c2c"]
        why = (
            "memory pinned on another Grace, a process bound to the wrong NUMA node, or the "
            "C2C link degraded (a healthy GH200 copies 346 GB/s)"
        )
        return floor, floor.fraction * share, what, why
    link = pcie_link(gpu)
    if link is None:
        return "PCIe generation and width not read"
    gen = gpu.get("pcie_max_gen") or gpu.get("pcie_gen")
    floor = FLOORS["h2d-gen5"] if isinstance(gen, int) and gen >= 5 else FLOORS["h2d"]
    why = (
        "a downtrained link, a slot wired narrower, the IOMMU in the way, or memory pinned on "
        "the far socket"
    )
    return floor, floor.fraction * link.gbps, f"{link.what} = {num(link.gbps)} GB/s", why


# -- NCCL -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    floor: Floor
    link: Link
    transport: str  # the transport whose floor this is

    @property
    def need(self) -> float:
        return self.floor.fraction * self.link.gbps


def nccl_findings(snapshot: dict[str, Any]) -> list[Finding]:
    nccl = snapshot.get("nccl")
    if not isinstance(nccl, dict):
        return [skip("nccl", "NCCL all-reduce not measured")]
    world = nccl.get("world_size")
    if not isinstance(world, int) or world < 2:
        return [skip("nccl", "bus bandwidth needs 2 or more GPUs (one rank moves no data)")]
    profile, transports = snapshot.get("profile"), split(nccl.get("transport"))
    nodes = nccl.get("nodes")
    multi_node = isinstance(nodes, int) and nodes > 1
    out: list[Finding] = []
    if problem := transport_problem(profile, transports, multi_node=multi_node):
        out.append(fail("nccl-transport", problem))
    elif not transports:
        out.append(skip("nccl-transport", "NCCL's transport not read (no NCCL_DEBUG log)"))
    out += _busbw_findings(snapshot, nccl, profile, transports)
    return out


def _busbw_findings(
    snapshot: dict[str, Any], nccl: dict[str, Any], profile: Any, transports: tuple[str, ...]
) -> list[Finding]:
    busbw = nccl.get("busbw_gbps")
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
    size = nccl.get("message_bytes")
    if isinstance(size, int) and size < BUSBW_MESSAGE_BYTES:
        note = (
            f"; the {size / 2**20:.0f} MiB message is below the {BUSBW_MESSAGE_BYTES // 2**20} MiB"
        )
        return [warn("nccl-busbw", text + note + " that bus bandwidth needs: not failed")]
    return [fail("nccl-busbw", text)]


def nccl_expectation(
    snapshot: dict[str, Any], nccl: dict[str, Any], profile: Any, transports: Any
) -> Expectation | str:
    """The floor and the link of the slowest transport the all-reduce used (a ring with P2P
    and SHM hops runs at its SHM hops' pace), or why there is none. Between nodes the
    network decides; within a node each transport's floor follows the GPUs' links."""
    seen = split(transports)
    if not seen:
        return "NCCL's transport not read"
    nodes = nccl.get("nodes")
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


def _local_expectation(name: str, gpus: list[dict[str, Any]], switch: bool) -> Expectation | str:
    if name == "NVLS" or (name == "P2P" and switch):
        link = _slowest([nvlink_link(g) for g in gpus])
        return Expectation(FLOORS["nccl-nvlink"], link, name) if link else "NVLink links not read"
    # With NVLink on some pairs a ring still crosses PCIe somewhere unless on NVSwitch; the
    # PCIe floor is the one no healthy ring falls under.
    link = _slowest([pcie_link(g) for g in gpus])
    if link is None:
        return "PCIe generation and width not read"
    return Expectation(FLOORS[LOCAL_FLOOR[name]], link, name)


def _multinode_expectation(
    nccl: dict[str, Any], profile: Any, seen: tuple[str, ...]
) -> Expectation | str:
    nets = networks(seen)
    if profile in TCP_PROFILES or "Socket" in nets:
        return "TCP sockets between nodes: measured only (no floor for Ethernet over TCP)"
    if not nets:
        return f"no network in NCCL's log ({'+'.join(seen)}): no floor between nodes"
    if any(n != "IB" for n in nets):
        return f"multi-node transport {'+'.join(n for n in nets if n != 'IB')}: no floor"
    rate = nccl.get("net_gbps")  # the node's NIC line rate, Gb/s, where the snapshot has it
    if isinstance(rate, (int, float)) and rate > 0:
        link = Link("ib", rate / 8, f"InfiniBand {rate:g} Gb/s", "the NIC's line rate")
        return Expectation(FLOORS["nccl-ib"], link, "IB")
    return "InfiniBand's rate not read: judged by the transport only"


def _slowest(links: list[Link | None]) -> Link | None:
    if not links or any(link is None for link in links):
        return None
    return min(links, key=lambda link: link.gbps)  # type: ignore[arg-type,return-value]


# -- the check ------------------------------------------------------------------------------


def check_links(snapshot: dict[str, Any]) -> CheckResult:
    gpus = list(by_index(snapshot).values())
    findings = p2p_findings(snapshot) + h2d_findings(snapshot) + nccl_findings(snapshot)
    mnnvl, mnnvl_judged = grace.mnnvl_findings(snapshot, gpus)
    findings += grace.omp_findings(snapshot, gpus) + mnnvl
    nccl = snapshot.get("nccl") if isinstance(snapshot.get("nccl"), dict) else {}
    figures = [h2d_figure(g) for g in gpus if "h2d_gbps" in g]
    if isinstance(nccl.get("sweep"), list):  # type: ignore[union-attr]
        figures.append(sweep_figure(nccl["sweep"]))  # type: ignore[index]
    layout = [f for f in map(grace.layout_figure, gpus) if f]
    return result_of(
        findings,
        judged_readings(snapshot, findings) + mnnvl_judged,
        p2p_pairs=len(snapshot.get("p2p") or []),
        nccl_transport=nccl.get("transport"),  # type: ignore[union-attr]
        nccl_busbw_GBps=nccl.get("busbw_gbps"),  # type: ignore[union-attr]
        figures="; ".join(figures),
        **({"grace": "; ".join(layout)} if layout else {}),
    )


def h2d_figure(gpu: dict[str, Any]) -> str:
    """e.g. "GPU 0: host-to-device 55.2 GB/s, device-to-host 53.1 GB/s over PCIe Gen5 x16
    (63 GB/s)"."""
    ways = f"host-to-device {gpu['h2d_gbps']} GB/s"
    if isinstance(gpu.get("d2h_gbps"), (int, float)):
        ways += f", device-to-host {gpu['d2h_gbps']} GB/s"
    if grace.is_c2c(gpu):
        _, what = grace.c2c_gbps(gpu)
        return f"GPU {gpu.get('index')}: {ways} over {what}"
    link = pcie_link(gpu)
    over = f" over {link.what} ({num(link.gbps)} GB/s)" if link else ""
    return f"GPU {gpu.get('index')}: {ways}{over}"


def sweep_figure(sweep: list[Any]) -> str:
    """e.g. "all-reduce busbw 8 MiB 91.2, 32 MiB 180, 1024 MiB 371 GB/s"."""
    points = [
        f"{p['bytes'] / 2**20:g} MiB {p['busbw_gbps']:g}"
        for p in sweep
        if isinstance(p, dict)
        and isinstance(p.get("bytes"), int)
        and isinstance(p.get("busbw_gbps"), (int, float))
    ]
    return f"all-reduce busbw {', '.join(points)} GB/s"


def judged_readings(snapshot: dict[str, Any], findings: list[Finding]) -> int:
    """Readings that met their floor or failed it: every measured one, less those a skip
    finding names (one skip per reading that could not be judged)."""
    measured = len(snapshot.get("p2p") or [])
    measured += sum(
        isinstance(g.get(key), (int, float))
        for g in by_index(snapshot).values()
        for key in (f"{name}_gbps" for name, _ in HOST_WAYS)
    )
    nccl = snapshot.get("nccl")
    if isinstance(nccl, dict) and isinstance(nccl.get("busbw_gbps"), (int, float)):
        measured += nccl.get("world_size", 0) >= 2
    unjudged = sum(f.level == Status.SKIPPED and f.rule in PER_READING for f in findings)
    return max(0, measured - unjudged)
