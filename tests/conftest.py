"""Shared fixtures. Unit tests may not spawn processes: a real engine test says so with
the `docker` marker (cibuildwheel's rule: a stray subprocess in a unit test is a bug)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from imagekit.contract.host_snapshot import HostSnapshot

ROOT = Path(__file__).resolve().parent.parent
R = TypeVar("R")


def typed(data: Any, record: type[R] = HostSnapshot) -> R:  # type: ignore[assignment]
    """A snapshot (or one of its records, e.g. a Gpu) built as plain JSON, as the verdicts
    take it: the typed record, read once (a key of the wrong type raises RecordError)."""
    return record.from_json(data)  # type: ignore[attr-defined, no-any-return]


CACHE_ROOT = Path(tempfile.gettempdir()) / f"imagekit-test-cache-{os.getpid()}"


def pytest_configure(config: pytest.Config) -> None:
    """No test reads or writes this machine's own imagekit cache (engine/scan_cache.py): the
    tests' fake layers have made-up digests, which must not meet a real scan, nor each
    other's (each test gets its own folder, made only where it stores a scan)."""
    os.environ["IMAGEKIT_CACHE_DIR"] = str(CACHE_ROOT / "session")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(CACHE_ROOT, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    own = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("IMAGEKIT_CACHE_DIR", str(CACHE_ROOT / own))


@pytest.fixture(autouse=True)
def _no_subprocess_in_unit_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("docker") or request.node.get_closest_marker("subprocess"):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unit test tried to spawn a process: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.fixture
def write_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write a matrix file into tmp_path/envs (the working directory) and return the folder."""
    monkeypatch.chdir(tmp_path)

    def write(text: str, name: str = "m.yaml") -> Path:
        folder = tmp_path / "envs"
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return folder

    return write
