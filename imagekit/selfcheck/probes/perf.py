"""perf: the probe that measures every GPU. First a bf16 GEMM and a device-to-device copy on
every GPU at once, each in a thread of its own (its own device and stream), while NVML samples
why clocks were held back; then the copies over the links, one GPU or pair at a time so they
share nothing: host-to-device and device-to-host (pinned, settled), then peer to peer; last,
the memory pattern test over most of the free memory, every GPU at once. The copies come
before the memory test because a copy timed in the wake of its large free reads half the
link on an H200 (copies.py).

It only measures. The figures become host-snapshot readings, and perf_verdict.py and links.py
judge them (per GPU model, per link), so a recorded snapshot is judged the same way. The
measuring functions take the device (and their sizes) as arguments, so the tests run the same
code on CPU tensors (tests/test_selfcheck_cpu_probes.py); the copies are copies.py's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from imagekit.contract.checks import CheckResult, failed, passed, skipped
from imagekit.selfcheck.verdicts.peaks import gemm_dtype, until_stable

WARMUP_BUDGET_S = 8.0
# --soak SECONDS (python -m imagekit.selfcheck) reaches the probe through this variable: the
# GEMM is then held that long on every GPU and judged by its steady rate.
ENV_SOAK = "IMAGEKIT_SOAK_S"
SOAK_WINDOW_S = 1.0  # the soak's GEMM rate is timed in windows of about this long
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

    def batch() -> float:
        sync()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        return (time.perf_counter() - start) / repeat

    return min(until_stable(batch, WARMUP_BUDGET_S)[-2:])


def check_perf() -> CheckResult:
    import torch

    if not torch.cuda.is_available():
        return skipped("no GPU: GEMM, bandwidth and memory are measured on GPUs only")
    from imagekit.selfcheck.probes import copies
    from imagekit.selfcheck.readers import clock_sampler, nvml
    from imagekit.selfcheck.verdicts import devices

    count = torch.cuda.device_count()
    # Which NVML GPU each torch device is, by UUID (torch numbers only what
    # CUDA_VISIBLE_DEVICES names): the sampler watches those GPUs, and every figure is
    # recorded under NVML's index of the GPU that produced it, never under torch's.
    known, why = nvml.read_identities()
    uuids = torch_uuids(torch, count)
    matches = devices.match_devices(
        uuids,
        known,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
        os.environ.get("CUDA_DEVICE_ORDER"),
        why,
    )
    # (A device numbered as torch numbers it, NVML having read no GPU, is not watched.)
    watched = {m.torch_index: m.uuid or m.index for m in matches if m.by in ("uuid", "order")}
    with clock_sampler.ClockSampler(watched) as sampler:
        gpus = on_every_gpu(count, lambda index: measure_gpu(torch, index))
    for gpu in gpus:
        gpu["torch_index"] = gpu.pop("index")
    clock_sampler.merge_readings(gpus, sampler.readings(), key="torch_index")
    working = [g["torch_index"] for g in gpus if "perf_error" not in g]
    # Host copies share the host's memory and PCIe root: one GPU at a time, each from
    # pinned memory on its own NUMA node (kept until all are done).
    near, kept = near_cpus(matches, known), []  # type: ignore[var-annotated]
    one_at_a_time(
        working, lambda i: copies.measure_host(torch, i, near.get(i), kept), gpus, "host copies"
    )
    kept.clear()
    m: dict[str, Any] = {"device": "cuda"}
    if any("h2d_gbps" in g for g in gpus):
        m["host_copies"] = dict(copies.HOST_CONDITIONS)
    if soak_seconds():
        m["soak_s"] = soak_seconds()
    broken = []
    try:
        m["p2p"] = peers_identified(copies.measure_p2p(torch) if count > 1 else [], matches)
    except Exception as exc:  # no p2p key: the links verdict says "not measured"
        broken.append(error_text(exc, "peer copies"))
    # A GPU whose copies failed (a CUDA error spoils its context) is not tested further.
    working = [g["torch_index"] for g in gpus if "perf_error" not in g]
    memory = on_every_gpu(count, lambda i: measure_memory(torch, i) if i in working else {})
    for gpu, tested in zip(gpus, memory, strict=True):
        if "perf_error" in tested:
            gpu.setdefault("perf_error", f"memory test: {tested['perf_error']}")
        elif "memtest" in tested:
            gpu["memtest"] = tested["memtest"]
    m["gpus"] = identified(gpus, matches, uuids)
    broken[:0] = [f"{_named(g)}: {g['perf_error']}" for g in m["gpus"] if "perf_error" in g]
    return failed("; ".join(broken), **m) if broken else passed(**m)


def near_cpus(matches: list[Any], known: list[dict[str, Any]]) -> dict[int, str]:
    """torch's index -> the CPUs NVML gives its GPU (a cpulist), where both are known."""
    affinity = {g.get("index"): g.get("cpu_affinity") for g in known}
    return {
        m.torch_index: affinity[m.index]
        for m in matches
        if m.index is not None and isinstance(affinity.get(m.index), str)
    }


