"""The perf verdict over the host snapshot: each GPU's GEMM and copy against the floors of its
model (peaks.PEAKS), and its memory pattern test. Pure functions over plain data."""

from __future__ import annotations

from typing import Any

from imagekit.contract.checks import CheckResult
from imagekit.selfcheck.verdicts.findings import Finding, fail, result_of, skip
from imagekit.selfcheck.verdicts.peaks import Peak, mig_reason, peak_for

MIB = 2**20


def perf_findings(
    gpu: dict[str, Any], memory_bytes: int | None = None
) -> tuple[list[Finding], int]:
    """Findings about one snapshot GPU, and how many rules were judged. `memory_bytes`
    overrides the snapshot's memory_total_mib where the caller knows better (torch)."""
    index = gpu.get("index")
    if gpu.get("perf_error"):
        # The probe raised on this GPU: nothing it measured there can stand for a pass.
        return [fail("perf-error", f"measuring failed: {gpu['perf_error']}", index)], 1
    found: list[Finding] = []
    judged = _memtest(gpu, index, found)
    name = gpu.get("name")
    if not name:
        found.append(skip("perf-model", "GPU name not read: no datasheet to compare with", index))
        return found, judged
    mig = mig_reason(name) or (
        f"{name} is in MIG mode: peaks are per whole GPU, so measured only"
        if gpu.get("mig_mode")
        else None
    )
    if mig:
        found.append(skip("perf-mig", mig, index))
        return found, judged
    if memory_bytes is None and gpu.get("memory_total_mib"):
        memory_bytes = int(gpu["memory_total_mib"]) * MIB
    peak = peak_for(name, memory_bytes)
    if peak is None:
        found.append(skip("perf-model", f"no datasheet peak for {name}: measured only", index))
        return found, judged
    judged += _gemm(gpu, peak, index, found) + _copy(gpu, peak, index, found)
    judged += _soak(gpu, peak, index, found)
    return found, judged


def _memtest(gpu: dict[str, Any], index: int | None, found: list[Finding]) -> int:
    """Errors found fail whatever else the reading says; no errors count as a pass only over
    bytes that were tested (the probe tests none where less than about 3.3 GiB is free:
    whole 1 GiB chunks, less two for scratch)."""
    test = gpu.get("memtest")
    if not isinstance(test, dict) or not isinstance(test.get("errors"), int):
        found.append(skip("memtest", "memory pattern test not run", index))
        return 0
    tested = test.get("bytes")
    if test["errors"] > 0:
        found.append(
            fail(
                "memtest",
                f"memory pattern test found {test['errors']} errors in {tested} "
                "bytes of device memory (healthy: 0)",
                index,
            )
        )
        return 1
    if not isinstance(tested, int) or tested <= 0:
        found.append(
            skip(
                "memtest",
                f"memory pattern test covered {tested or 0} bytes (too little free device "
                "memory for one chunk): no memory verdict",
                index,
            )
        )
        return 0
    return 1


def _gemm(gpu: dict[str, Any], peak: Peak, index: int | None, found: list[Finding]) -> int:
    tflops, dtype = gpu.get("gemm_bf16_tflops"), gpu.get("gemm_dtype", peak.dtype)
    if tflops is None:
        found.append(skip("gemm", "GEMM not measured", index))
        return 0
    if dtype != peak.dtype:
        found.append(
            skip("gemm", f"GEMM measured in {dtype}; the {peak.model} peak is {peak.dtype}", index)
        )
        return 0
    fraction = tflops / peak.tflops
    if fraction < peak.gemm_floor:
        found.append(
            fail(
                "gemm-low",
                f"{dtype} GEMM {tflops:g} TFLOP/s is {fraction:.0%} of the {peak.model} "
                f"datasheet {peak.tflops:g}, below the {peak.gemm_floor:.0%} floor for a healthy "
                f"{peak.model} ({peak.floor_source})",
                index,
            )
        )
    return 1


