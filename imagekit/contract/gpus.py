"""NVIDIA GPU products, one table with one matching rule: compute capability, whether the part
is a data-center one, and where known its dense datasheet peaks and the floors a healthy card
reaches. Pure data and functions, standard library only.

`match` takes a device name as NVML or torch report it ("NVIDIA H100 80GB HBM3", "Tesla T4")
or a short one a user types ("H100", "rtx 5090"), normalises it, and returns the first row
whose pattern matches the WHOLE name, and whose memory range holds the memory where a range
decides (A100 40 GB vs 80 GB). So "H100 NVL" is not an H100 SXM, "T400" is not a T4, "A10G"
is not an A10. The rows with peaks come first; each family's catch-all row ("H100" and
anything after it) comes last and carries the capability only, so a variant without known
peaks still has its capability and is measured without a datasheet comparison.

Sources (read 2026-11-23): capability: NVIDIA's "CUDA GPUs - Compute Capability" table
(developer.nvidia.com/cuda-gpus); data-center: the CUDA Compatibility guide, "Forward
Compatibility" (docs.nvidia.com/deploy/cuda-compatibility): the forward-compatibility
package works on data-center GPUs (and select NGC Server Ready RTX SKUs), not on GeForce or
workstation RTX cards; peaks: each row names its datasheet (DS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DS = {
    "a100": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    "h100": "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    "h200": "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446",
    "gh200": "https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip",
    "b200": "https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet (HGX B200, per GPU)",
    "l40s": "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
    "l4": "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet",
    "a10": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf",
    "t4": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
    "v100": "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
}


# A floor is the fraction of the datasheet figure a healthy card of the model reaches, less a
# margin of 0.10 for clocks, cooling and driver variation. Where no measurement is known, the
# defaults: low enough that no healthy part fails (the lowest healthy GEMM known is the L4's
# 0.49, power-capped at 72 W; HBM copies reach 0.85-0.90), high enough to catch a GPU stuck
# at idle clocks or behind a broken memory subsystem.
DEFAULT_GEMM_FLOOR = 0.40
DEFAULT_BANDWIDTH_FLOOR = 0.60
DEFAULT_FLOOR_SOURCE = "no measurement: default"

FLOORS = {  # model family -> (gemm floor, bandwidth floor, source)
    "h100": (
        0.70,
        0.80,
        "this project's H100 SXM runs (docs/selfcheck-gpu.md): bf16 GEMM 781-802 TFLOP/s = "
        "0.79-0.81 of 989, copy 2.98-3.00 TB/s = 0.89-0.90 of 3.35; less 0.10",
    ),
    "h200": (
        # Random bf16 data holds the H200 at its 700 W default power limit (sw_power_cap):
        # sustained 655-676 TFLOP/s, where constant data runs at 771 within 430 W, and a
        # short run before the cap bites reads up to 787; judged by the sustained figure.
        0.56,
        0.80,
        "this project's H200 runs (docs/selfcheck-gpu.md, 2026-11-26): bf16 GEMM of random "
        "data sustained 655-676 TFLOP/s = 0.66-0.68 of 989 at the 700 W default power limit; "
        "copy 4.22-4.25 TB/s = 0.88 of 4.8; less 0.10",
    ),
    "a100": (
        0.70,
        DEFAULT_BANDWIDTH_FLOOR,
        "issue 26: published A100 bf16 GEMM ~0.80-0.85 of 312, less 0.10; copy: no "
        "measurement: default",
    ),
    "l4": (
        0.40,
        DEFAULT_BANDWIDTH_FLOOR,
        "issue 26: a healthy L4 reaches ~0.49 of 121 in a bf16 GEMM at 8192 (power-limited "
        "at 72 W), less ~0.10; copy: no measurement: default",
    ),
}


# Sustained GEMM floors (the steady rate of a --soak), per family, each from runs long enough
# for the default power limit to bite, less the same 0.10 margin.
SUSTAINED: dict[str, dict[str, Any]] = {
    "h200": {
        "sustained_floor": 0.56,
        "sustained_source": "this project's H200 at its 700 W default limit: random bf16 data "
        "sustained 655-676 TFLOP/s = 0.66-0.68 of 989 over 40 s "
        "(docs/gpu-runs/2026-11-26-h200-first/power/), less 0.10",
    },
}


@dataclass(frozen=True)
class Product:
    model: str  # e.g. "H100 SXM"; a family's catch-all row is named by the family, "H100"
    pattern: str  # full match against the normalised name (see normalise)
    capability: tuple[int, int]
    datacenter: bool
    memory_gb: tuple[int, int] | None = None  # (min, max) GiB seen by torch, where it decides
    tflops: float | None = None  # dense tensor-core peak in `dtype`, no sparsity
    tbps: float | None = None  # memory bandwidth, TB/s
    dtype: str = ""  # "bfloat16", or "float16" on parts without bf16 tensor cores
    source: str = ""  # the datasheet of the peaks
    gemm_floor: float = DEFAULT_GEMM_FLOOR  # healthy GEMM / tflops, less a margin
    bandwidth_floor: float = DEFAULT_BANDWIDTH_FLOOR  # healthy copy / tbps, less a margin
    floor_source: str = DEFAULT_FLOOR_SOURCE
    # The GEMM a healthy card sustains under its default power limit (--soak), from runs
    # long enough for the limit to bite; None where no such run is known.
    sustained_floor: float | None = None
    sustained_source: str = ""
    nvlinks: int = 0  # NVLinks the part has where it is fitted as sold (0: none promised)
    nvlink_board: bool = False  # True: on an SXM baseboard, every link wired; False: a bridge

    @property
    def has_peaks(self) -> bool:
        return self.tflops is not None and self.tbps is not None


def _floors(family: str) -> dict[str, Any]:
    gemm, bandwidth, source = FLOORS[family]
    return {"gemm_floor": gemm, "bandwidth_floor": bandwidth, "floor_source": source}


def _peaks(tflops: float, tbps: float, dtype: str, source: str) -> dict[str, Any]:
    return {"tflops": tflops, "tbps": tbps, "dtype": dtype, "source": source}


# NVLink counts per part, from each datasheet's NVLink bandwidth (both directions) over the
# per-link rate of its generation (NVLink 2-4: 50 GB/s a link both ways, NVLink 5: 100;
# https://www.nvidia.com/en-us/data-center/nvlink/): V100 SXM2 300 GB/s = 6 links, A100 600 =
# 12, H100 and H200 SXM 900 = 18, B200 1.8 TB/s = 18. NVL cards are sold to be bridged: H100
# NVL 600 GB/s = 12, H200 NVL 900 = 18. Other PCIe cards (A100 PCIe, H100 PCIe) are mostly run
# without a bridge, and GH200 links to another only in an NVL2 pair or an NVLink Switch
# System: no links promised.
def _board(links: int) -> dict[str, Any]:
    return {"nvlinks": links, "nvlink_board": True}


def _bridge(links: int) -> dict[str, Any]:
    return {"nvlinks": links, "nvlink_board": False}


BF16 = "bfloat16"
FP16 = "float16"
AMPERE = (8, 0)
HOPPER = (9, 0)
VOLTA = (7, 0)

# Products with datasheet peaks, matched on the full product name.
_WITH_PEAKS: tuple[Product, ...] = (
    Product(
        "A100 SXM 40GB",
        r"A100 SXM4 40GB",
        AMPERE,
        True,
        **_peaks(312, 1.555, BF16, DS["a100"]),
        **_floors("a100"),
        **_board(12),
    ),
    Product(
        "A100 SXM 80GB",
        r"A100 SXM4 80GB",
        AMPERE,
        True,
        **_peaks(312, 2.039, BF16, DS["a100"]),
        **_floors("a100"),
        **_board(12),
    ),
    Product(
        "A100 PCIe 40GB",
        r"A100 PCIE 40GB",
        AMPERE,
        True,
        **_peaks(312, 1.555, BF16, DS["a100"]),
        **_floors("a100"),
    ),
    Product(
        "A100 PCIe 80GB",
        r"A100 80GB PCIE",
        AMPERE,
        True,
        **_peaks(312, 1.935, BF16, DS["a100"]),
        **_floors("a100"),
    ),
    Product(
        "H100 SXM",
        r"H100 80GB HBM3|H100 SXM5 80GB",
        HOPPER,
        True,
        **_peaks(989, 3.35, BF16, DS["h100"]),
        **_floors("h100"),
        **_board(18),
    ),
    Product("H100 PCIe", r"H100 PCIE", HOPPER, True, **_peaks(756, 2.0, BF16, DS["h100"])),
    Product(
        "H100 NVL", r"H100 NVL", HOPPER, True, **_peaks(835, 3.9, BF16, DS["h100"]), **_bridge(12)
    ),
    Product(
        "H200 SXM",
        r"H200",
        HOPPER,
        True,
        **_peaks(989, 4.8, BF16, DS["h200"]),
        **_floors("h200"),
        **SUSTAINED["h200"],
        **_board(18),
    ),
    Product(
        "H200 NVL", r"H200 NVL", HOPPER, True, **_peaks(835, 4.8, BF16, DS["h200"]), **_bridge(18)
    ),
    Product(
        "GH200 96GB",
        r"GH200 480GB|GH200",
        HOPPER,
        True,
        (80, 100),
        **_peaks(989, 4.0, BF16, DS["gh200"]),
    ),
    Product(
        "GH200 144GB",
        r"GH200 144G HBM3E|GH200",
        HOPPER,
        True,
        (130, 150),
        **_peaks(989, 4.9, BF16, DS["gh200"]),
    ),
    Product("B200", r"B200", (10, 0), True, **_peaks(2250, 7.7, BF16, DS["b200"]), **_board(18)),
    Product("L40S", r"L40S", (8, 9), True, **_peaks(362, 0.864, BF16, DS["l40s"])),
    Product("L4", r"L4", (8, 9), True, **_peaks(121, 0.3, BF16, DS["l4"]), **_floors("l4")),
    Product("A10", r"A10", (8, 6), True, **_peaks(125, 0.6, BF16, DS["a10"])),
    Product("T4", r"T4", (7, 5), True, **_peaks(65, 0.32, FP16, DS["t4"])),
    Product(
        "V100 SXM2",
        r"V100 SXM2 (16|32)GB",
        VOLTA,
        True,
        **_peaks(125, 0.9, FP16, DS["v100"]),
        **_board(6),
    ),
    Product("V100 PCIe", r"V100 PCIE (16|32)GB", VOLTA, True, **_peaks(112, 0.9, FP16, DS["v100"])),
)


def _family(model: str, capability: tuple[int, int], datacenter: bool, **more: Any) -> Product:
    """A family's catch-all: its name, alone or followed by more words ("H100 80GB HBM3 MIG
    1g.10gb", "RTX 4090 D"), never a longer model name ("A10" does not take "A10G")."""
    return Product(model, rf"{re.escape(model.upper())}(?: .*)?", capability, datacenter, **more)


