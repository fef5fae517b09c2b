"""Rendering: Cell -> Dockerfile text (deterministic), and committed-file upkeep.

Templates hold layout only; every decision is made in `cells.complete` and handed in as
plain data, so the same cell always renders the same bytes.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from imagekit import paths
from imagekit.errors import StaleError, UsageError
from imagekit.matrix.cells import USER, Cell
from imagekit.resources import templates_dir

# The one date every file of the venv's package layers gets: 1980-01-01, the earliest a
# wheel (a zip) can hold. Fixed, not the commit's time, so a layer's digest depends on its
# wheels alone and survives every rebuild.
LAYER_EPOCH = 315532800
DEVEL_REQUIREMENTS = ("ninja", "packaging", "psutil", "setuptools", "wheel")
# The SBOM's writer library, installed in the sbom-tool stage and mounted for one step of the
# runtime stage (never in a layer); the tests validate with the same version (pyproject).
SBOM_LIBRARY = "cyclonedx-python-lib==11.12.0"
SBOM_PATH = "/opt/imagekit/sbom.cdx.json"  # supply/sbom.py's PATH; docs/sbom.md


@dataclass(frozen=True)
class Installer:
    command: str
    cache: str
    sharing: str
    no_cache: str  # the flag that keeps the installer from caching (no cache mount)
    compile: str  # the flag that makes it write .pyc files ("" where that is the default)
    no_compile: str  # the flag that keeps it from writing them ("" likewise)


# Cache sharing per installer, so that concurrent builds (--jobs) neither wait for each
# other nor corrupt a cache. uv locks its cache itself: one shared cache. pip does not (its
# wheel cache moves files across filesystems from /tmp, pypa/pip#13540): each concurrent
# build gets its own instance of the cache ("private"); builds one after another share it.
INSTALLERS = {
    "pip": Installer(
        "/opt/venv/bin/pip install --find-links /wheelhouse",
        "/root/.cache/pip",
        "private",
        "--no-cache-dir",
        "",
        "--no-compile",
    ),
    "uv": Installer(
        "/opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse",
        "/root/.cache/uv",
        "shared",
        "--no-cache",
        "--compile-bytecode",
        "",
    ),
}


def dockerfile_quote(value: str) -> str:
    """Double-quote a value for ENV/LABEL so it cannot end its instruction early."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"a Dockerfile value must be one line: {value!r}")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


@lru_cache(maxsize=2)
def _environment(directory: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfiles, not HTML; values are quoted by the filters below.
    )
    env.filters["shquote"] = shlex.quote
    # Text in a comment (the matrix file's name): escapes keep it one line, so a newline in a
    # file name cannot start an instruction.
    env.filters["oneline"] = lambda text: str(text).encode("unicode_escape").decode("ascii")
    env.filters["dq"] = dockerfile_quote
    env.filters["kv"] = lambda pair: f"{pair[0]}={dockerfile_quote(pair[1])}"
    # NAME="value" for a shell: double quotes, so that $(...) in imagekit's own values runs.
    env.filters["prefix"] = lambda text, prefix: f"{prefix}{text}"
    env.filters["shell_kv"] = lambda pair: f'{pair[0]}="{pair[1]}"'
    return env


def _packages(cell: Cell) -> tuple[list[str], list[str]]:
    base = ["ca-certificates"] + (["python3"] if cell.system_python else [])
    if cell.compile:  # torch.compile at run time: a C++ compiler; the OS Python's headers
        base += ["g++"] + ([f"libpython{cell.python}-dev"] if cell.system_python else [])
    builder = ["ca-certificates", "python3", "python3-venv"]
    if cell.needs_devel:
        builder += ["build-essential", "git", "python3-dev"]
    return sorted(base), sorted(set(builder) | set(cell.build_apt))


def _builder_from(cell: Cell) -> str:
    """A builder that only resolves (the split venv) needs no OS package of os-base: it starts
    from the OS image itself and runs beside os-base's apt step, not after it (a cold build's
    first minute). One that installs or compiles the venv builds on os-base, or on the
    devel image the cell names."""
    if cell.builder_image:
        return cell.builder_image
    return cell.runtime_image if cell.venv_layers == "split" else "os-base"


