"""Two cells that differ only in Python (and their Debian: 12 has 3.11, 13 has 3.13) share
the CUDA libraries' layers (buildtime/lockfile.py, CUDA_PARTS), and torch finds those libraries in both.

Real and heavy: the README cell and its twin, CUDA 12.6 wheels from PyPI (2.8 GB of nvidia-*
wheels, fetched once into the uv cache), Debian 13 bootstrapped from the mirror. Built and
loaded, not pushed: the layer is one uncompressed layer (one diff ID) in both images, and a
push compresses one layer into one blob (a no-cache rebuild's compressed layers are the
same bytes: tests/real/test_venv_layers.py), so a registry stores and a node pulls it once;
pushing 3.6 GB more in every run would prove the registry's deduplication, not imagekit's.
The images and the installers' cache mounts (the wheels) are removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.realengine import DOCKER, HOST_CA, REGISTRY, docker, free_cache_mounts, imagekit
from imagekit.buildtime.lockfile import CUDA_PARTS

# its fixture's teardown empties the cache mounts (the CUDA wheels) where it runs alone: last
# (conftest.py); in CI, beside the arm64 test and the rest of the real phase, it empties
# nothing (scripts/test-beside.sh)
pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.timeout(3300),
    pytest.mark.empties_cache(what="mounts"),
    pytest.mark.beside,
]

REPO = "imagekit-share"
CELLS = ("cu126-torch2.7.1-py3.11-debian12-slim", "cu126-torch2.7.1-py3.13-debian13-slim")
MATRIX = f"""
registry: {REGISTRY}
repository: {REPO}
tag: "{{id}}"
defaults: {{size_budget: 14GB}}
matrix:
  - {{cuda: "12.6", torch: "2.7.1", python: ["3.11"], os: debian12, flavor: slim}}
  - {{cuda: "12.6", torch: "2.7.1", python: ["3.13"], os: debian13, flavor: slim}}
"""
PROBE = (
    "import torch, torch.backends.cudnn as c; "
    "print(torch.__version__, torch.version.cuda, c.version())"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Debian 12 is the suite's own (conftest.py debian_bookworm); Debian 13 is bootstrapped by
    # the build (--bootstrap-base)
    root = tmp_path_factory.mktemp("share")
    (root / "envs").mkdir()
    (root / "envs" / "m.yaml").write_text(MATRIX)
    args = ["build", "--envs", "envs", "--ca-bundle", HOST_CA, "--load", "--bootstrap-base"]
    result = imagekit(*args, cwd=root, timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    yield root
    docker("rmi", "-f", *[f"{REGISTRY}/{REPO}:{cell}" for cell in CELLS], check=False)
    # the 3.6 GB of wheels in the uv cache mount: the disk fills otherwise (not beside other
    # tests' builds: realengine.free_cache_mounts)
    free_cache_mounts()


def test_the_cuda_libraries_layers_are_the_same_layers_for_both_pythons(built: Path) -> None:
    from imagekit.engine.docker import DockerEngine

    engine = DockerEngine(DOCKER)
    first, second = (
        {x.diff_id: x.size for x in engine.layers(f"{REGISTRY}/{REPO}:{cell}")} for cell in CELLS
    )
    shared = {diff_id: size for diff_id, size in first.items() if diff_id in second}
    # the nvidia-* wheels, unpacked, in their parts (one layer each, compressed side by side)
    parts = [size for size in shared.values() if size > 200_000_000]
    assert len(parts) == len(CUDA_PARTS) and sum(parts) > 2_500_000_000
    # everything else is each cell's own (torch is built per Python)
    assert sum(first.values()) - sum(shared.values()) > 1_000_000_000


@pytest.mark.parametrize("cell", CELLS)
def test_torch_loads_its_cuda_libraries_through_the_links(built: Path, cell: str) -> None:
    out = docker("run", "--rm", f"{REGISTRY}/{REPO}:{cell}", "python", "-c", PROBE).stdout
    version, cuda, cudnn = out.split()
    assert version.startswith("2.7.1") and cuda == "12.6" and int(cudnn) >= 90000
