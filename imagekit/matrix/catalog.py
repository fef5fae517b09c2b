"""Which matrix files to read, and the user's filters over the cells they define."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell, stack_of
from imagekit.resources import BUILTIN, builtin


@dataclass(frozen=True)
class Filters:
    """Each field: accepted values (empty = any). Versions match by prefix ("2.7" ~ 2.7.1)."""

    cuda: tuple[str, ...] = ()
    torch: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    os: tuple[str, ...] = ()
    flavor: tuple[str, ...] = ()
    cell: tuple[str, ...] = ()  # globs over cell ids

    @property
    def empty(self) -> bool:
        return not any((self.cuda, self.torch, self.python, self.os, self.flavor, self.cell))

    def accepts(self, cell: Cell) -> bool:
        return (
            _version_in(cell.cuda, self.cuda)
            and _version_in(cell.torch, self.torch)
            and _version_in(cell.python, self.python)
            and (not self.os or cell.os in self.os)
            and (not self.flavor or cell.flavor in self.flavor)
            and (not self.cell or _cell_matches(cell, self.cell))
        )


def _cell_matches(cell: Cell, globs: tuple[str, ...]) -> bool:
    """A --cell glob matches the whole id or its stack part alone, so 'cu126-*' keeps
    meaning every CUDA 12.6 cell of every image."""
    names = (cell.id, stack_of(cell))
    return any(fnmatch.fnmatchcase(name, g) for g in globs for name in names)


def _unknown_values(cells: Sequence[Cell], filters: Filters) -> str:
    """Name the filter values that match nothing, with the values the matrix has."""
    notes = []
    for axis in ("cuda", "torch", "python", "os", "flavor"):
        have = sorted({getattr(c, axis) for c in cells})
        for wanted in getattr(filters, axis):
            if not any(_version_in(v, (wanted,)) for v in have):
                listed = ", ".join(have)
                notes.append(f"--{axis} {wanted} matches no cell (the matrix has {listed})")
    if notes:
        return ": " + "; ".join(notes)
    return " all these filters together; `imagekit list` shows the cells there are"


def _version_in(value: str, wanted: tuple[str, ...]) -> bool:
    return not wanted or any(value == w or value.startswith(w + ".") for w in wanted)


def default_envs() -> list[Path]:
    """./envs; no folder there is exit 2 naming `imagekit init` (never a silent fallback to
    the built-in catalog: a command in the wrong folder would build its 53 cells)."""
    local = Path("envs")
    if local.is_dir():
        return [local]
    raise UsageError(
        f"no matrix here: {Path.cwd()} has no envs/ folder; run `imagekit init` to start "
        f"one, or pass --envs FILE|DIR (the built-in example catalog: --envs {BUILTIN}training)"
    )


def matrix_paths(envs: Sequence[Path] = ()) -> list[Path]:
    """The matrix files or folders to read: --envs as given (`builtin:NAME` as the packaged
    file), else ./envs."""
    return [builtin(path) for path in envs] or default_envs()


def select(cells: Sequence[Cell], filters: Filters) -> list[Cell]:
    if not cells:
        raise UsageError(
            "the matrix files define no cell: add entries under `matrix:` or `include:` "
            "(see envs/training.yaml)"
        )
    chosen = [c for c in cells if filters.accepts(c)]
    if not chosen:
        raise UsageError(f"no cell matches{_unknown_values(cells, filters)}")
    return chosen
