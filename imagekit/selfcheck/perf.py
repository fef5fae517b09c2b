"""perf: dense GEMM TFLOP/s and device memory bandwidth against the GPU's datasheet peak."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from imagekit.selfcheck.peaks import (
    BANDWIDTH_FLOOR,
    GEMM_FLOOR,
    gemm_dtype,
    mig_reason,
    peak_for,
    stable,
)
from imagekit.selfcheck.results import Result, failed, passed, skipped

WARMUP_BUDGET_S = 8.0


def settled_time(fn: Callable[[], Any], sync: Callable[[], None], repeat: int) -> float:
    """Seconds per call once clocks have ramped: time batches until two agree (or the budget
    runs out), so a healthy GPU still at idle clocks does not read low."""
    timings: list[float] = []
    deadline = time.monotonic() + WARMUP_BUDGET_S
    while not stable(timings) and time.monotonic() < deadline:
        sync()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        timings.append((time.perf_counter() - start) / repeat)
    return min(timings[-2:])


def check_perf() -> Result:
    import torch

    if not torch.cuda.is_available():
        return skipped("no GPU: GEMM and bandwidth are measured on GPUs only")
    name = torch.cuda.get_device_name()
    capability = tuple(torch.cuda.get_device_capability())
    dtype = gemm_dtype(capability)  # type: ignore[arg-type]
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    sync = torch.cuda.synchronize
    gemm = 2 * n**3 / settled_time(lambda: a @ b, sync, 10) / 1e12
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() / settled_time(lambda: dst.copy_(src), sync, 10) / 1e12
    m: dict[str, Any] = {
        "device": "cuda",
        "gpu": name,
        "gemm_dtype": dtype,
        "gemm_tflops": round(gemm, 1),
        "copy_tbps": round(bandwidth, 2),
    }
    mig = mig_reason(name, os.environ.get("NVIDIA_VISIBLE_DEVICES"))
    if mig:
        return passed(mig, **m)
    peak = peak_for(name, torch.cuda.get_device_properties(0).total_memory)
    if peak is None:
        return passed(f"no datasheet peak known for {name}; measured only", **m)
    m.update(
        peak_model=peak.model,
        gemm_vs_peak=round(gemm / peak.tflops, 3),
        bandwidth_vs_peak=round(bandwidth / peak.tbps, 3),
    )
    return judge(m, peak.model)


def judge(m: dict[str, Any], model: str) -> Result:
    low = [
        f"{what} at {frac:.0%} of the {model} peak"
        for what, frac, floor in (
            ("GEMM", m["gemm_vs_peak"], GEMM_FLOOR),
            ("memory copy", m["bandwidth_vs_peak"], BANDWIDTH_FLOOR),
        )
        if frac < floor
    ]
    return failed("; ".join(low) + " (below the healthy floor)", **m) if low else passed(**m)
