"""pyc_cache: the .pyc files it writes are the ones py_compile writes, from the cache or not."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.buildtime import pyc_cache

SCRIPT = Path(pyc_cache.__file__)


def _package(venv: Path, version: str) -> list[Path]:
    """`Install` a package: fresh files, each with a new mtime, as an installer writes them."""
    pkg = venv / "lib" / "site-packages" / "pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    files = {
        "__init__.py": f"VERSION = {version!r}\n",
        "util.py": "def f():\n    return 'é'\n",
        "py2_only.py": "print 'old'\n",  # pip skips what does not compile; so do we
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    return [pkg / name for name in files]


def _reference(source: Path, tmp: Path) -> bytes:
    out = tmp / "ref.pyc"
    py_compile.compile(
        str(source),
        str(out),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
    )
    return out.read_bytes()


def test_writes_what_py_compile_writes_and_reuses_it(tmp_path: Path) -> None:
    venv, cache = tmp_path / "venv", tmp_path / "cache"
    init, util, py2 = _package(venv, "1.0")
    assert pyc_cache.missing(venv) == sorted([init, py2, util])

    first = pyc_cache.compile_all(pyc_cache.missing(venv), cache, jobs=2)
    assert first == {"hit": 0, "compiled": 2, "skipped": 1}
    for source in (init, util):
        assert pyc_cache.pyc_path(source).read_bytes() == _reference(source, tmp_path)
    assert not pyc_cache.pyc_path(py2).exists()
    assert pyc_cache.missing(venv) == [py2]  # the rest is current now

    # A rebuild reinstalls the same files (new mtimes) and one changed one.
    _package(venv, "2.0")
    for source in (init, util):  # another second than the first install's
        os.utime(source, (1_700_000_000, 1_700_000_000))
    second = pyc_cache.compile_all(pyc_cache.missing(venv), cache, jobs=2)
    assert second == {"hit": 1, "compiled": 1, "skipped": 1}  # util from the cache
    for source in (init, util):
        assert pyc_cache.pyc_path(source).read_bytes() == _reference(source, tmp_path)


def test_the_cache_key_covers_the_path_and_the_source(tmp_path: Path) -> None:
    """Code objects record their file's path, so the same source elsewhere is another entry."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    assert pyc_cache.cache_key(a, b"x = 1") != pyc_cache.cache_key(b, b"x = 1")
    assert pyc_cache.cache_key(a, b"x = 1") != pyc_cache.cache_key(a, b"x = 2")


def test_without_a_cache_it_compiles(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _, util, _ = _package(venv, "1.0")
    counts = pyc_cache.compile_all(pyc_cache.missing(venv), None, jobs=1)
    assert counts == {"hit": 0, "compiled": 2, "skipped": 1}
    assert pyc_cache.pyc_path(util).read_bytes() == _reference(util, tmp_path)


@pytest.mark.subprocess
def test_python_imports_from_the_written_pyc(tmp_path: Path) -> None:
    """A read-only check the interpreter itself makes: `python -v` says the .pyc matches."""
    venv = tmp_path / "venv"
    _package(venv, "1.0")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(venv), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "2 compiled" in done.stdout
    site = venv / "lib" / "site-packages"
    run = subprocess.run(
        [sys.executable, "-v", "-B", "-c", "import pkg.util"],
        cwd=site,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"{pyc_cache.pyc_path(site / 'pkg' / 'util.py')} matches" in run.stderr


def test_hash_based_pycs_count_as_current(tmp_path: Path) -> None:
    """An installer run with SOURCE_DATE_EPOCH writes checked-hash .pyc files, which Python
    validates itself: they must not be compiled again."""
    venv = tmp_path / "venv"
    init, util, _ = _package(venv, "1.0")
    py_compile.compile(
        str(util),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
    )
    assert util not in pyc_cache.missing(venv) and init in pyc_cache.missing(venv)


def test_since_looks_only_at_files_the_step_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The venv the step started from was compiled already: with --since its files are not
    even opened, even one without a .pyc; what the step wrote (or rewrote) is."""
    monkeypatch.setattr(pyc_cache, "CLOCK_MARGIN_NS", 0)  # exact ctimes; no waiting a second
    venv = tmp_path / "venv"
    before = _package(venv, "1.0")[0]
    time.sleep(0.05)  # the kernel's file clock is coarse: keep clear of its tick
    started = time.time_ns()
    time.sleep(0.05)
    new = venv / "lib" / "site-packages" / "new.py"
    new.write_text("x = 1\n")
    assert pyc_cache.missing(venv, started) == [new]
    assert before in pyc_cache.missing(venv)  # without --since: every file
    os.utime(before)  # a file the step changed (an installer rewrote it): ctime moves
    assert pyc_cache.missing(venv, started) == sorted([before, new])
