"""The venv in layers, for real: each layer one group, reproducible across a no-cache rebuild
(the digests the registry stores), and together the same venv as one layer.

The CPU test cell has no NVIDIA libraries (its torch wheel has none), so its CUDA layer is
empty here; the CUDA layer's sharing across Pythons is measured by bench/bench_layers.py
on the README cell and its Python 3.13 / Debian 13 twin (docs/benchmarks.md)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from devkit.realengine import (
    REGISTRY,
    build_args,
    docker,
    imagekit,
    layer_sizes,
    layer_tar,
    make_project,
    marked_ca_bundle,
    registry_get,
    require_exporter,
)

# builds_cold: after the other real tests, past the `beside` ones (tests/real/conftest.py)
pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.builds_cold,
    pytest.mark.timeout(1800),
]

TAG = "2.13.0-cpu-py3.11-debian12-slim"
# Every file under /opt/venv (through the links into /opt/imagekit/cuda) with its sha256.
# .pyc files are left out: their bytes depend on how they were compiled (hash-checked in
# the layered venv, for reproducibility); the .py files they come from are compared. A
# RECORD is compared without its REQUESTED line (pip lists the marker it wrote there).
FILES = r"""
import hashlib, json, os
found = {}
for top, dirs, files in os.walk("/opt/venv", followlinks=True):
    for name in files:
        path = os.path.join(top, name)
        if name.endswith(".pyc") or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if name == "RECORD":
            data = b"\n".join(l for l in data.splitlines() if b"/REQUESTED," not in l)
        found[os.path.relpath(path, "/opt/venv")] = hashlib.sha256(data).hexdigest()
print(json.dumps(found))
"""


def members(repo: str, digest: str) -> list[str]:
    """The paths in a pushed layer (zstd, gzip or plain)."""
    blob = registry_get(f"{repo}/blobs/{digest}", accept="*/*")
    with tarfile.open(fileobj=layer_tar(io.BytesIO(blob)), mode="r|") as tar:
        return [member.name for member in tar]


def build(root: Path, *more: str, push: bool = True) -> None:
    """Built and kept here (--load: the tests run it); pushed, unless `push` is false, in zstd
    (the push's default on this engine, where BuildKit writes the layers: require_exporter)."""
    require_exporter()
    pushing = ("--push", "--compression", "zstd") if push else ()
    args = build_args(marked_ca_bundle(root), "--load", *pushing, *more)
    result = imagekit(*args, cwd=root, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.fixture(scope="module")
def split_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(tmp_path_factory.mktemp("split") / "p", repository="imagekit-split")
    build(root)
    return root


def test_a_no_cache_rebuild_reproduces_every_big_layer_in_the_registry(
    split_project: Path,
) -> None:
    """Every large layer's digest, compressed (zstd) as the registry stores it, is the same
    after a rebuild with no cache: the files, their times and the compression all repeat.
    (One rebuild, in zstd, the push's default here; gzip's was a second no-cache build of
    the same layers, and is what the engines without BuildKit's exporter push.)"""
    before = layer_sizes("imagekit-split", TAG)
    build(split_project, "--no-cache")
    after = layer_sizes("imagekit-split", TAG)
    # the four largest: torch, apt, features and the base
    big = sorted(before, key=lambda digest: -before[digest])[:4]
    assert before[big[-1]] > 10_000_000, before
    assert set(big) <= set(after)


def test_each_package_layer_holds_one_group(split_project: Path) -> None:
    sizes = layer_sizes("imagekit-split", TAG)
    by_size = sorted(sizes, key=lambda digest: -sizes[digest])
    contents = {digest: members("imagekit-split", digest) for digest in by_size[:4]}
    site = "opt/venv/lib/python3.11/site-packages/"
    torch = next(names for names in contents.values() if f"{site}torch/__init__.py" in names)
    assert all(n.startswith("opt") for n in torch)
    assert not any(n.startswith(f"{site}onnx") for n in torch)
    features = next(names for names in contents.values() if f"{site}onnx/__init__.py" in names)
    assert not any(n.startswith(f"{site}torch/") for n in features)
    assert all(n.startswith("opt") for n in features)
    # uv's unpack cache, beside each group's target while it installs, reached no layer
    assert not any(".uv-unpack" in n for names in contents.values() for n in names)


def test_the_layered_venv_is_the_single_layer_venv(split_project: Path, tmp_path: Path) -> None:
    single = make_project(tmp_path / "single", repository="imagekit-single", extra="  # single\n")
    matrix = single / "envs" / "cpu.yaml"
    matrix.write_text(
        matrix.read_text().replace("defaults:\n", "defaults:\n  venv_layers: single\n")
    )
    build(single, push=False)  # only run here: its layers are not what this test reads
    found = {}
    for repo in ("imagekit-split", "imagekit-single"):
        out = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python",
                     f"{REGISTRY}/{repo}:{TAG}", "-c", FILES).stdout  # fmt: skip
        found[repo] = json.loads(out)
    split, one = found["imagekit-split"], found["imagekit-single"]
    # REQUESTED marks what the user asked for: the layered install pins every package
    differ = {p for p in set(split) | set(one) if split.get(p) != one.get(p)}
    assert {p.rsplit("/", 1)[-1] for p in differ} <= {"REQUESTED"}, sorted(differ)[:20]
    assert len(split) > 1000
