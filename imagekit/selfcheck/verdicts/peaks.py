"""Dense datasheet peaks per GPU product: tensor-core TFLOP/s (bf16, or fp16 where the part has
no bf16) and memory bandwidth (TB/s), and the floors a healthy card reaches. The figures and
the matching rule (the full product name, memory where it decides) live in the one product
table, contract/gpus.py; this module picks its rows with peaks. A MIG slice is never compared
with the whole GPU. Pure data and functions.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from imagekit.contract.gpus import (
    DEFAULT_BANDWIDTH_FLOOR,
    DEFAULT_FLOOR_SOURCE,
    DEFAULT_GEMM_FLOOR,
    DS,
    FLOORS,
    PRODUCTS,
    Product,
    match,
    normalise,
)
from imagekit.contract.tolerances import WARM_TIMINGS_AGREE

__all__ = [
    "DEFAULT_BANDWIDTH_FLOOR",
    "DEFAULT_FLOOR_SOURCE",
    "DEFAULT_GEMM_FLOOR",
    "DS",
    "FLOORS",
    "PEAKS",
    "Peak",
    "gemm_dtype",
    "mig_reason",
    "normalise",
    "peak_for",
    "stable",
]

Peak = Product  # a row of the product table that has peaks
PEAKS: tuple[Peak, ...] = tuple(p for p in PRODUCTS if p.has_peaks)

_MIG = re.compile(r"\bMIG\b", re.IGNORECASE)


def mig_reason(name: str, visible_devices: str | None = None) -> str | None:
    """A MIG slice has a fraction of the GPU's SMs and bandwidth: no whole-GPU comparison."""
    visible = visible_devices or ""
    if _MIG.search(name) or visible.upper().startswith("MIG-"):
        return f"{name} is a MIG slice: peaks are per whole GPU, so measured only"
    return None


def peak_for(name: str, memory_bytes: int | None = None) -> Peak | None:
    """The product the whole name (and memory, where it decides) matches, if it has peaks."""
    product = match(name, memory_bytes)
    return product if product and product.has_peaks else None


def gemm_dtype(capability: tuple[int, int]) -> str:
    """bf16 tensor cores arrived with Ampere (sm_80); older parts are measured in fp16."""
    return "bfloat16" if capability >= (8, 0) else "float16"


def stable(timings: list[float], tolerance: float = WARM_TIMINGS_AGREE) -> bool:
    """Two consecutive timings agree: clocks have ramped up and the figure can be trusted."""
    if len(timings) < 2:
        return False
    a, b = timings[-2], timings[-1]
    return abs(a - b) <= tolerance * min(a, b)


def until_stable(measure: Callable[[], float], budget_s: float, at_least: int = 1) -> list[float]:
    """measure() again and again until two timings in a row agree (stable) or `budget_s` is
    spent, and at least `at_least` times; the timings, in order."""
    timings: list[float] = []
    deadline = time.monotonic() + budget_s
    while not stable(timings) and (len(timings) < at_least or time.monotonic() < deadline):
        timings.append(measure())
    return timings
