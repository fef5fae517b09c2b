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
from datetime import datetime, timezone
from pathlib import Path

from imagekit.contract import exits
from imagekit.contract import labels as label
from imagekit.contract.refs import parse
from imagekit.engine.interface import Engine, ImageInfo, RunOptions, RunResult
from imagekit.errors import SelfCheckFailed, UsageError
from imagekit.selfcheck import registry

VALIDATED_SUFFIX = "-validated"


@dataclass(frozen=True)
class SelfCheckOptions:
    gpus: str = "auto"  # auto | all | none | N (the first N GPUs, and all N must be seen)
    ipc_host: bool = False
    shm_size: str = "8g"
    require: str = ""
    checks: str = ""
    timeout: float | None = None  # per check; None: each check's own limit
    json_path: Path | None = None
    junit_path: Path | None = None
    stamp: bool = False
    env: dict[str, str] = field(default_factory=dict)  # --env NAME=VALUE, over the image's


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
    if options.require:
        cmd += ["--require", options.require]
    if options.checks:
        cmd += ["--checks", options.checks]
    return cmd


def checkable_image(engine: Engine, image: str) -> ImageInfo:
    """The image, refused where it is not on the engine or imagekit did not build it."""
    info = engine.inspect(image)
    if info is None:
        raise UsageError(f"image {image} is not on this engine; build it or `docker pull` it first")
    if not has_selfcheck(info.labels):
        raise UsageError(
            f"image {image} has no imagekit self-check: it has no io.imagekit.* labels, so "
            "imagekit did not build it. Build it with `imagekit build`, or start your "
            "Dockerfile FROM an image imagekit built (the self-check and its labels come along)"
        )
    return info


def selfcheck_env(
    labels: dict[str, str], gpus: bool, extra: dict[str, str], count: int | None = None
) -> dict[str, str]:
    """The self-check's container environment: what the image promises (its labels),
    IMAGEKIT_EXPECT_GPU: GPUs were given, so a torch that sees none must fail, and with a
    count IMAGEKIT_EXPECT_GPUS, which torch, NVML and the device nodes must all see; then
    yours."""
    env = {"IMAGEKIT_LABELS": json.dumps(labels), "IMAGEKIT_EXPECT_GPU": str(int(gpus))}
    if gpus and count is not None:
        env["IMAGEKIT_EXPECT_GPUS"] = str(count)
    return {**env, **extra}


def gpu_count(choice: str) -> int | None:
    """--gpus N: the number; auto, all and none name none."""
    return int(choice) if choice.isdigit() else None


def run_selfcheck(engine: Engine, image: str, options: SelfCheckOptions) -> tuple[RunResult, dict]:  # type: ignore[type-arg]
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
            env=selfcheck_env(info.labels, gpus, options.env, count),
            volumes={tmp: "/imagekit-reports"},
            timeout=registry.total_limit(_names(options.checks), options.timeout),
        )
        result = engine.run(image, selfcheck_command(options), run_options)
        report = _read(Path(tmp) / "selfcheck.json")
        _copy(Path(tmp) / "selfcheck.json", options.json_path)
        _copy(Path(tmp) / "selfcheck.xml", options.junit_path)
    return result, report


def has_selfcheck(labels: dict[str, str]) -> bool:
    """imagekit's images carry the self-check and say so with their io.imagekit.* labels."""
    return label.VERSION in labels or label.CELL in labels


def wants_gpus(choice: str, engine_has_runtime: bool) -> bool:
    """--gpus all (or N) on an engine without the NVIDIA runtime is a mistake, not a CPU
    run; --gpus 0 is --gpus none."""
    given = choice == "all" or (choice.isdigit() and int(choice) > 0)
    if given and not engine_has_runtime:
        raise UsageError(
            f"--gpus {choice}: this Docker engine has no NVIDIA runtime, so no GPU can reach "
            "the container. Install the NVIDIA Container Toolkit (nvidia-ctk runtime configure "
            "--runtime=docker, then restart dockerd), or run with --gpus none for a CPU check"
        )
    return given or (choice == "auto" and engine_has_runtime)


def _names(checks: str) -> list[str]:
    chosen = [n for n in checks.split(",") if n]
    return chosen or list(registry.ORDER)


def _read(path: Path) -> dict:  # type: ignore[type-arg]
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _copy(src: Path, dest: Path | None) -> None:
    if dest and src.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def validated_on(checks: list[dict]) -> str:  # type: ignore[type-arg]
    """The GPU an image was proven on, or "cpu": a GPU name only when the stack check and at
    least one other check really ran on it (torch saw it, kernels ran there)."""
    stack = next((c for c in checks if c.get("name") == "stack"), {})
    m = stack.get("measurements", {})
    ran_on_gpu = [c for c in checks if c.get("measurements", {}).get("device") == "cuda"]
    if m.get("device") == "cuda" and m.get("gpu") and len(ran_on_gpu) >= 2:
        return str(m["gpu"])
    return "cpu"


def stamp_labels(report: dict) -> dict[str, str]:  # type: ignore[type-arg]
    checks = report.get("checks", [])
    per_check = {
        c["name"]: {"status": c["status"], "device": c.get("measurements", {}).get("device")}
        for c in checks
    }
    return {
        label.VALIDATED: "true",
        label.VALIDATED_AT: datetime.now(timezone.utc).isoformat(timespec="seconds"),
        label.VALIDATED_ON: validated_on(checks),
        label.SELFCHECK: json.dumps(per_check, sort_keys=True),
    }


def check_image(engine: Engine, image: str, options: SelfCheckOptions) -> tuple[str, str | None]:
    """Returns (the self-check's output, the validated tag if stamped). Raises on failure."""
    result, report = run_selfcheck(engine, image, options)
    output = "\n".join([result.output.rstrip(), *(f"note: {n}" for n in result.notes)])
    if result.timed_out:
        raise SelfCheckFailed(f"the self-check of {image} did not finish in time", output)
    if result.exit_code != exits.CHECK_PASSED:
        raise SelfCheckFailed(failure_line(image, report, result.exit_code), output)
    validated = None
    if options.stamp:
        validated = validated_ref(image)
        engine.stamp(image, validated, stamp_labels(report))
    return output, validated


def failure_line(image: str, report: dict, exit_code: int) -> str:  # type: ignore[type-arg]
    if not report.get("checks"):
        return f"the self-check of {image} failed (exit {exit_code}) before it wrote a report"
    names = [c["name"] for c in report["checks"] if c.get("status") == "failed"]
    if not names:
        return f"the self-check of {image} failed (exit {exit_code})"
    return f"the self-check of {image} failed: {', '.join(names)} (see the table above)"


def validated_ref(image: str) -> str:
    if "@" in image:
        raise UsageError("--stamp needs a tagged image (repo:tag), not a digest reference")
    reference = parse(image)
    return str(reference.with_tag(f"{reference.tag or 'latest'}{VALIDATED_SUFFIX}"))
