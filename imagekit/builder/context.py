"""The build context imagekit hands to BuildKit, one folder per cell:

imagekit/build-env.sh      turns the ca/index secrets into installer settings (bind-mounted)
imagekit/entrypoint.sh     sets OMP_NUM_THREADS from the cgroup quota at container start
imagekit/pyc_cache.py      compiles the pip packages' bytecode, reusing a cache mount (bind-mounted)
imagekit/venv_delta.py     lists what the pip packages step changed in the venv (bind-mounted)
imagekit/lib/imagekit/     the contract, self-check and runtime packages (stdlib-only), copied in
imagekit/lib/imagekit-threads.pth  sets OMP_NUM_THREADS when the venv's Python starts
imagekit/labels.json       the io.imagekit.* labels of the cell, read by the self-check
imagekit/groups.py         resolves the venv's package groups in the builder (bind-mounted)
imagekit/sbom_writer.py    writes the image's SBOM in the runtime stage (bind-mounted)
imagekit/team_install.py   installs the team's packages under the cell's stack (bind-mounted)
imagekit/locked/           the cell's package lock as group files (arm64's in linux-arm64/), or
                           empty (bind-mounted)
wheelhouse/                hard links to --wheelhouse wheels (bind-mounted, never a layer)
source/                    the cell's `source` folder, copied last into /workspace

groups.py, pyc_cache.py, venv_delta.py, sbom_writer.py and team_install.py are
imagekit/buildtime/'s scripts, copied flat; each is mounted alone, so one that imports
buildtime/lockfile.py carries that module's lines in its place (script_text).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import threading
from pathlib import Path

from imagekit.contract import labels as label
from imagekit.locks import packages
from imagekit.matrix.cells import Cell
from imagekit.matrix.source import copy_source
from imagekit.render.dockerfile import LAYER_EPOCH
from imagekit.resources import PACKAGE_DIR, templates_dir

BUILDTIME_SCRIPTS = (
    "groups.py",
    "pyc_cache.py",
    "venv_delta.py",
    "sbom_writer.py",
    "team_install.py",
)
IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".venv", ".imagekit")


def stage(
    cell: Cell, dest: Path, wheelhouse: Path | None = None, locks: Path | None = None
) -> Path:
    """(Re)create the context for one cell under `dest` and return it. `locks`: the folder
    of package locks (`imagekit lock --packages`); the cell's, if there, is staged."""
    if dest.exists():
        shutil.rmtree(dest)
    helpers = dest / "imagekit"
    (helpers / "lib").mkdir(parents=True)
    for name in ("build-env.sh", "entrypoint.sh"):
        shutil.copy2(templates_dir() / "context" / name, helpers / name)
    os.chmod(helpers / "entrypoint.sh", 0o755)
    for name in BUILDTIME_SCRIPTS:
        (helpers / name).write_bytes(script_text(name).encode("utf-8"))
        shutil.copystat(PACKAGE_DIR / "buildtime" / name, helpers / name)
    lib = helpers / "lib" / "imagekit"
    for package in ("contract", "selfcheck", "runtime"):
        shutil.copytree(PACKAGE_DIR / package, lib / package, ignore=IGNORE)
    # Run at every start of the venv's Python, entrypoint or not (see runtime/threads.py).
    pth = "import imagekit.runtime.threads as _threads; _threads.at_start()\n"
    (helpers / "lib" / "imagekit-threads.pth").write_text(pth)
    shutil.copy2(PACKAGE_DIR / "__init__.py", lib / "__init__.py")
    # Empty hosts and resolv.conf for the image's /etc (templates/stages/os-base.j2 says why);
    # one fixed date, so that layer is the same in every build.
    (helpers / "etc").mkdir()
    for name in ("hosts", "resolv.conf"):
        (helpers / "etc" / name).touch()
        os.utime(helpers / "etc" / name, (LAYER_EPOCH, LAYER_EPOCH))
    labels = {k: v for k, v in cell.labels if k.startswith(label.PREFIX)}
    (helpers / "labels.json").write_text(json.dumps(labels, indent=2, sort_keys=True) + "\n")
    _stage_lock(cell, locks, helpers / "locked")
    _link_wheels(wheelhouse, dest / "wheelhouse")
    if cell.source:  # links as links, .dockerignore and the default ignore list applied
        copy_source(cell.source, dest / "source", cell.source_default_ignore)
    else:
        (dest / "source").mkdir()
    return dest


# Cells are staged side by side (--jobs), and CPython 3.11's ast.parse is not safe in two
# threads at once: it can fail with "SystemError: AST constructor recursion depth mismatch".
# One parse at a time.
_PARSING = threading.Lock()


def script_text(name: str) -> str:
    """A buildtime script as the build runs it, alone: its import of buildtime/lockfile.py
    (the package lock's layout, which the host imports too) replaced by that module's lines
    after its `from __future__` import; any other script as it is."""
    with _PARSING:
        return _inlined(name)


def _inlined(name: str) -> str:
    text = _buildtime_source(name)
    imports = [
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.ImportFrom) and node.module == LOCKFILE_MODULE
    ]
    if not imports:
        return text
    (node,) = imports
    assert node.end_lineno is not None
    lines = text.splitlines(keepends=True)
    return "".join([*lines[: node.lineno - 1], _lockfile_lines(), *lines[node.end_lineno :]])


LOCKFILE_MODULE = "imagekit.buildtime.lockfile"


def _lockfile_lines() -> str:
    """lockfile.py's definitions: its text after `from __future__ import annotations`."""
    text = _buildtime_source("lockfile.py")
    future = next(
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.ImportFrom) and node.module == "__future__"
    )
    assert future.end_lineno is not None
    return "".join(text.splitlines(keepends=True)[future.end_lineno :]).lstrip("\n") + "\n"


def _buildtime_source(name: str) -> str:
    return (PACKAGE_DIR / "buildtime" / name).read_bytes().decode("utf-8")


def _stage_lock(cell: Cell, locks: Path | None, dest: Path) -> None:
    """Always the folder (the Dockerfile mounts it); the group files only for a locked cell:
    amd64's at the top, arm64's in linux-arm64/ (groups.py, running as the build's target
    machine, picks its own). One fixed date, so the context's bytes alone decide the
    builder's cache."""
    dest.mkdir()
    staged = packages.staged_files(packages.read_all(locks, cell)) if locks else {}
    for name, text in staged.items():
        path = dest / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        os.utime(path, (LAYER_EPOCH, LAYER_EPOCH))
    for folder in {(dest / name).parent for name in staged} - {dest}:
        os.utime(folder, (LAYER_EPOCH, LAYER_EPOCH))  # after its files: writing them dated it


def _link_wheels(wheelhouse: Path | None, dest: Path) -> None:
    dest.mkdir()
    if wheelhouse is None:
        return
    for wheel in sorted(wheelhouse.glob("*.whl")):
        try:
            os.link(wheel, dest / wheel.name)  # free on the same filesystem
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)
