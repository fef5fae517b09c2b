"""From files to selected cells: load the spec, complete it, apply the user's filters."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import UsageError
from imagekit.locks import images
from imagekit.matrix import compat as compat_mod
from imagekit.matrix.cells import Cell, complete_all
from imagekit.matrix.load import load_spec
from imagekit.resources import default_envs_dir


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
            and (not self.cell or any(fnmatch.fnmatchcase(cell.id, g) for g in self.cell))
        )


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
    local = Path("envs")
    return [local if local.is_dir() else default_envs_dir()]


def load_cells(envs: Sequence[Path] = (), lock: Path | None = None) -> list[Cell]:
    paths = list(envs) or default_envs()
    spec = load_spec(paths)
    pins = images.read(lock or images.default_path(paths)).pins
    return complete_all(spec.cells, compat_mod.load(), pins, spec.problems)


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
