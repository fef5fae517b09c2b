"""Dense datasheet peaks per GPU product: tensor-core TFLOP/s (bf16, or fp16 where the part has
no bf16) and memory bandwidth (TB/s), matched on the full product name. Pure data and functions.

A name matches a row only as a whole ("H100 NVL" is not an H100 SXM, "T400" is not a T4),
memory size decides where the name alone does not (A100 40 GB vs 80 GB), and a MIG slice is
never compared with the whole GPU. Sources: each row names its datasheet (read 2026-11-23).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from imagekit.contract.tolerances import WARM_TIMINGS_AGREE

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
        0.70,
        0.80,
        "measured on one H200 (the project's FACTS, section 6): bf16 GEMM ~790 TFLOP/s = "
        "0.80 of 989, copy ~4.3 TB/s = 0.90 of 4.8; less 0.10",
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


@dataclass(frozen=True)
class Peak:
    model: str
    pattern: str  # full match against the normalised name (see normalise)
    tflops: float  # dense tensor-core peak in `dtype`, no sparsity
    tbps: float  # memory bandwidth, TB/s
    dtype: str  # "bfloat16", or "float16" on parts without bf16 tensor cores
    source: str
    memory_gb: tuple[int, int] | None = None  # (min, max) GiB seen by torch, where it decides
    gemm_floor: float = DEFAULT_GEMM_FLOOR  # healthy GEMM / tflops, less a margin
    bandwidth_floor: float = DEFAULT_BANDWIDTH_FLOOR  # healthy copy / tbps, less a margin
    floor_source: str = DEFAULT_FLOOR_SOURCE


def _floors(family: str) -> dict[str, Any]:
    gemm, bandwidth, source = FLOORS[family]
    return {"gemm_floor": gemm, "bandwidth_floor": bandwidth, "floor_source": source}


PEAKS: tuple[Peak, ...] = (
    Peak("A100 SXM 40GB", r"A100 SXM4 40GB", 312, 1.555, "bfloat16", DS["a100"], **_floors("a100")),
    Peak("A100 SXM 80GB", r"A100 SXM4 80GB", 312, 2.039, "bfloat16", DS["a100"], **_floors("a100")),
    Peak(
        "A100 PCIe 40GB", r"A100 PCIE 40GB", 312, 1.555, "bfloat16", DS["a100"], **_floors("a100")
    ),
    Peak(
        "A100 PCIe 80GB", r"A100 80GB PCIE", 312, 1.935, "bfloat16", DS["a100"], **_floors("a100")
    ),
    Peak(
        "H100 SXM",
        r"H100 80GB HBM3|H100 SXM5 80GB",
        989,
        3.35,
        "bfloat16",
        DS["h100"],
        **_floors("h100"),
    ),
    Peak("H100 PCIe", r"H100 PCIE", 756, 2.0, "bfloat16", DS["h100"]),
    Peak("H100 NVL", r"H100 NVL", 835, 3.9, "bfloat16", DS["h100"]),
    Peak("H200 SXM", r"H200", 989, 4.8, "bfloat16", DS["h200"], **_floors("h200")),
    Peak("H200 NVL", r"H200 NVL", 835, 4.8, "bfloat16", DS["h200"]),
    Peak("GH200 96GB", r"GH200 480GB|GH200", 989, 4.0, "bfloat16", DS["gh200"], (80, 100)),
    Peak("GH200 144GB", r"GH200 144G HBM3E|GH200", 989, 4.9, "bfloat16", DS["gh200"], (130, 150)),
    Peak("B200", r"B200", 2250, 7.7, "bfloat16", DS["b200"]),
    Peak("L40S", r"L40S", 362, 0.864, "bfloat16", DS["l40s"]),
    Peak("L4", r"L4", 121, 0.3, "bfloat16", DS["l4"], **_floors("l4")),
    Peak("A10", r"A10", 125, 0.6, "bfloat16", DS["a10"]),
    Peak("T4", r"T4", 65, 0.32, "float16", DS["t4"]),
    Peak("V100 SXM2", r"V100 SXM2 (16|32)GB", 125, 0.9, "float16", DS["v100"]),
    Peak("V100 PCIe", r"V100 PCIE (16|32)GB", 112, 0.9, "float16", DS["v100"]),
)

_MIG = re.compile(r"\bMIG\b", re.IGNORECASE)


def normalise(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100 SXM4 40GB'; 'Tesla T4' -> 'T4'."""
    text = re.sub(r"[\s\-_]+", " ", name.strip().upper())
    for prefix in ("NVIDIA ", "TESLA ", "GEFORCE ", "QUADRO "):
        text = text.removeprefix(prefix)
    return text.strip()


def mig_reason(name: str, visible_devices: str | None = None) -> str | None:
    """A MIG slice has a fraction of the GPU's SMs and bandwidth: no whole-GPU comparison."""
    visible = visible_devices or ""
    if _MIG.search(name) or visible.upper().startswith("MIG-"):
        return f"{name} is a MIG slice: peaks are per whole GPU, so measured only"
    return None


def peak_for(name: str, memory_bytes: int | None = None) -> Peak | None:
    """The row whose pattern matches the whole normalised name (and memory, where it decides)."""
    key = normalise(name)
    gib = memory_bytes / 2**30 if memory_bytes else None
    for peak in PEAKS:
        if not re.fullmatch(peak.pattern, key):
            continue
        if peak.memory_gb and (gib is None or not peak.memory_gb[0] <= gib <= peak.memory_gb[1]):
            continue
        return peak
    return None


def gemm_dtype(capability: tuple[int, int]) -> str:
    """bf16 tensor cores arrived with Ampere (sm_80); older parts are measured in fp16."""
    return "bfloat16" if capability >= (8, 0) else "float16"


def stable(timings: list[float], tolerance: float = WARM_TIMINGS_AGREE) -> bool:
    """Two consecutive timings agree: clocks have ramped up and the figure can be trusted."""
    if len(timings) < 2:
        return False
    a, b = timings[-2], timings[-1]
    return abs(a - b) <= tolerance * min(a, b)
