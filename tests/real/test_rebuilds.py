"""Rebuilds reuse what did not change: the pip layer, the sdist delta, no-op and source-only."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from devkit.realengine import (
    INLINE_CACHE_KEY,
    build_args,
    docker,
    image_config,
    imagekit,
    make_project,
    marked_ca_bundle,
)

from .conftest import STACK, TAG, report, run_in_image

# every test here checks which steps BuildKit took from its cache: they run first, with the
# engine to themselves (tests/real/gate.py)
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.checks_cache]


def _build_with_pip(
    project: Path,
    root: Path,
    repository: str,
    pip: list[str],
    build_apt: tuple[str, ...] = (),
    installer: str = "pip",
) -> subprocess.CompletedProcess[str]:
    extra = (
        f"overrides:\n  - match: {{cuda: cpu}}\n    pip: {json.dumps(pip)}\n"
        f"    installer: {installer}\n"
    )
    if build_apt:
        extra += f"    build_apt: {json.dumps(build_apt)}\n"
    make_project(root, repository=repository, extra=extra)
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result


def _cached_steps(root: Path) -> dict[str, bool]:
    return {s["step"].split("] ", 1)[-1]: s["cached"] for s in report(root)["steps"]}


# torch 2.13.0 brings a newer filelock: pinning this one replaces it in the user's layer.
FILELOCK_PROBE = (
    "import glob, importlib.metadata as m, torch; "
    "site = '/opt/venv/lib/python3.11/site-packages'; "
    "print(m.version('filelock'), len(glob.glob(site + '/filelock-*.dist-info')), "
    "torch.__version__)"
)


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_adding_a_package_rebuilds_only_the_pip_layer_with_cached_bytecode(
    project: Path, tmp_path: Path, installer: str
) -> None:
    """Adding a pip package reruns only the runtime's pip step (and what follows it), never
    the builder's venv (torch); the bytecode of packages already built comes from the cache
    mount, and the non-root runtime imports from it. A package that replaces the version
    torch brought in leaves no trace of it. uv runs from the builder (a bind mount): the
    runtime keeps none of it."""
    nonce = uuid.uuid4().hex[:8]  # a pip list no earlier build had
    first = [f'six; platform_system != "nonce-{nonce}"']
    repository = f"imagekit-{installer}-test"
    for pip in (first, [*first, "filelock==3.12.0"]):
        root = tmp_path / f"p{len(pip)}"
        result = _build_with_pip(project, root, repository, pip, installer=installer)
    steps = report(root)["steps"]
    assert not [s["step"] for s in steps if "[builder" in s["step"] and not s["cached"]]
    assert _cached_steps(root)["COPY --from=builder /opt/venv /opt/venv"] is True  # torch
    # the team's packages step (BuildKit shortens a long step's name: found by its script)
    (install,) = [s for s in steps if "team_install.py" in s["step"]]
    assert install["step"].startswith("[runtime ") and install["cached"] is False
    hits = re.search(r"bytecode: \d+ files, (\d+) from the cache", result.stdout)
    assert hits and int(hits.group(1)) >= 1, result.stdout[-3000:]  # six.py, compiled before
    tag = f"127.0.0.1:5000/{repository}:2.13.0-cpu-py3.11-debian12-slim"
    assert run_in_image(tag, "python", "-c", FILELOCK_PROBE) == "3.12.0 1 2.13.0+cpu"
    verbose = docker("run", "--rm", tag, "python", "-v", "-c", "import six").stderr
    assert "__pycache__/six.cpython-311.pyc matches /opt/venv/" in verbose
    # BuildKit leaves the bind mount's target behind as an empty directory; nothing of uv.
    no_uv = "find /opt/uv -mindepth 1 2>/dev/null | wc -l; command -v uv || echo absent"
    assert run_in_image(tag, "sh", "-c", no_uv).split() == ["0", "absent"]
    docker("rmi", tag, f"127.0.0.1:5000/{repository}:{STACK}-latest")


def test_with_build_apt_an_sdist_compiles_in_the_builder_and_reaches_the_runtime_as_a_delta(
    project: Path, tmp_path: Path
) -> None:
    """crcmod ships only an sdist whose C extension builds when a compiler is there. With
    build_apt the builder has one; the runtime gets the compiled extension, not gcc, as a
    delta on the builder's venv: adding a package re-copies the delta, never torch, and
    a removal (torch's filelock, replaced) reaches the runtime too."""
    nonce = uuid.uuid4().hex[:8]
    first = [f'crcmod; platform_system != "nonce-{nonce}"']
    build_apt = ("build-essential", "python3-dev")
    for pip in (first, [*first, "filelock==3.12.0"]):
        root = tmp_path / f"p{len(pip)}"
        _build_with_pip(project, root, "imagekit-delta-test", pip, build_apt)
    cached = _cached_steps(root)
    assert cached["COPY --from=builder /opt/venv /opt/venv"] is True  # torch: reused
    assert cached["COPY --from=packages /opt/imagekit-delta/root/ /"] is False
    tag = "127.0.0.1:5000/imagekit-delta-test:2.13.0-cpu-py3.11-debian12-slim"
    probe = "import crcmod._crcfunext as c; print(c.__file__.endswith('.so'))"
    assert run_in_image(tag, "python", "-c", probe) == "True"
    # build_apt stayed in the builder: the runtime has the g++ that torch.compile needs
    # (compile support), but none of build_apt's packages (make comes with build-essential)
    assert run_in_image(tag, "sh", "-c", "command -v make || echo none") == "none"
    absent = "dpkg -s build-essential python3-dev >/dev/null 2>&1 || echo absent"
    assert run_in_image(tag, "sh", "-c", absent) == "absent"
    assert run_in_image(tag, "python", "-c", FILELOCK_PROBE) == "3.12.0 1 2.13.0+cpu"
    docker("rmi", tag, "127.0.0.1:5000/imagekit-delta-test:" + STACK + "-latest")


@pytest.mark.compat
def test_a_no_op_rebuild_gives_the_same_image_id(project: Path) -> None:
    """No clock in the labels: a cached rebuild leaves nothing dangling and keeps the digest
    CI promotes. The creation time comes from SOURCE_DATE_EPOCH (set by devkit/realengine.py)
    or the commit."""
    ids = []
    for _ in range(2):
        result = imagekit(*build_args(marked_ca_bundle(project)), cwd=project)
        assert result.returncode == 0, result.stderr[-2000:]
        ids.append(docker("image", "inspect", "--format", "{{.Id}}", TAG).stdout.strip())
    rerun = [s["step"] for s in report(project)["steps"] if not s["cached"]]
    # A step that ran again (its cache record gone) names why the ID changed.
    assert ids[0] == ids[1], f"steps run again: {rerun}"
    labels = json.loads(docker("image", "inspect", TAG).stdout)[0]["Config"]["Labels"]
    assert labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20+00:00"
    # inline cache unsettles the config (moby/buildkit#1876): none unless asked
    assert INLINE_CACHE_KEY not in image_config(TAG)


@pytest.mark.compat
def test_inline_cache_is_written_when_asked_on_every_engine(project: Path) -> None:
    """`--cache-to type=inline`: buildx's flag, or the build argument where there is no
    buildx (Docker 20.10). A cached build: only the config is new."""
    more = ("--cache-to", "type=inline", "--tag-suffix", "-inline")
    result = imagekit(*build_args(project / "ca-marked.pem", *more), cwd=project)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert INLINE_CACHE_KEY in image_config(TAG + "-inline")
    docker("rmi", TAG + "-inline", f"{TAG.rsplit(':', 1)[0]}:{STACK}-latest-inline")


def test_source_only_change_rebuilds_only_the_last_layer(project: Path) -> None:
    unchanged = imagekit(*build_args(project / "ca-marked.pem"), cwd=project)
    assert unchanged.returncode == 0, unchanged.stdout[-2000:]
    token = uuid.uuid4().hex  # unique content: BuildKit's cache is content-addressed
    (project / "app" / "train.py").write_text(f'print("training code {token}")\n')
    result = imagekit(*build_args(project / "ca-marked.pem"), cwd=project)
    assert result.returncode == 0, result.stdout[-2000:]
    steps = report(project)["steps"]
    rebuilt = [s["step"] for s in steps if not s["cached"] and "FROM" not in s["step"]]
    assert len(rebuilt) == 1 and rebuilt[0].endswith("COPY --chown=1000:1000 source/ /workspace/")
    assert steps[-1]["step"] == rebuilt[0]  # the last layer, and only that one
    assert run_in_image(TAG, "cat", "/workspace/train.py").endswith(f'"training code {token}")')
