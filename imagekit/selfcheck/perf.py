"""perf: the probe that measures every GPU at once: a bf16 GEMM, a device-to-device copy and
a memory pattern test over most of the free memory, each GPU in a thread of its own (its own
device and stream), while NVML samples why clocks were held back; then host-to-device and
peer-to-peer copies, one GPU or pair at a time so they do not share a link.

It only measures. The figures become host-snapshot readings, and perf_verdict.py and links.py
judge them (per GPU model, per link), so a recorded snapshot is judged the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from imagekit.selfcheck.peaks import gemm_dtype, stable
from imagekit.selfcheck.results import Result, failed, passed, skipped

WARMUP_BUDGET_S = 8.0
GEMM_N = 8192
COPY_BYTES = 1 << 30
CHUNK_BYTES = 1 << 30  # the memory test's unit of allocation
MEMTEST_FRACTION = 0.9  # of the free memory, less two chunks of scratch for the check
# Odd 64-bit constant (the golden ratio's): every address gets its own value, so a wrong
# address line shows up as well as a stuck bit.
PATTERN_SEED = -7046029254386353131


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
        return skipped("no GPU: GEMM, bandwidth and memory are measured on GPUs only")
    from imagekit.selfcheck import links, nvml

    count = torch.cuda.device_count()
    # Indices agree with NVML's: the self-check runs with CUDA_DEVICE_ORDER=PCI_BUS_ID.
    with nvml.ClockSampler(list(range(count))) as sampler:
        gpus = on_every_gpu(count, lambda index: measure_gpu(torch, index))
    nvml.merge_readings(gpus, sampler.readings())
    for gpu in gpus:
        if "perf_error" not in gpu:
            gpu["h2d_gbps"] = round(links.measure_h2d(torch, gpu["index"]), 1)
    p2p = links.measure_p2p(torch) if count > 1 else []
    broken = [f"GPU {g['index']}: {g['perf_error']}" for g in gpus if "perf_error" in g]
    m = {"device": "cuda", "gpus": gpus, "p2p": p2p}
    return failed("; ".join(broken), **m) if broken else passed(**m)


def sampler_readings(sampler: Any, count: int) -> list[dict[str, Any]]:
    """What NVML saw during the measurements, per GPU (empty where it could not look)."""
    reasons = sampler.reasons()
    return [{"clock_event_reasons": reasons[i]} if i in reasons else {} for i in range(count)]


def on_every_gpu(count: int, measure: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """measure(index) for every GPU at once, one thread each; a GPU whose measurement raised
    reports the error instead of taking the others down."""
    out: list[dict[str, Any]] = [{"index": i} for i in range(count)]

    def run(index: int) -> None:
        try:
            out[index] = measure(index)
        except Exception as exc:  # a broken GPU is a finding, not a crash of the probe
            out[index] = {"index": index, "perf_error": f"{type(exc).__name__}: {exc}"[:300]}

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def measure_gpu(torch: Any, index: int) -> dict[str, Any]:
    torch.cuda.set_device(index)  # the thread's current device, for the stream below
    device = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(index)
    dtype = gemm_dtype((props.major, props.minor))
    with torch.cuda.stream(torch.cuda.Stream(device)):
        gemm = _gemm_tflops(torch, device, dtype)
        copy = _copy_tbps(torch, device)
        memtest = memory_pattern(torch, device)
    return {
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "memory_total_mib": props.total_memory >> 20,
        "gemm_bf16_tflops": round(gemm, 1),
        "gemm_dtype": dtype,
        "copy_tbps": round(copy, 3),
        "memtest": memtest,
    }


def _sync(torch: Any, device: Any) -> Callable[[], None]:
    return lambda: torch.cuda.synchronize(device)


def _gemm_tflops(torch: Any, device: Any, dtype: str) -> float:
    n = GEMM_N
    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    seconds = settled_time(lambda: a @ b, _sync(torch, device), 10)
    return float(2 * n**3 / seconds / 1e12)


def _copy_tbps(torch: Any, device: Any) -> float:
    """Device-to-device copy, read plus write bytes per second (as bandwidth tests count)."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = settled_time(lambda: dst.copy_(src), _sync(torch, device), 10)
    return float(2 * COPY_BYTES / seconds / 1e12)


def memory_pattern(torch: Any, device: Any) -> dict[str, Any]:
    """Write a value unique to each address over most of the free memory, read it back, then
    flip every bit and read again: a stuck bit or a wrong address line counts as errors."""
    start = time.perf_counter()
    free, _ = torch.cuda.mem_get_info(device)
    chunks_n = max(0, int(free * MEMTEST_FRACTION) // CHUNK_BYTES - 2)
    elems = CHUNK_BYTES // 8
    base = torch.arange(elems, dtype=torch.int64, device=device)
    chunks = [_pattern(base, k, elems) for k in range(chunks_n)]
    errors = sum(_mismatches(c, _pattern(base, k, elems)) for k, c in enumerate(chunks))
    for chunk in chunks:
        chunk.bitwise_not_()
    errors += sum(
        _mismatches(c, _pattern(base, k, elems).bitwise_not_()) for k, c in enumerate(chunks)
    )
    torch.cuda.synchronize(device)
    del chunks, base
    torch.cuda.empty_cache()
    return {
        "bytes": chunks_n * CHUNK_BYTES,
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _pattern(base: Any, k: int, elems: int) -> Any:
    return (base + k * elems).mul_(PATTERN_SEED)


def _mismatches(chunk: Any, expected: Any) -> int:
    return int(chunk.ne(expected).sum())
