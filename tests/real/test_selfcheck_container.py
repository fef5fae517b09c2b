"""The self-check in real containers of the test image."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devkit.realengine import (
    REGISTRY,
    docker,
    imagekit,
)

from .conftest import TAG

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_selfcheck_passes_in_the_cpu_container(project: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    result = imagekit(
        "test",
        TAG,
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        cwd=project,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    functional = ("stack", "amp", "checkpoint", "compile", "ddp", "flash", "onnx", "int8")
    assert {n: checks[n]["status"] for n in functional} == dict.fromkeys(functional, "passed")
    # torch.compile works out of the box: the runtime carries g++ and the Python headers
    assert checks["compile"]["measurements"]["backend"] == "inductor"
    assert checks["int8"]["measurements"]["size_ratio_fp32_vs_int8"] > 3
    assert (
        checks["tensorrt"]["status"] == "skipped"
        and "tensorrt package is not installed" in checks["tensorrt"]["reason"]
    )
    assert (
        checks["ddp"]["measurements"]["backend"] == "gloo"
        and checks["ddp"]["measurements"]["world_size"] == 2
    )
    assert checks["onnx"]["measurements"]["provider_ran"] == "CPUExecutionProvider"
    assert "<testsuite" in (tmp_path / "r.xml").read_text()
    print(f"CPU self-check in a container: {elapsed:.1f}s")


def test_a_broken_promise_fails(project: Path) -> None:
    broken = f"{REGISTRY}/imagekit-test:broken-promise"
    container = docker("create", TAG).stdout.strip()
    docker("commit", "--change", 'LABEL io.imagekit.torch="2.7.1"', container, broken)
    docker("rm", container)
    result = imagekit("test", broken, "--checks", "stack", cwd=project)
    assert result.returncode == 8
    assert "label io.imagekit.torch promises torch 2.7.1, the image has torch 2.13.0" in (
        result.stdout  # the report first, on stdout
    )
    assert result.stderr.strip().splitlines()[-1] == (
        f"imagekit: error: the self-check of {broken} failed: stack (see the table above)"
    )
    docker("rmi", broken)


def test_a_hanging_check_times_out_and_the_others_run(project: Path) -> None:
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_SELFCHECK_FAULT=ddp-hang",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "ddp,flash",
        "--timeout",
        "20",
        check=False,
    )
    assert result.returncode == 1
    ddp = next(line for line in result.stdout.splitlines() if line.startswith("ddp"))
    assert "TIMEOUT" in ddp and "timed out after 20s" in ddp
    assert any(line.startswith("flash") and "PASSED" in line for line in result.stdout.splitlines())


def test_a_ddp_rank_that_dies_fails_the_check_without_waiting_for_its_limit(
    project: Path,
) -> None:
    started = time.monotonic()
    result = docker(
        "run", "--rm", "-e", "IMAGEKIT_SELFCHECK_FAULT=ddp-die", TAG,
        "python", "-m", "imagekit.selfcheck", "--checks", "ddp", check=False,
    )  # fmt: skip
    assert result.returncode == 1
    ddp = next(line for line in result.stdout.splitlines() if line.startswith("ddp"))
    assert "FAILED" in ddp and "rank 1 died with exit code 3" in ddp
    assert time.monotonic() - started < 60  # far below the check's 150 s limit


def test_a_crashing_check_reports_its_signal(project: Path) -> None:
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_SELFCHECK_FAULT=amp-crash",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "amp",
        check=False,
    )
    assert result.returncode == 1
    assert "crashed: killed by signal SIGSEGV (11)" in result.stdout


def test_an_image_without_the_self_check_is_refused_clearly(project: Path) -> None:
    result = imagekit("test", "debian:bookworm-slim", cwd=project)
    assert result.returncode == 2, result.stderr
    assert "has no imagekit self-check" in result.stderr and "internal error" not in result.stderr


@pytest.mark.compat  # `imagekit test` on each engine: its container, its checks, the stamp
def test_stamp_marks_a_passing_image(project: Path) -> None:
    result = imagekit("test", TAG, "--checks", "stack,flash", "--stamp", cwd=project)
    assert result.returncode == 0, result.stderr
    labels = json.loads(docker("image", "inspect", f"{TAG}-validated").stdout)[0]["Config"][
        "Labels"
    ]
    assert labels["io.imagekit.validated"] == "true" and labels["io.imagekit.validated.on"] == "cpu"
    assert json.loads(labels["io.imagekit.selfcheck"]) == {
        "flash": {"device": "cpu", "status": "passed"},
        "stack": {"device": "cpu", "status": "passed"},
    }
    assert labels["io.imagekit.torch"] == "2.13.0"  # the image's own labels are kept


def test_a_cuda_image_given_gpus_that_torch_cannot_see_fails(project: Path) -> None:
    """The false green of a GPU host whose torch runs on the CPU: here GPUs were 'given'
    (IMAGEKIT_GPUS=all, as `imagekit test --gpus all` sets) to an image labelled CUDA."""
    labels = {"io.imagekit.cuda": "12.6", "io.imagekit.min-driver": "525.60.13"}
    result = docker(
        "run",
        "--rm",
        "-e",
        "IMAGEKIT_GPUS=all",
        "-e",
        f"IMAGEKIT_LABELS={json.dumps(labels)}",
        TAG,
        "python",
        "-m",
        "imagekit.selfcheck",
        "--checks",
        "stack",
        check=False,
    )
    assert result.returncode == 1
    stack = next(line for line in result.stdout.splitlines() if line.startswith("stack"))
    assert "FAILED" in stack and "torch runs on the CPU" in stack
    assert "no /dev/nvidia* devices" in stack and "nvidia-container-toolkit" in stack


def test_compile_without_a_compiler_fails_with_the_reason(project: Path) -> None:
    result = docker(
        "run", "--rm", "-e", "CXX=/usr/bin/no-such-g++", TAG,
        "python", "-m", "imagekit.selfcheck", "--checks", "compile", check=False,
    )  # fmt: skip
    assert result.returncode == 1
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("compile"))
    assert "FAILED" in line and "torch.compile failed" in line and "compiler" in line


def test_a_snapshot_written_in_the_container_judges_the_same_on_the_host(
    project: Path, tmp_path: Path
) -> None:
    """--snapshot in the real image, --judge on this host (no torch here): the same table,
    the same exit code, the int8 check's CPU flags recorded from this machine's CPU."""
    tmp_path.chmod(0o777)  # the image's user writes the snapshot
    checks = "stack,gpus,health,ddp,int8,perf,links"
    live = docker(
        "run", "--rm", "-v", f"{tmp_path}:/out", TAG,
        "python", "-m", "imagekit.selfcheck", "--checks", checks,
        "--snapshot", "/out/host.json", check=False,
    )  # fmt: skip
    judged = subprocess.run(
        [sys.executable, "-m", "imagekit.selfcheck", "--judge", str(tmp_path / "host.json")],
        capture_output=True,
        text=True,
    )
    assert (judged.returncode, judged.stdout) == (live.returncode, live.stdout)
    assert live.returncode == 0, live.stdout + live.stderr
    snap = json.loads((tmp_path / "host.json").read_text())
    cpu_flags = Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split()
    assert set(snap["cpu"]["flags"]) == set(cpu_flags[1:])
    assert snap["nvml"]["available"] is False and snap["gpus"] == []
    assert snap["torch"]["cuda_available"] is False
    assert snap["checks"]["ddp"]["status"] == "passed"