# Families by capability only, after every row with peaks.
_FAMILIES: tuple[Product, ...] = (
    _family("GB300", (10, 3), True, **_board(18)),
    _family("B300", (10, 3), True, **_board(18)),
    _family("GB200", (10, 0), True, **_board(18)),
    _family("B200", (10, 0), True),
    _family("B100", (10, 0), True),
    _family("GH200", HOPPER, True),
    _family("H200", HOPPER, True),
    _family("H100", HOPPER, True),
    # H800 SXM: 400 GB/s = 8 links on its baseboard; the H800 PCIe is bridged, if at all
    Product("H800 PCIe", r"H800 PCIE(?: .*)?", HOPPER, True),
    _family("H800", HOPPER, True, **_board(8)),
    _family("H20", HOPPER, True, **_board(18)),  # 900 GB/s
    _family("L40S", (8, 9), True),
    _family("L40", (8, 9), True),
    _family("L4", (8, 9), True),
    _family("A100", AMPERE, True),
    _family("A800", AMPERE, True),
    _family("A30", AMPERE, True),
    _family("A40", (8, 6), True),
    _family("A10G", (8, 6), True),
    _family("A10", (8, 6), True),
    _family("A16", (8, 6), True),
    _family("A2", (8, 6), True),
    _family("T4", (7, 5), True),
    _family("V100", VOLTA, True),
    _family("P100", (6, 0), True),
    _family("RTX 5090", (12, 0), False),
    _family("RTX 5080", (12, 0), False),
    _family("RTX 5070", (12, 0), False),
    _family("RTX PRO 6000", (12, 0), False),
    _family("RTX 4090", (8, 9), False),
    _family("RTX 4080", (8, 9), False),
    _family("RTX 6000 Ada", (8, 9), False),
    _family("RTX 3090", (8, 6), False),
    _family("RTX 3080", (8, 6), False),
    _family("RTX A6000", (8, 6), False),
    _family("RTX 2080", (7, 5), False),
    _family("GB10", (12, 1), False),  # DGX Spark
)

PRODUCTS: tuple[Product, ...] = _WITH_PEAKS + _FAMILIES


def normalise(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100 SXM4 40GB'; 'Tesla T4' -> 'T4'."""
    text = re.sub(r"[\s\-_]+", " ", name.strip().upper())
    for prefix in ("NVIDIA ", "TESLA ", "GEFORCE ", "QUADRO "):
        text = text.removeprefix(prefix)
    return text.strip()


def match(name: str, memory_bytes: int | None = None) -> Product | None:
    """The first row whose pattern matches the whole normalised name (and whose memory range
    holds `memory_bytes`, where the row has one), else None."""
    key = normalise(name)
    gib = memory_bytes / 2**30 if memory_bytes else None
    for product in PRODUCTS:
        if not re.fullmatch(product.pattern, key):
            continue
        low_high = product.memory_gb
        if low_high and (gib is None or not low_high[0] <= gib <= low_high[1]):
            continue
        return product
    return None


def families() -> tuple[str, ...]:
    """The families the table knows, as a user would name them."""
    return tuple(p.model for p in _FAMILIES)
