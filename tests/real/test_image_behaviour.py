"""The image as a base for others and outside its entrypoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import TAG, pushed_report, run_in_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_derived_images_keep_no_apt_downloads_and_no_baked_frontend(project: Path) -> None:
    """A user's `apt-get install` FROM our image behaves as on Debian's own images."""
    env = run_in_image("--entrypoint", "env", TAG)
    assert "DEBIAN_FRONTEND" not in env
    out = run_in_image(
        "-u", "0", "--entrypoint", "sh", TAG, "-c",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends tree >/dev/null && ls /var/cache/apt/archives/ | grep -c deb$ || true",
    )  # fmt: skip
    assert out.splitlines()[-1] == "0"


@pytest.mark.parametrize("limit", [["--cpus", "1"], ["--cpuset-cpus", "0"]])
def test_threads_are_tuned_without_the_entrypoint(project: Path, limit: list[str]) -> None:
    """Kubernetes `command:`, `--entrypoint`, pyxis: the venv's Python sets the threads."""
    probe = "import os, torch; print(os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"
    out = run_in_image(*limit, "--entrypoint", "python", TAG, "-c", probe)
    assert out == "1 1"
    mine = run_in_image(
        *limit, "-e", "OMP_NUM_THREADS=2", "--entrypoint", "python", TAG, "-c", probe
    )
    assert mine == "2 2"  # a value the user set is kept


def test_threads_are_tuned_in_torchrun_workers_without_the_entrypoint(project: Path) -> None:
    script = (
        "import os, torch; print('omp', os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"
    )
    out = run_in_image(
        "--cpus", "1", "--entrypoint", "sh", TAG, "-c",
        f'echo "{script}" > /tmp/t.py && torchrun --nproc-per-node 1 /tmp/t.py',
    )  # fmt: skip
    assert "omp 1 1" in out.splitlines()


def test_the_session_image_is_proven_x86_64_by_its_own_files(project: Path) -> None:
    """The local image, read through the engine before it was tagged: the OS's shell, the
    venv's Python, torch's native code and wheel tag are all x86-64's (issue 49)."""
    content = pushed_report(project)["content"]
    whats = {c["what"] for c in content}
    wanted = {"the OS's shell, /bin/sh", "the venv's Python", "torch's native code"}
    assert wanted | {"torch's wheel tag"} <= whats, content
    assert {c["found"] for c in content} == {"x86_64"} and all(c["ok"] for c in content)
