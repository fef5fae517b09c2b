"""Build control: size budgets, missing bases, bad inputs, Ctrl-C, --keep-going."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devkit.realengine import (
    build_args,
    docker,
    imagekit,
    make_project,
)

from .conftest import cell_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_size_budget_names_the_layers(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p", repository="imagekit-budget")  # TAG is the session's
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("size_budget: 3GB", "size_budget: 300MB"))
    result = imagekit(*build_args(project / "ca-marked.pem", "--progress", "quiet"), cwd=root)
    assert result.returncode == 6
    assert (
        "over-budget" in result.stdout and "over the cell's size_budget of 0.30 GB" in result.stdout
    )
    assert "the venv's torch layer" in result.stdout


def test_a_cell_whose_base_cannot_be_had_stops_the_run_before_building(
    tmp_path: Path, project: Path
) -> None:
    unreachable = "  - {cuda: cpu, torch: '2.13.0', python: '3.12', os: debian12, flavor: slim,"
    unreachable += " installer: uv, base: '127.0.0.1:9/nothing/here:1'}\n"
    root = make_project(tmp_path / "p", repository="imagekit-preflight")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("matrix:\n", "matrix:\n" + unreachable))
    started = time.monotonic()
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=root)
    assert result.returncode == 6, result.stderr
    assert time.monotonic() - started < 60
    assert "cells cannot be built here; nothing was built" in result.stderr
    assert "127.0.0.1:9/nothing/here:1: not on this engine; its registry:" in result.stderr
    assert (
        "Buildable here: imagekit-preflight-cpu-torch2.13.0-py3.11-debian12-slim" in result.stderr
    )
    assert "imagekit-preflight" not in docker("images", "--format", "{{.Repository}}").stdout


def test_bad_wheelhouse_fails_before_building(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = imagekit("build", "--envs", "envs", "--wheelhouse", str(tmp_path / "none"), cwd=root)
    assert result.returncode == 2 and "is not a directory" in result.stderr
    assert not (root / "reports").exists()


def test_ctrl_c_stops_the_build_and_leaves_no_tag(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p", repository="imagekit-interrupt")
    for ref in docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if "imagekit-interrupt" in ref:  # left by an earlier, failed run
            docker("rmi", ref)
    args = build_args(project / "ca-marked.pem", "--no-cache")
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=root,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # see each line as it is printed
        # As a shell that backgrounds a job starts it: SIGINT ignored. imagekit restores it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait until BuildKit is in the long torch install step
        if ("[builder" in line and "torch==" in line) or time.monotonic() > deadline:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted" in rest
    images = docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout
    assert "imagekit-interrupt" not in images


def test_keep_going_builds_the_rest_and_names_the_failed_cell(
    tmp_path: Path, project: Path
) -> None:
    # Python 3.12 on Debian 12 needs a uv-managed CPython, downloaded from GitHub: offline
    # here, so that cell really fails while the other one builds.
    broken = (
        '  - {cuda: cpu, torch: "2.13.0", python: "3.12", os: debian12, flavor: slim,'
        " installer: uv}\n"
    )
    root = make_project(tmp_path / "p", repository="imagekit-keepgoing")  # TAG is the session's
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(matrix.read_text().replace("matrix:\n", "matrix:\n" + broken))
    result = imagekit(
        *build_args(
            project / "ca-marked.pem", "--keep-going", "--jobs", "2", "--progress", "quiet"
        ),
        cwd=root,
    )
    assert result.returncode == 6
    assert (
        "of 2 cells, 1 failed: imagekit-keepgoing-cpu-torch2.13.0-py3.12-debian12-slim"
        in result.stderr
    )
    lines = result.stdout.splitlines()
    assert any(
        line.startswith(cell_of("imagekit-keepgoing")) and " built " in line for line in lines
    )
    assert "imagekit-keepgoing-cpu-torch2.13.0-py3.12-debian12-slim failed:" in result.stdout
    assert "exit code" in result.stdout  # the tail of its log


# -- self-check in real containers ------------------------------------------------------
