"""A build from a package lock, for real: `imagekit lock --packages` on the host (torch from
the wheelhouse, the rest from PyPI), then a build of the CPU test cell installs exactly the
locked versions, hash-checked, without resolving anything in the builder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devkit.realengine import REGISTRY, build_args, docker, imagekit, make_project, marked_ca_bundle
from devkit.realengine import wheelhouse as wheels
from imagekit.buildtime import lockfile
from imagekit.locks import packages

from .conftest import cell_of

# builds_cold: after the other real tests, past the `beside` ones (tests/real/conftest.py)
pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.builds_cold,
    pytest.mark.timeout(1800),
]

TAG = f"{REGISTRY}/imagekit-locked:2.13.0-cpu-py3.11-debian12-slim"
VERSIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def test_a_build_from_a_lock_installs_exactly_the_locked_versions(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", repository="imagekit-locked")
    locked = imagekit(
        "lock", "--envs", "envs", "--packages", "--no-bases",
        "--torch-index", "none", "--wheelhouse", str(wheels()), cwd=root,
    )  # fmt: skip
    assert locked.returncode == 0, locked.stdout + locked.stderr
    lock = packages.read(root / "envs" / "packages.lock", cell_of("imagekit-locked"))
    assert lock is not None
    pins = {p.name: p.requirement.split("==")[1] for group in lock.groups.values() for p in group}
    assert pins["torch"] == "2.13.0+cpu" and "onnx" in pins
    # the test project commits no Dockerfiles, so `render --check` would fail on those
    assert imagekit("lock", "--envs", "envs", "--check", cwd=root).returncode == 0

    result = imagekit(*build_args(marked_ca_bundle(root)), cwd=root, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    out = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", TAG, "-c", VERSIONS)
    installed = {lockfile.normalize(k): v for k, v in json.loads(out.stdout).items()}
    assert {name: installed.get(name) for name in pins} == pins
    # nothing beyond the lock but the venv's own installer
    assert set(installed) - set(pins) <= {"pip"}, sorted(set(installed) - set(pins))
    # the SBOM gives each locked package the lock's hashes (every file the pin allows)
    sbom = json.loads(imagekit("sbom", TAG, "--from", "image", cwd=root).stdout)
    hashes = {c["name"]: {h["content"] for h in c.get("hashes", [])} for c in sbom["components"]}
    torch = next(p for p in lock.groups["torch"] if p.name == "torch")
    assert hashes["torch"] == set(torch.hashes) and torch.hashes
    # the builder copied the lock's group files, hashes and all, instead of resolving
    result = imagekit(*build_args(marked_ca_bundle(root), "--target", "builder"), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    staged = docker("run", "--rm", "--entrypoint", "cat", TAG, "/opt/imagekit/groups/torch.txt")
    assert staged.stdout == packages.group_files(lock)["torch"]
