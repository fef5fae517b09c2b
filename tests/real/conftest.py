"""The session's test image: one CPU torch cell built once (from the local wheelhouse) and
pushed to the local registry; every real test reuses it and BuildKit's cache."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devkit.realengine import (
    REGISTRY,
    build_args,
    debian_base,
    docker,
    forget_made,
    imagekit,
    make_project,
    marked_ca_bundle,
    require_engine,
)

from . import budget, disk, gate

STACK = "cpu-torch2.13.0-py3.11-debian12-slim"  # a tag template's {id}
CELL = f"imagekit-test-{STACK}"  # the session project's cell: <repository>-<stack>


def cell_of(repository: str) -> str:
    """The test cell's id in a project made with make_project(repository=...)."""
    return f"{repository}-{STACK}"


TAG = f"{REGISTRY}/imagekit-test:2.13.0-cpu-py3.11-debian12-slim"
# what the cleanup after each test file keeps (images_made_removed): the session image's tags,
# and the image the session build pushed (`project` adds it)
SESSION_IMAGES = [TAG, f"{REGISTRY}/imagekit-test:{STACK}-latest"]
# when scripts/test-all.sh may start the `beside` tests (real_with_beside)
GATE = gate.from_env()


def pytest_configure(config: pytest.Config) -> None:
    # a plugin, not this conftest's own hooks: the session's fixtures are set up under the
    # session node, which sees only the root conftest's hooks
    if not config.pluginmanager.has_plugin(budget.NAME):
        config.pluginmanager.register(budget.Plugin(budget.load()), budget.NAME)
    if not config.pluginmanager.has_plugin(disk.NAME):
        config.pluginmanager.register(disk.Plugin(), disk.NAME)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In the random order they were given (pytest-randomly shuffles before this hook), the
    tests that check BuildKit's cache first, while they have the engine to themselves (gate.py),
    and the tests that empty BuildKit's shared cache last: a test after them built the session
    cell cold, a minute over its budget. Of those, the one that empties all of it first: after
    the CUDA twins (GBs of layers), its `docker builder prune` alone took about 100 s.
    Before those, the tests that install the whole venv uncached (`builds_cold`): beside the
    `beside` tests, which start after the cache checks, the two venv-layer tests took 156-205 s
    each, against 60 s after them (r13-r16, 2026-11-29), the CPUs and the disk shared three
    ways."""
    items.sort(key=_order)


def _order(item: pytest.Item) -> int:
    if item.get_closest_marker(gate.MARK) is not None:
        return 0
    mark = item.get_closest_marker("empties_cache")
    if mark is None:
        return 2 if item.get_closest_marker("builds_cold") is not None else 1
    return 3 if mark.kwargs.get("what") == "all" else 4


def pytest_runtest_setup(item: pytest.Item) -> None:
    GATE.test_starting(item.get_closest_marker(gate.MARK) is not None)


@pytest.fixture(scope="session", autouse=True)
def debian_bookworm() -> str:
    """debian:bookworm-slim on the engine under test, made if missing (devkit/realengine.py),
    before any other fixture: every real test may build the test cell, and on a wiped engine
    any of them may come first. A session fixture: its time is no test's own (budget.py)."""
    require_engine()
    return debian_base()


@pytest.fixture(scope="module", autouse=True)
def images_made_removed() -> Iterator[None]:
    """After each test file, the images its tests built removed (realengine.forget_made),
    but the session image (SESSION_IMAGES). Each is 1-3 GB of the disk BuildKit's cache
    shares (a run on 2026-11-29 held 22 at once), and near a full disk BuildKit's GC passes
    over the cache records an image holds, so it would evict what no image holds first: the
    session image's builder stage, which later tests would then build cold."""
    yield
    forget_made(keep=tuple(SESSION_IMAGES))


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(tmp_path_factory.mktemp("proj") / "p")
    # --load: the later tests run and inspect the image here (a push without it leaves
    # nothing local where BuildKit pushes: tests/real/test_buildx_paths.py)
    result = imagekit(*build_args(marked_ca_bundle(root), "--push", "--load"), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # later tests rebuild in this folder without --push: keep the pushing build's report
    shutil.copyfile(root / "reports" / CELL / "build.json", root / "pushed-build.json")
    # kept by the cleanup after each file even where a rebuild has moved TAG since: tests read
    # the pushed image by its id (pushed_report)
    SESSION_IMAGES.append(pushed_report(root)["image_id"])
    GATE.session_built()
    return root


def report(root: Path) -> dict:  # type: ignore[type-arg]
    """The build report of the test cell of the project in `root`, whichever repository
    make_project gave it (it is part of the cell id)."""
    repository = yaml.safe_load((root / "envs" / "cpu.yaml").read_text())["repository"]
    return json.loads((root / "reports" / cell_of(repository) / "build.json").read_text())


def pushed_report(root: Path) -> dict:  # type: ignore[type-arg]
    """The session build's report: what it pushed, with provenance and the SBOM."""
    return json.loads((root / "pushed-build.json").read_text())


def run_in_image(*args: str) -> str:
    return docker("run", "--rm", *args).stdout.strip()
