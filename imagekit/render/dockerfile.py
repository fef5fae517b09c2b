"""Rendering: Cell -> Dockerfile text (deterministic), and the `render` command, which keeps
the committed files (owned.py: what each file's ownership line lets it touch).

Templates hold layout only; every decision is made in `completion.complete` and handed in as
plain data, so the same cell always renders the same bytes.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import jinja2

from imagekit import paths, resources
from imagekit.buildtime.lockfile import CUDA_PARTS
from imagekit.errors import StaleError
from imagekit.matrix.cells import USER, Cell
from imagekit.matrix.source import repo_root
from imagekit.render import owned
from imagekit.resources import templates_dir

if TYPE_CHECKING:
    from imagekit.matrix.catalog import Filters


class Selection(Protocol):
    """What `command` reads of the command line's selection (cli.common.Selection; the
    model layers import nothing of the CLI)."""

    @property
    def envs(self) -> tuple[Path, ...]: ...
    @property
    def lock(self) -> Path | None: ...
    @property
    def filters(self) -> Filters: ...
    def package_locks(self) -> Path: ...


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
    """os-base's OS packages, then the builder's on top of them. os-base installs what the
    builder needs to start (an OS Python with venv, to bootstrap the installer) as well, so
    a builder on os-base runs no apt step of its own: one apt pass per cell, or none on a
    base that already holds them (`imagekit base bootstrap --bake-packages`)."""
    base = ["ca-certificates", "python3", "python3-venv"]
    if cell.compile:  # torch.compile at run time: a C++ compiler; the OS Python's headers
        base += ["g++"] + ([f"libpython{cell.python}-dev"] if cell.system_python else [])
    builder = list(base)
    if cell.needs_devel:
        builder += ["build-essential", "git", "python3-dev"]
    return sorted(base), sorted(set(builder) | set(cell.build_apt))


def builder_apt(cell: Cell) -> list[str]:
    """The packages the builder's own apt step installs: on os-base, only those os-base
    lacks (none for most cells); on an image of its own (a devel image), all of them."""
    base, builder = _packages(cell)
    if _builder_from(cell) == "os-base":
        return [name for name in builder if name not in base]
    return builder


def base_packages(cell: Cell) -> list[str]:
    """The OS packages os-base installs: what `imagekit base bootstrap --bake-packages`
    puts into the base, so that step has nothing to install."""
    return _packages(cell)[0]


def _builder_from(cell: Cell) -> str:
    """The builder starts from os-base (its apt step already ran there: one pass, not two
    beside each other on the same two cores), or from the devel image the cell names."""
    return cell.builder_image or "os-base"


def render(
    cell: Cell, syntax: str | None = None, templates: Path | None = None, cache_mounts: bool = True
) -> str:
    """The Dockerfile for one cell. `syntax` opts into a `# syntax=` frontend line;
    `cache_mounts=False` drops the installer's cache mount (the benchmarks' baseline)."""
    template = _environment(str(templates or templates_dir())).get_template("Dockerfile.j2")
    return template.render(
        cell=cell,
        syntax=syntax,
        base_packages=base_packages(cell),
        builder_packages=builder_apt(cell),
        builder_from=_builder_from(cell),
        devel_requirements=DEVEL_REQUIREMENTS,
        installer=INSTALLERS[cell.installer],
        user={"name": USER[0], "uid": USER[1]},
        cache_mounts=cache_mounts,
        layer_epoch=LAYER_EPOCH,
        cuda_parts=len(CUDA_PARTS),
        sbom_library=SBOM_LIBRARY,
        sbom_path=SBOM_PATH,
    )


def render_all(
    cells: Iterable[Cell],
    syntax: str | None = None,
    root: Path | None = None,
    builtins: Mapping[Path, str] | None = None,
) -> dict[str, str]:
    """Every cell's file to commit, ownership line included (owned.py), keyed by cell id.
    Everything is rendered first, so a template error leaves no file written. `root`: the
    repository the matrix files are named from (`root_of`; default: the working
    directory's); `builtins`: the packaged matrix files named `builtin:NAME` (`builtin_names`)."""
    top = root or paths.repository_of(Path.cwd())
    stamped = {}
    for cell in cells:
        mine = matrix_of(cell, top, builtins)
        stamped[cell.id] = owned.stamp(render(named(cell, mine), syntax), mine, cell.id)
    return stamped


def named(cell: Cell, matrix: str) -> Cell:
    """The cell with its origin (`file:line`, the file's second line) naming the matrix file
    as its ownership line does: the same bytes from whichever folder render runs."""
    line = cell.origin.rsplit(":", 1)[-1]
    return replace(cell, origin=f"{matrix}:{line}")


def builtin_names(envs: Iterable[Path]) -> dict[Path, str]:
    """Each `--envs builtin:NAME` given, as its packaged file (resolved) -> `builtin:NAME`: the
    name its ownership lines carry, the same on every machine."""
    return {
        resources.builtin(path).resolve(): str(path) for path in envs if resources.is_builtin(path)
    }


def root_of(files: Iterable[Path], builtins: Mapping[Path, str], out: Path) -> Path:
    """The repository the matrix files are named from: that of the first matrix file read
    that is not a built-in one, as `source.repo_root` finds it (the nearest folder with .git;
    without git, the folder above envs/, else the matrix file's own folder). So the names do
    not depend on the working directory or on --out. With built-in matrices alone, the
    repository of --out (`paths.repository_of`)."""
    for path in files:
        full = path.resolve()
        if full not in builtins:
            return repo_root(full.parent)
    return paths.repository_of(out).resolve()


def matrix_of(cell: Cell, root: Path, builtins: Mapping[Path, str] | None = None) -> str:
    """The cell's matrix file as its ownership line names it: relative to the repository
    root, / separated; a file outside the repository by its absolute path; a built-in one
    as `builtin:NAME`."""
    return matrix_name(Path(cell.origin.rsplit(":", 1)[0]), root, builtins)


def matrix_name(path: Path, root: Path, builtins: Mapping[Path, str] | None = None) -> str:
    full = path.resolve()
    if builtins and full in builtins:
        return builtins[full]
    try:
        return full.relative_to(root.resolve()).as_posix()
    except ValueError:
        return full.as_posix()


def matrices(
    every: Iterable[Cell],
    files: Iterable[Path],
    root: Path,
    builtins: Mapping[Path, str] | None = None,
) -> dict[str, frozenset[str]]:
    """Each matrix file rendered -> every cell id it defines, the filtered-out ones too (a
    cell merely filtered out has not left its matrix); a file with no cell left maps to none."""
    found: dict[str, set[str]] = {matrix_name(f, root, builtins): set() for f in files}
    for cell in every:
        found.setdefault(matrix_of(cell, root, builtins), set()).add(cell.id)
    return {name: frozenset(ids) for name, ids in found.items()}


def command(selection: Selection, out: Path, syntax: str | None, check: bool) -> list[str]:
    """`imagekit render`: write the selected cells' files into `out` and prune the folders of
    cells that left the rendered matrix files (and of matrix files deleted from a folder it
    reads); with `check`, write nothing and raise StaleError (exit 4) on drift, package
    locks included. Returns the lines to print."""
    from imagekit.locks.pinned import load_cells
    from imagekit.matrix.catalog import matrix_paths, select
    from imagekit.matrix.load import env_files

    every = load_cells(selection.envs, selection.lock)
    cells = select(every, selection.filters)
    files = env_files(matrix_paths(selection.envs))
    builtins = builtin_names(selection.envs)
    root = root_of(files, builtins, out)
    rendered = render_all(cells, syntax, root, builtins)
    owners = matrices(every, files, root, builtins)
    if check:
        _check(cells, rendered, out, owners, selection, root)
        return [f"{len(rendered)} Dockerfiles are current."]
    result = owned.plan(rendered, out, owners, root)
    owned.refuse(result)
    owned.apply(result, out)
    changed = len(result.writes) + len(result.removals)
    return [
        f"rendered {len(rendered)} cells into {out}/ ({changed} changed)",
        *owned.report(result),
    ]


def _check(
    cells: list[Cell],
    rendered: dict[str, str],
    out: Path,
    owners: dict[str, frozenset[str]],
    selection: Selection,
    root: Path,
) -> None:
    from imagekit.locks import packages

    locks = packages.stale(cells, selection.package_locks(), selection.filters.empty)
    try:
        owned.check(rendered, out, owners, root)
    except StaleError as exc:
        if locks:
            raise StaleError(*exc.lines, *packages.stale_message(locks)) from None
        raise
    if locks:
        raise StaleError(*packages.stale_message(locks))