def error_text(exc: BaseException, what: str = "") -> str:
    """A measurement's error as the snapshot keeps it: what failed, the exception's class and
    words, at most 300 characters."""
    text = f"{type(exc).__name__}: {exc}"
    return (f"{what}: {text}" if what else text)[:300]


def _named(gpu: dict[str, Any]) -> str:
    torch_device = f"torch device {gpu['torch_index']}"
    return f"GPU {gpu['index']} ({torch_device})" if "index" in gpu else torch_device


def torch_uuids(torch: Any, count: int) -> list[Any]:
    """Each device's UUID as torch gives it (`get_device_properties(i).uuid`: a _CUuuid,
    8-4-4-4-12 hex without NVML's GPU-/MIG- prefix), as a string; None where this torch has
    none."""
    out: list[Any] = []
    for index in range(count):
        try:
            raw = torch.cuda.get_device_properties(index).uuid
            out.append(None if raw is None else str(raw))
        except Exception:
            out.append(None)
    return out


def identified(
    gpus: list[dict[str, Any]], matches: list[Any], uuids: list[Any]
) -> list[dict[str, Any]]:
    """The measured readings, each with torch's `torch_uuid` for the device and under NVML's
    `index` of the GPU that torch's device `torch_index` is (`matched_by` how), or with
    `unmatched` and the reason, no index."""
    out = []
    for gpu, match, uuid in zip(gpus, matches, uuids, strict=True):
        gpu = {k: v for k, v in gpu.items() if k != "index"}
        if uuid is not None:
            gpu["torch_uuid"] = uuid
        if match.index is None:
            gpu["unmatched"] = match.reason
        else:
            gpu["index"] = match.index
            gpu["matched_by"] = match.by
        out.append(gpu)
    return out


def peers_identified(pairs: list[dict[str, Any]], matches: list[Any]) -> list[dict[str, Any]]:
    """Peer pairs under NVML's indices (torch's in torch_src/torch_dst); an end that matched
    no GPU is None, which the links verdict reports as a pair it cannot judge."""
    nvml_of = {m.torch_index: m.index for m in matches}
    return [
        {
            **pair,
            "src": nvml_of.get(pair["src"]),
            "dst": nvml_of.get(pair["dst"]),
            "torch_src": pair["src"],
            "torch_dst": pair["dst"],
        }
        for pair in pairs
    ]


