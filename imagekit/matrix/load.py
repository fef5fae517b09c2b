"""The matrix spec: `envs/*.yaml` loaded, validated and expanded into raw cell specs.

Validation collects every problem in every file before failing. Each message names the
file, the line, the field and the value, and says what would be valid.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from imagekit.errors import Problem, UsageError
from imagekit.matrix.envfile import EnvFile, describe
from imagekit.matrix.expand import MAX_CELLS, RawCell, expand
from imagekit.matrix.yaml_located import Located, YamlSyntaxError
from imagekit.matrix.yamlsrc import load as load_yaml
from imagekit.matrix.yamlsrc import paused_gc


@dataclass(frozen=True)
class Spec:
    files: tuple[str, ...]
    cells: tuple[RawCell, ...]
    problems: tuple[Problem, ...] = ()  # reported together with completion's problems


def env_files(paths: Iterable[Path]) -> list[Path]:
    """The matrix files: each file named, and each folder's *.yaml and *.yml. A path that
    is not there, or a folder without one, is UsageError (exit 2) naming `imagekit init`."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            # not only regular files: a FIFO or a link named *.yaml is refused, not skipped
            inside = sorted(p for p in path.glob("*.yaml") if not p.is_dir())
            inside += sorted(p for p in path.glob("*.yml") if not p.is_dir())
            if not inside:
                raise UsageError(
                    f"no matrix in {path}: the folder has no matrix file (*.yaml or *.yml); "
                    f"{_init_hint(path)}"
                )
            found.extend(inside)
        elif not os.path.lexists(path):
            raise UsageError(f"no matrix at {path}: no such file or folder; {_init_hint(path)}")
        else:
            found.append(path)
    return found


def _init_hint(path: Path) -> str:
    """How to start a matrix where `path` was looked for."""
    where = f" {path.parent}" if path.name == "envs" and str(path.parent) != "." else ""
    return f"run `imagekit init{where}` to start one, or pass --envs FILE|DIR"


def load_spec(paths: Iterable[Path], root: Path | None = None) -> Spec:
    """Load and validate every file. Problems are collected in `Spec.problems` so that the
    caller can report them together with those found when completing the cells."""
    problems: list[Problem] = []
    cells: list[RawCell] = []
    files = env_files(paths)
    if not files:
        raise UsageError("no matrix: name matrix files or folders (--envs FILE|DIR)")
    for path in files:
        display = _display(path, root)
        file_cells, file_problems = _load_one(path, display, MAX_CELLS - len(cells))
        cells.extend(file_cells)
        problems.extend(file_problems)
    return Spec(
        files=tuple(_display(p, root) for p in files), cells=tuple(cells), problems=tuple(problems)
    )


def _display(path: Path, root: Path | None) -> str:
    try:
        return str(path.resolve().relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return str(path)


def _load_one(path: Path, display: str, budget: int) -> tuple[list[RawCell], list[Problem]]:
    # the collector would rescan a large file's objects many times over (yamlsrc.paused_gc)
    with paused_gc():
        return _load_one_file(path, display, budget)


def _load_one_file(path: Path, display: str, budget: int) -> tuple[list[RawCell], list[Problem]]:
    try:
        located = load_yaml(path, display)
    except YamlSyntaxError as exc:
        return [], [exc.problem]
    if not isinstance(located.data, dict):
        return [], [Problem("the file must be a mapping with a `matrix` list", display, 1)]
    try:
        doc = EnvFile.model_validate(located.data)
    except ValidationError as exc:
        problems = [describe(e, located) for e in exc.errors()]
        cells, more = _expand_valid_blocks(located, exc, path.resolve().parent, budget)
        return cells, problems + more
    return expand(doc, located, path.resolve().parent, budget=budget)


def _expand_valid_blocks(
    located: Located, exc: ValidationError, base_dir: Path, budget: int
) -> tuple[list[RawCell], list[Problem]]:
    """When every schema problem sits inside matrix/include blocks, the other blocks still
    expand, so their compatibility problems are shown in the same run, not the next."""
    bad: dict[str, set[int]] = {"matrix": set(), "include": set()}
    for error in exc.errors():
        loc = error["loc"]
        if len(loc) < 2 or loc[0] not in bad or not isinstance(loc[1], int):
            return [], []  # a problem outside the blocks: nothing can be trusted
        bad[str(loc[0])].add(loc[1])
    data = dict(located.data)
    kept: dict[str, list[int]] = {}
    for section, skip in bad.items():
        items = data.get(section) or []
        kept[section] = [i for i in range(len(items)) if i not in skip]
        data[section] = [items[i] for i in kept[section]]
    try:
        doc = EnvFile.model_validate(data)
    except ValidationError:
        return [], []
    return expand(doc, located, base_dir, kept, budget)
