"""The theoretical rates of the links between GPUs and to their host, the fraction of each
that a healthy host measures (FLOORS), and the topology they follow: a GPU's PCIe and NVLink
links, and whether the GPUs sit on NVSwitch. Pure and standard library only; links.py and
host_links.py judge the readings against them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.contract.host_snapshot import Gpu, HostSnapshot
from imagekit.contract.records import or_none
from imagekit.contract.transports import split
from imagekit.selfcheck.verdicts.findings import name_of

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


# -- topology ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    kind: str  # "nvlink" or "pcie"
    gbps: float  # theoretical, per direction
    what: str  # e.g. "PCIe Gen5 x16" or "18 NVLinks x 25 GB/s"
    source: str


def pcie_link(gpu: Gpu) -> Link | None:
    """The GPU's PCIe link at its best (max gen and width where read: the current ones drop
    at idle to save power), or None when neither was read."""
    gen = gpu.pcie_max_gen or gpu.pcie_gen
    width = gpu.pcie_max_width or gpu.pcie_width
    if not isinstance(gen, int) or not isinstance(width, int) or gen not in PCIE_LANE_GBPS:
        return None
    return Link("pcie", PCIE_LANE_GBPS[gen] * width, f"PCIe Gen{gen} x{width}", PCIE_SOURCE)


def nvlink_rate(gpu: Gpu) -> float | None:
    """GB/s per NVLink per direction for this GPU, or None when it cannot be told."""
    cc = str(gpu.compute_capability or "")
    major, _, minor = cc.partition(".")
    if major.isdigit():
        if (int(major), minor) == (8, "6"):
            return NVLINK_GBPS_GA10X
        return NVLINK_GBPS_BY_ARCH.get(int(major))
    return NVLINK_GBPS_BY_GENERATION.get(or_none(gpu.nvlink_version))  # type: ignore[arg-type]


def nvlink_link(gpu: Gpu) -> Link | None:
    """All the GPU's active NVLinks together, or None without any (or unread)."""
    active = gpu.nvlinks_active
    rate = nvlink_rate(gpu)
    if not isinstance(active, int) or active <= 0 or rate is None:
        return None
    return Link("nvlink", active * rate, f"{active} NVLinks x {rate:g} GB/s", NVLINK_SOURCE)


def on_nvswitch(gpus: Sequence[Gpu], transport: Any = None) -> bool:
    """Every GPU reaches every other through NVSwitch with all its links: NCCL used NVLS
    (which needs NVSwitch), or more than 4 HGX parts with NVLinks are visible."""
    if "NVLS" in split(transport):
        return True
    hgx = [g for g in gpus if HGX_PART.search(name_of(g)) and nvlink_link(g)]
    return len(gpus) > 4 and len(hgx) == len(gpus)


def slower(a: Link | None, b: Link | None) -> Link | None:
    if a is None or b is None:
        return None
    return a if a.gbps <= b.gbps else b


def num(value: float) -> str:
    """GB/s as people write it: 12.6, 31.5, 270."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def by_index(snapshot: HostSnapshot) -> dict[int, Gpu]:
    return {g.index: g for g in snapshot.gpus or [] if isinstance(g.index, int)}