def on_every_gpu(count: int, measure: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """measure(index) for every GPU (torch's index) at once, one thread each, each GPU alone
    on its own device and stream; a GPU whose measurement raised reports the error instead of
    taking the others down."""
    out: list[dict[str, Any]] = [{"index": i} for i in range(count)]

    def run(index: int) -> None:
        try:
            out[index] = {**measure(index), "index": index}
        except Exception as exc:  # a broken GPU is a finding, not a crash of the probe
            out[index] = {"index": index, "perf_error": error_text(exc)}

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def one_at_a_time(
    indices: list[int],
    measure: Callable[[int], dict[str, Any]],
    gpus: list[dict[str, Any]],
    what: str,
) -> None:
    """measure(index) for one GPU after another (torch's index), merged into the reading
    whose torch_index it is; an error becomes that GPU's perf_error."""
    by_index = {g["torch_index"]: g for g in gpus}
    for index in indices:
        try:
            by_index[index].update(measure(index))
        except Exception as exc:
            by_index[index].setdefault("perf_error", error_text(exc, what))


def measure_gpu(torch: Any, index: int) -> dict[str, Any]:
    torch.cuda.set_device(index)  # the thread's current device, for the stream below
    device = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(index)
    dtype = gemm_dtype((props.major, props.minor))
    soak: dict[str, Any] = {}
    with torch.cuda.stream(torch.cuda.Stream(device)):
        gemm = _gemm_tflops(torch, device, dtype)
        if soak_seconds():  # judged apart: the short figure keeps its own floor
            soak = gemm_soak(torch, device, dtype, soak_seconds())
        copy = _copy_tbps(torch, device)
    return {
        **({"soak": soak} if soak else {}),
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "memory_total_mib": props.total_memory >> 20,
        "gemm_bf16_tflops": round(gemm, 1),
        "gemm_dtype": dtype,
        "copy_tbps": round(copy, 3),
    }


def measure_memory(torch: Any, index: int) -> dict[str, Any]:
    """The memory pattern test on GPU `index` (torch's), on a stream of its own."""
    torch.cuda.set_device(index)
    device = torch.device("cuda", index)
    with torch.cuda.stream(torch.cuda.Stream(device)):
        return {"memtest": memory_pattern(torch, device)}


def _sync(torch: Any, device: Any) -> Callable[[], None]:
    """Wait for the device's queued work; CPU work is done when the call returns."""
    if torch.device(device).type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(device)


def _gemm_tflops(torch: Any, device: Any, dtype: str, n: int = GEMM_N) -> float:
    """TFLOP/s of an n x n x n matrix product in `dtype` (2 n^3 flops a product)."""
    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    seconds = settled_time(lambda: a @ b, _sync(torch, device), 10)
    return float(2 * n**3 / seconds / 1e12)


def soak_seconds() -> float:
    """The soak asked for (0: none); a value that is no positive number is none."""
    try:
        return max(0.0, float(os.environ.get(ENV_SOAK, "0")))
    except ValueError:
        return 0.0


def gemm_soak(
    torch: Any, device: Any, dtype: str, seconds: float, n: int = GEMM_N
) -> dict[str, Any]:
    """The GEMM held for `seconds`, timed in windows of about SOAK_WINDOW_S: the first
    window's rate, the slowest, and the steady one (the median of the second half, when
    power capping and heat have had their say), TFLOP/s."""
    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    sync = _sync(torch, device)
    per_call = settled_time(lambda: a @ b, sync, 3)
    batch = max(1, int(SOAK_WINDOW_S / max(per_call, 1e-9)))
    rates: list[float] = []
    start = time.monotonic()
    while not rates or time.monotonic() - start < seconds:
        sync()
        began = time.perf_counter()
        for _ in range(batch):
            a @ b
        sync()
        rates.append(2 * n**3 * batch / (time.perf_counter() - began) / 1e12)
    return soak_summary(rates, time.monotonic() - start)


def soak_summary(rates: list[float], seconds: float) -> dict[str, Any]:
    """A soak's windows (TFLOP/s each, in order) as the snapshot keeps them: the first, the
    slowest, and the steady rate, the median of the second half (upper median)."""
    later = sorted(rates[len(rates) // 2 :])
    return {
        "seconds": round(seconds, 1),
        "windows": len(rates),
        "tflops_first": round(rates[0], 1),
        "tflops_min": round(min(rates), 1),
        "tflops_steady": round(later[len(later) // 2], 1),
    }


def _copy_tbps(torch: Any, device: Any, nbytes: int = COPY_BYTES) -> float:
    """Device-to-device copy, read plus write bytes per second (as bandwidth tests count)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = settled_time(lambda: dst.copy_(src), _sync(torch, device), 10)
    return float(2 * nbytes / seconds / 1e12)


def memory_pattern(
    torch: Any, device: Any, free_bytes: int | None = None, chunk_bytes: int = CHUNK_BYTES
) -> dict[str, Any]:
    """Write a value unique to each address over most of the free memory (`free_bytes`, else
    what the GPU reports free), read it back, then flip every bit and read again: a stuck
    bit or a wrong address line counts as errors. Under MEMTEST_FRACTION of the free memory
    less two chunks of scratch there is no whole chunk to test: 0 bytes, which the verdict
    does not count as a pass."""
    start = time.perf_counter()
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    chunks_n = max(0, int(free_bytes * MEMTEST_FRACTION) // chunk_bytes - 2)
    elems = chunk_bytes // 8
    base = torch.arange(elems, dtype=torch.int64, device=device)
    chunks = write_pattern(base, chunks_n)
    errors = check_pattern(chunks, base)
    _sync(torch, device)()
    del chunks, base
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return {
        "bytes": chunks_n * elems * 8,
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 2),
    }


def write_pattern(base: Any, chunks_n: int) -> list[Any]:
    """`chunks_n` chunks the size of `base` (int64 0..n-1), each holding its own addresses'
    values."""
    return [_pattern(base, k) for k in range(chunks_n)]


def check_pattern(chunks: list[Any], base: Any) -> int:
    """Mismatches against the pattern, then against its inverse after every bit of every
    chunk is flipped in place: an element that is wrong both times counts twice."""
    errors = sum(_mismatches(c, _pattern(base, k)) for k, c in enumerate(chunks))
    for chunk in chunks:
        chunk.bitwise_not_()
    errors += sum(_mismatches(c, _pattern(base, k).bitwise_not_()) for k, c in enumerate(chunks))
    return errors


def _pattern(base: Any, k: int) -> Any:
    return (base + k * base.numel()).mul_(PATTERN_SEED)


def _mismatches(chunk: Any, expected: Any) -> int:
    return int(chunk.ne(expected).sum())
