"""venv_delta: what an install step changed, applied the way the runtime stage applies it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.buildtime import venv_delta

SCRIPT = Path(venv_delta.__file__)


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root: file contents, link targets, directories and modes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            mode = oct(path.lstat().st_mode)
            if path.is_symlink():
                out[rel] = f"link {os.readlink(path)}"
            elif path.is_dir():
                out[rel] = f"dir {mode}"
            else:
                out[rel] = f"file {mode} {path.read_text()}"
    return out


def _base(venv: Path) -> None:
    site = venv / "lib" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("torch")
    (site / "numpy").mkdir()
    (site / "numpy" / "__init__.py").write_text("numpy 2")
    (site / "numpy" / "old.py").write_text("only in numpy 2")
    (site / "numpy-2.1.dist-info").mkdir()
    (site / "numpy-2.1.dist-info" / "RECORD").write_text("numpy 2 record")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin")


def _install(venv: Path) -> None:
    """What a pip install of `numpy<2` and a new package `rich` does to the venv."""
    site = venv / "lib" / "site-packages"
    shutil.rmtree(site / "numpy-2.1.dist-info")
    (site / "numpy" / "old.py").unlink()
    (site / "numpy" / "__init__.py").write_text("numpy 1")
    (site / "numpy-1.26.dist-info").mkdir()
    (site / "numpy-1.26.dist-info" / "RECORD").write_text("numpy 1 record")
    (site / "rich").mkdir(mode=0o750)
    (site / "rich" / "__init__.py").write_text("rich")
    (venv / "bin" / "rich").symlink_to("../lib/site-packages/rich/__init__.py")
    (venv / "pyvenv.cfg").chmod(0o600)


def _apply(runtime: Path, out: Path, new: Path) -> None:
    """The runtime stage: delete what was removed, then copy the delta on top."""
    for raw in (out / "removed").read_bytes().split(b"\0"):
        if raw:
            path = runtime / Path(os.fsdecode(raw)).relative_to(new)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    shutil.copytree(
        out / "root" / new.relative_to(new.anchor), runtime, symlinks=True, dirs_exist_ok=True
    )


def test_base_plus_delta_is_the_new_venv(tmp_path: Path) -> None:
    base, new, runtime, out = (tmp_path / n for n in ("base", "venv", "runtime", "out"))
    _base(base)
    shutil.copytree(base, new, symlinks=True)  # keeps mtimes, as a lower layer does
    shutil.copytree(base, runtime, symlinks=True)
    _install(new)

    copied, removed = venv_delta.write_delta(base, new, out)

    delta = _tree(out / "root" / new.relative_to(new.anchor))
    assert "lib/site-packages/torch/__init__.py" not in delta  # unchanged: stays in the base
    assert "lib/site-packages/rich/__init__.py" in delta
    assert delta["lib/site-packages/numpy/__init__.py"].endswith("numpy 1")
    assert delta["bin/rich"] == "link ../lib/site-packages/rich/__init__.py"
    listed = {Path(os.fsdecode(p)) for p in (out / "removed").read_bytes().split(b"\0") if p}
    site = new / "lib" / "site-packages"
    assert listed == {site / "numpy-2.1.dist-info", site / "numpy" / "old.py"}
    assert removed == 2 and copied >= 7

    _apply(runtime, out, new)
    assert _tree(runtime) == _tree(new)


def test_unchanged_venv_gives_an_empty_delta(tmp_path: Path) -> None:
    base, new, out = tmp_path / "base", tmp_path / "venv", tmp_path / "out"
    _base(base)
    shutil.copytree(base, new, symlinks=True)
    assert venv_delta.write_delta(base, new, out) == (0, 0)
    assert (out / "removed").read_bytes() == b""
    assert list((out / "root" / new.relative_to(new.anchor)).iterdir()) == []


def test_a_file_replaced_by_a_directory_is_removed_then_copied(tmp_path: Path) -> None:
    base, new, out = tmp_path / "base", tmp_path / "venv", tmp_path / "out"
    _base(base)
    shutil.copytree(base, new, symlinks=True)
    (new / "pyvenv.cfg").unlink()
    (new / "pyvenv.cfg").mkdir()
    (new / "pyvenv.cfg" / "x").write_text("x")
    venv_delta.write_delta(base, new, out)
    assert (out / "removed").read_bytes() == os.fsencode(new / "pyvenv.cfg") + b"\0"
    assert (out / "root" / new.relative_to(new.anchor) / "pyvenv.cfg" / "x").read_text() == "x"


@pytest.mark.subprocess
def test_command_line(tmp_path: Path) -> None:
    base, new, out = tmp_path / "base", tmp_path / "venv", tmp_path / "out"
    _base(base)
    shutil.copytree(base, new, symlinks=True)
    _install(new)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(base), str(new), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "removed" in done.stdout and (out / "removed").is_file()
    usage = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def _since_after_copy(monkeypatch: pytest.MonkeyPatch) -> int:
    """A step start after the copy: what the install step does next is newer than this."""
    monkeypatch.setattr(venv_delta, "CLOCK_MARGIN_NS", 0)
    time.sleep(0.05)  # file times use a coarse clock
    since = time.time_ns()
    time.sleep(0.05)
    return since


def test_since_gives_the_same_delta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, new, runtime, out = (tmp_path / n for n in ("base", "venv", "runtime", "out"))
    _base(base)
    shutil.copytree(base, new, symlinks=True)
    shutil.copytree(base, runtime, symlinks=True)
    since = _since_after_copy(monkeypatch)
    _install(new)
    assert venv_delta.write_delta(base, new, out, since)[1] == 2
    _apply(runtime, out, new)
    assert _tree(runtime) == _tree(new)


def test_since_skips_what_changed_before_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortcut is real: an entry last changed before the step started is taken as the
    base's (in a build it is: it comes from a lower layer), so BASE is never read for it."""
    base, new = tmp_path / "base", tmp_path / "venv"
    _base(base)
    shutil.copytree(base, new, symlinks=True)
    (new / "pyvenv.cfg").write_text("changed before the step")
    since = _since_after_copy(monkeypatch)
    assert venv_delta.write_delta(base, new, tmp_path / "with", since) == (0, 0)
    assert venv_delta.write_delta(base, new, tmp_path / "without") == (1, 0)
