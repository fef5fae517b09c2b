"""The perf verdict over the host snapshot: each GPU's GEMM and copy against the floors of its
model (peaks.PEAKS), and its memory pattern test. Pure functions over the typed snapshot."""

from __future__ import annotations

import dataclasses

from imagekit.contract.checks import CheckResult
from imagekit.contract.host_snapshot import Gpu, HostSnapshot
from imagekit.contract.records import or_default, or_none
from imagekit.selfcheck.verdicts.findings import Finding, fail, result_of, skip
from imagekit.selfcheck.verdicts.peaks import Peak, mig_reason, peak_for

MIB = 2**20


def perf_findings(gpu: Gpu, memory_bytes: int | None = None) -> tuple[list[Finding], int]:
    """Findings about one snapshot GPU, and how many rules were judged. `memory_bytes`
    overrides the snapshot's memory_total_mib where the caller knows better (torch)."""
    index = or_none(gpu.index)
    if gpu.perf_error:
        # The probe raised on this GPU: nothing it measured there can stand for a pass.
        return [fail("perf-error", f"measuring failed: {gpu.perf_error}", index)], 1
    found: list[Finding] = []
    judged = _memtest(gpu, index, found)
    name = gpu.name
    if not name:
        found.append(skip("perf-model", "GPU name not read: no datasheet to compare with", index))
        return found, judged
    mig = mig_reason(name) or (
        f"{name} is in MIG mode: peaks are per whole GPU, so measured only"
        if gpu.mig_mode
        else None
    )
    if mig:
        found.append(skip("perf-mig", mig, index))
        return found, judged
    if memory_bytes is None and gpu.memory_total_mib:
        memory_bytes = int(gpu.memory_total_mib) * MIB
    peak = peak_for(name, memory_bytes)
    if peak is None:
        found.append(skip("perf-model", f"no datasheet peak for {name}: measured only", index))
        return found, judged
    judged += _gemm(gpu, peak, index, found) + _copy(gpu, peak, index, found)
    judged += _soak(gpu, peak, index, found)
    return found, judged


def _memtest(gpu: Gpu, index: int | None, found: list[Finding]) -> int:
    """Errors found fail whatever else the reading says; no errors count as a pass only over
    bytes that were tested (the probe tests none where less than about 3.3 GiB is free:
    whole 1 GiB chunks, less two for scratch)."""
    test = gpu.memtest
    if not test or not isinstance(test.errors, int):
        found.append(skip("memtest", "memory pattern test not run", index))
        return 0
    tested = or_none(test.bytes)
    if test.errors > 0:
        found.append(
            fail(
                "memtest",
                f"memory pattern test found {test.errors} errors in {tested} "
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


def _gemm(gpu: Gpu, peak: Peak, index: int | None, found: list[Finding]) -> int:
    tflops, dtype = or_none(gpu.gemm_bf16_tflops), or_default(gpu.gemm_dtype, peak.dtype)
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


def _soak(gpu: Gpu, peak: Peak, index: int | None, found: list[Finding]) -> int:
    """The steady GEMM rate of a --soak against the model's sustained floor: from runs long
    enough for its power limit to bite, where such runs are known; else measured only."""
    soak = gpu.soak
    if not soak or not isinstance(soak.tflops_steady, (int, float)):
        return 0
    steady, seconds = soak.tflops_steady, or_none(soak.seconds)
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


def _copy(gpu: Gpu, peak: Peak, index: int | None, found: list[Finding]) -> int:
    tbps = or_none(gpu.copy_tbps)
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


def check_perf_verdict(snapshot: HostSnapshot) -> CheckResult:
    """Every GPU of the snapshot; GPUs handed to the container as MIG devices are MIG slices
    even where their own name does not say so."""
    gpus = snapshot.gpus
    if not gpus:
        return result_of([skip("perf", "no GPU was read into the snapshot")], 0)
    visible = (snapshot.container and snapshot.container.visible_devices) or ""
    found: list[Finding] = []
    judged = 0
    for gpu in gpus:
        if mig_reason("", visible):
            gpu = dataclasses.replace(gpu, mig_mode=True)
        more, count = perf_findings(gpu)
        found += more
        judged += count
    return result_of(found, judged, figures="; ".join(filter(None, map(figures, gpus))))


def figures(gpu: Gpu) -> str:
    """What the table shows of one GPU's readings, e.g. "GPU 0: GEMM 667 TFLOP/s (0.67 of
    989), copy 4.22 TB/s (0.88 of 4.8), memory 130 GB tested, 0 errors"."""
    peak = peak_for(str(gpu.name or ""))
    parts = []
    for what, value, unit, of in (
        ("GEMM", gpu.gemm_bf16_tflops, "TFLOP/s", peak.tflops if peak else None),
        ("copy", gpu.copy_tbps, "TB/s", peak.tbps if peak else None),
    ):
        if isinstance(value, (int, float)):
            share = f" ({value / of:.2f} of {of:g})" if of else ""
            parts.append(f"{what} {value:g} {unit}{share}")
    soak = gpu.soak
    if soak and isinstance(soak.tflops_steady, (int, float)):
        seconds = or_none(soak.seconds)
        parts.append(f"steady GEMM {soak.tflops_steady:g} TFLOP/s over {seconds} s")
    memtest = gpu.memtest
    if memtest and isinstance(memtest.bytes, int):
        tested = memtest.bytes / 1e9
        parts.append(f"memory {tested:.0f} GB tested, {or_none(memtest.errors)} errors")
    return f"GPU {or_none(gpu.index)}: {', '.join(parts)}" if parts else ""
