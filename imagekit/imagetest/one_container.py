"""`imagekit test IMAGE`: run the self-check inside a container, the way training would run.

The container gets a large /dev/shm (or the host IPC namespace), unlimited memlock, and
every GPU when the engine has an NVIDIA runtime. The image's real labels are passed in,
so a promise the image cannot keep fails. `--stamp` marks a passing image as validated.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import terminal
from imagekit.contract import check_table, exits
from imagekit.contract.checks import CheckResult, RecordError, results_from_report
from imagekit.engine.interface import RunOptions, RunRegistryEngine, RunResult
from imagekit.errors import SelfCheckFailed
from imagekit.imagetest import attest
from imagekit.imagetest.image import (
    checkable_image,
    gpu_count,
    selfcheck_env,
    slowdown_for,
    wants_gpus,
)
from imagekit.imagetest.stamp import stamp_labels, validated_ref


@dataclass(frozen=True)
class SelfCheckOptions:
    gpus: str = "auto"  # auto | all | none | N (the first N GPUs, and all N must be seen)
    ipc_host: bool = False
    shm_size: str = "8g"
    require: str = ""
    checks: str = ""
    timeout: float | None = None  # per check; None: each check's own limit
    soak: float = 0.0  # --soak SECONDS: the GEMM held that long on every GPU (0: none)
    json_path: Path | None = None
    junit_path: Path | None = None
    snapshot_path: Path | None = None  # --snapshot: the host snapshot the verdict judged
    stamp: bool = False
    env: dict[str, str] = field(default_factory=dict)  # --env NAME=VALUE, over the image's
    # --attest KEY: after a pass, sign the verdict for the image's registry digest (cosign)
    attest: str | None = None


@dataclass(frozen=True)
class Written:
    """What the self-check wrote in the run's report folder, as written (bytes)."""

    report: bytes | None = None
    snapshot: bytes | None = None


def selfcheck_command(options: SelfCheckOptions) -> list[str]:
    cmd = ["python", "-m", "imagekit.selfcheck"]
    if options.timeout:
        cmd += ["--timeout", f"{options.timeout:g}"]
    cmd += [
        "--json",
        "/imagekit-reports/selfcheck.json",
        "--junit",
        "/imagekit-reports/selfcheck.xml",
    ]
    if options.soak:
        cmd += ["--soak", f"{options.soak:g}"]
    if options.require:
        cmd += ["--require", options.require]
    if options.checks:
        cmd += ["--checks", options.checks]
    if options.attest or options.snapshot_path:  # an attestation names the snapshot's digest
        cmd += ["--snapshot", "/imagekit-reports/host.json"]
    return cmd


def run_selfcheck(
    engine: RunRegistryEngine, image: str, options: SelfCheckOptions
) -> tuple[RunResult, list[CheckResult], Written]:
    info = checkable_image(engine, image)
    gpus = wants_gpus(options.gpus, engine.has_gpu_runtime())
    count = gpu_count(options.gpus)
    with tempfile.TemporaryDirectory(prefix="imagekit-selfcheck-") as tmp:
        os.chmod(tmp, 0o777)  # the image's non-root user writes the reports
        run_options = RunOptions(
            shm_size=None if options.ipc_host else options.shm_size,
            ipc_host=options.ipc_host,
            gpus=gpus,
            gpu_ids=tuple(str(i) for i in range(count or 0)),
            env=selfcheck_env(info.labels, gpus, options.env, count, info.architecture),
            volumes={tmp: "/imagekit-reports"},
            timeout=check_table.total_limit(_names(options.checks), options.timeout)
            * slowdown_for(info.architecture)
            + options.soak,
        )
        result = engine.run(image, selfcheck_command(options), run_options)
        _copy(Path(tmp) / "selfcheck.json", options.json_path)
        _copy(Path(tmp) / "selfcheck.xml", options.junit_path)
        _copy(Path(tmp) / "host.json", options.snapshot_path)
        written = Written(_bytes(Path(tmp) / "selfcheck.json"), _bytes(Path(tmp) / "host.json"))
    return result, _results(written.report), written


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _names(checks: str) -> list[str]:
    chosen = [n for n in checks.split(",") if n]
    return chosen or list(check_table.ORDER)


def _results(report: bytes | None) -> list[CheckResult]:
    """The report's results; none where it was not written or is not a report (the exit code
    decides then, and the failure line says no report was read)."""
    try:
        return results_from_report(json.loads(report)) if report is not None else []
    except (ValueError, RecordError):
        return []


def _copy(src: Path, dest: Path | None) -> None:
    if dest and src.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def check_image(
    engine: RunRegistryEngine, image: str, options: SelfCheckOptions
) -> tuple[list[str], str | None]:
    """Returns (the self-check's output lines, the validated tag if stamped). Raises on
    failure. What the container printed is shown behind a gutter: the image under test
    (a pull request's, perhaps) cannot print a line of imagekit's output."""
    tested = attest.in_registry(engine, image) if options.attest else image
    result, checks, written = run_selfcheck(engine, tested, options)
    output = [*terminal.foreign(result.output), *(f"note: {n}" for n in result.notes)]
    if result.timed_out:
        raise SelfCheckFailed(f"the self-check of {image} did not finish in time", output)
    if result.exit_code != exits.CHECK_PASSED:
        raise SelfCheckFailed(failure_line(image, checks, result.exit_code), output)
    validated = None
    if options.stamp:
        validated = validated_ref(image)
        engine.stamp(image, validated, stamp_labels(checks))
    if options.attest:
        output += attest.passing_run(tested, written.report, written.snapshot, options.attest)
    return output, validated


def failure_line(image: str, checks: list[CheckResult], exit_code: int) -> str:
    if not checks:
        return f"the self-check of {image} failed (exit {exit_code}) before it wrote a report"
    names = [c.name for c in checks if c.failed]
    if not names:
        return f"the self-check of {image} failed (exit {exit_code})"
    return f"the self-check of {image} failed: {', '.join(names)} (see the table above)"