def _soak(gpu: dict[str, Any], peak: Peak, index: int | None, found: list[Finding]) -> int:
    """The steady GEMM rate of a --soak against the model's sustained floor: from runs long
    enough for its power limit to bite, where such runs are known; else measured only."""
    soak = gpu.get("soak")
    if not isinstance(soak, dict) or not isinstance(soak.get("tflops_steady"), (int, float)):
        return 0
    steady, seconds = soak["tflops_steady"], soak.get("seconds")
    if peak.sustained_floor is None:
        text = (
            f"steady GEMM {steady:g} TFLOP/s over a {seconds} s soak, not judged: no sustained "
            f"run of a healthy {peak.model} is known to set its floor"
        )
        found.append(skip("gemm-sustained", text, index))
        return 0
    fraction = steady / peak.tflops
    if fraction < peak.sustained_floor:
        text = (
            f"steady GEMM {steady:g} TFLOP/s over a {seconds} s soak is {fraction:.0%} of the "
            f"{peak.model} datasheet {peak.tflops:g}, below the {peak.sustained_floor:.0%} a "
            f"healthy {peak.model} sustains ({peak.sustained_source})"
        )
        found.append(fail("gemm-sustained", text, index))
    return 1


def _copy(gpu: dict[str, Any], peak: Peak, index: int | None, found: list[Finding]) -> int:
    tbps = gpu.get("copy_tbps")
    if tbps is None:
        found.append(skip("copy", "device memory copy not measured", index))
        return 0
    fraction = tbps / peak.tbps
    if fraction < peak.bandwidth_floor:
        found.append(
            fail(
                "copy-low",
                f"memory copy {tbps:g} TB/s is {fraction:.0%} of the {peak.model} datasheet "
                f"{peak.tbps:g}, below the {peak.bandwidth_floor:.0%} floor for a healthy "
                f"{peak.model} ({peak.floor_source})",
                index,
            )
        )
    return 1


def check_perf_verdict(snapshot: dict[str, Any]) -> CheckResult:
    """Every GPU of the snapshot; GPUs handed to the container as MIG devices are MIG slices
    even where their own name does not say so."""
    gpus = snapshot.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return result_of([skip("perf", "no GPU was read into the snapshot")], 0)
    visible = (snapshot.get("container") or {}).get("visible_devices") or ""
    found: list[Finding] = []
    judged = 0
    for gpu in gpus:
        if mig_reason("", visible):
            gpu = {**gpu, "mig_mode": True}
        more, count = perf_findings(gpu)
        found += more
        judged += count
    return result_of(found, judged, figures="; ".join(filter(None, map(figures, gpus))))


def figures(gpu: dict[str, Any]) -> str:
    """What the table shows of one GPU's readings, e.g. "GPU 0: GEMM 667 TFLOP/s (0.67 of
    989), copy 4.22 TB/s (0.88 of 4.8), memory 130 GB tested, 0 errors"."""
    peak = peak_for(str(gpu.get("name") or ""))
    parts = []
    for key, unit, of in (
        ("gemm_bf16_tflops", "TFLOP/s", peak.tflops if peak else None),
        ("copy_tbps", "TB/s", peak.tbps if peak else None),
    ):
        value = gpu.get(key)
        if isinstance(value, (int, float)):
            share = f" ({value / of:.2f} of {of:g})" if of else ""
            parts.append(f"{'GEMM' if key.startswith('gemm') else 'copy'} {value:g} {unit}{share}")
    soak = gpu.get("soak") or {}
    if isinstance(soak.get("tflops_steady"), (int, float)):
        parts.append(f"steady GEMM {soak['tflops_steady']:g} TFLOP/s over {soak.get('seconds')} s")
    memtest = gpu.get("memtest") or {}
    if isinstance(memtest.get("bytes"), int):
        tested = memtest["bytes"] / 1e9
        parts.append(f"memory {tested:.0f} GB tested, {memtest.get('errors')} errors")
    return f"GPU {gpu.get('index')}: {', '.join(parts)}" if parts else ""