def render(
    cell: Cell, syntax: str | None = None, templates: Path | None = None, cache_mounts: bool = True
) -> str:
    """The Dockerfile for one cell. `syntax` opts into a `# syntax=` frontend line;
    `cache_mounts=False` drops the installer's cache mount (the benchmarks' baseline)."""
    base_packages, builder_packages = _packages(cell)
    template = _environment(str(templates or templates_dir())).get_template("Dockerfile.j2")
    return template.render(
        cell=cell,
        syntax=syntax,
        base_packages=base_packages,
        builder_packages=builder_packages,
        builder_from=_builder_from(cell),
        devel_requirements=DEVEL_REQUIREMENTS,
        installer=INSTALLERS[cell.installer],
        user={"name": USER[0], "uid": USER[1]},
        cache_mounts=cache_mounts,
        layer_epoch=LAYER_EPOCH,
        sbom_library=SBOM_LIBRARY,
        sbom_path=SBOM_PATH,
    )


def render_all(cells: Iterable[Cell], syntax: str | None = None) -> dict[str, str]:
    """Render everything first, so a template error leaves no file written."""
    return {cell.id: render(cell, syntax) for cell in cells}


HEADER = "# Rendered by imagekit for cell "


def write_all(rendered: dict[str, str], out_dir: Path, prune: bool = False) -> list[str]:
    """Write every changed Dockerfile or none: each goes to a temp file beside its target
    first, and only when all are written are they renamed into place. With `prune`, the
    Dockerfiles imagekit rendered for cells that left the matrix are removed."""
    pending: list[tuple[Path, Path]] = []
    try:
        for cell_id, text in sorted(rendered.items()):
            path = paths.committed_dockerfile(out_dir, cell_id)
            if paths.read_checked(path, "Dockerfile") != text.encode("utf-8"):
                path.parent.mkdir(parents=True, exist_ok=True)
                pending.append((paths.temp_beside(path, text), path))
    except (OSError, UsageError) as exc:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, UsageError):
            raise
        raise UsageError(
            f"cannot write under {out_dir}: {exc.strerror} ({exc.filename}); nothing was written"
        ) from None
    for tmp, path in pending:
        os.replace(tmp, path)
    changed = [path.parent.name for _, path in pending]
    return changed + (_prune(rendered, out_dir) if prune else [])


def orphans(rendered: dict[str, str], out_dir: Path) -> list[Path]:
    """Dockerfiles imagekit rendered (by their header) for cells no longer in the matrix."""
    if not out_dir.is_dir():
        return []
    found = []
    for path in sorted(out_dir.glob("*/Dockerfile")):
        if path.parent.name in rendered:
            continue
        if HEADER.encode() in (paths.read_checked(path, "Dockerfile") or b"")[:4096]:
            found.append(path)
    return found


def _prune(rendered: dict[str, str], out_dir: Path) -> list[str]:
    removed = []
    for path in orphans(rendered, out_dir):
        path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when nothing else is in it
        removed.append(f"{path.parent.name} (removed: no longer in the matrix)")
    return removed


def check(rendered: dict[str, str], out_dir: Path, prune: bool = True) -> None:
    """Raise StaleError with a unified diff when committed files differ from a fresh render,
    byte for byte (a CRLF or a stray carriage return that hides an instruction from BuildKit
    is stale too). With `prune`, a Dockerfile for a cell that left the matrix is stale."""
    diffs: list[str] = []
    for cell_id, text in sorted(rendered.items()):
        path = paths.committed_dockerfile(out_dir, cell_id)
        current = paths.read_checked(path, "Dockerfile") or b""
        if current == text.encode("utf-8"):
            continue
        # split at newlines only: a carriage return stays in its line and shows as \\r
        lines = list(
            difflib.unified_diff(
                current.decode("utf-8", "replace").split("\n"),
                text.split("\n"),
                fromfile=f"{path} (committed)",
                tofile=f"{path} (rendered)",
                lineterm="",
            )
        )
        diffs.extend(lines or [f"{path}: differs in bytes (line endings or a carriage return)"])
    if prune:
        for path in orphans(rendered, out_dir):
            diffs.append(f"{path}: no cell in the matrix renders this any more")
    if diffs:
        raise StaleError(
            "committed Dockerfiles are stale; run `imagekit render` and commit the result:",
            *diffs,
        )
