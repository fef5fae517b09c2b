"""The matrix's cells, their base images pinned to the digests images.lock holds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from imagekit.locks import images
from imagekit.matrix import compat as compat_mod
from imagekit.matrix.catalog import matrix_paths
from imagekit.matrix.cells import Cell
from imagekit.matrix.completion import complete_all
from imagekit.matrix.load import load_spec


def load_cells(envs: Sequence[Path] = (), lock: Path | None = None) -> list[Cell]:
    """Every cell of the matrix files `envs` (default ./envs), completed; `lock`: the
    images.lock to pin bases from (default: beside the first matrix file)."""
    paths = matrix_paths(envs)
    spec = load_spec(paths)
    pins = images.read(lock or images.default_path(paths)).pins
    return complete_all(spec.cells, compat_mod.load(), pins, spec.problems)
