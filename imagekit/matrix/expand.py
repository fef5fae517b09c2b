"""Matrix files -> raw cells: the blocks' products, less the excludes, overrides merged in.

The work is bounded before it is done, and the tag templates are checked.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit import terminal
from imagekit.errors import Problem
from imagekit.matrix.cascade import layer_of, merge_all
from imagekit.matrix.envfile import (
    AXES,
    TAG_FIELDS,
    Block,
    EnvFile,
    Options,
)
from imagekit.matrix.match_index import MatchIndex, bits, needs_regex
from imagekit.matrix.yaml_located import Located


@dataclass(frozen=True)
class Origin:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RawCell:
    """One matrix cell before completion: its axes, merged options and where it came from."""

    cuda: str
    torch: str
    python: str
    os: str
    flavor: str
    options: Options
    env_file: EnvFile
    origin: Origin
    base_dir: Path


# Work is bounded before it is done: a block's product is counted before it is expanded
# (20 values on each of four axes would be 160,000 cells), and so is the matrix's total.
MAX_BLOCK_CELLS = 1_000
MAX_CELLS = 5_000
# Globs other than a prefix ("2.7*") are tried once per value: a real file tries hundreds.
MAX_GLOB_TRIES = 200_000
# A glob with a [set] (or ? between stars) is a regex, compiled once per pattern (~25 us each):
# thousands of distinct ones are seconds, and past fnmatch's cache every value recompiles.
MAX_REGEX_GLOBS = 2_000
_WARNINGS_SHOWN = 20  # per section and file: 10,000 unused excludes are one note, not a flood


def _product(block: Block, defaults: Block) -> Iterator[dict[str, str]]:
    values = [getattr(block, a) or getattr(defaults, a) or [] for a in AXES]
    for combo in itertools.product(*values):
        yield dict(zip(AXES, combo, strict=True))


def _size(block: Block, defaults: Block) -> tuple[int, str]:
    """How many cells the block makes, and the product written out (20 x 20 x 20 x 20 x 1)."""
    counts = [len(getattr(block, a) or getattr(defaults, a) or []) for a in AXES]
    return math.prod(counts), " x ".join(map(str, counts))


def _missing_axes(block: Block, defaults: Block) -> list[str]:
    return [a for a in AXES if not (getattr(block, a) or getattr(defaults, a))]


def expand(
    doc: EnvFile,
    located: Located,
    base_dir: Path,
    indices: dict[str, list[int]] | None = None,
    budget: int = MAX_CELLS,
) -> tuple[list[RawCell], list[Problem]]:
    """Blocks -> cells. Returns the cells and the problems found (missing axes, tags, a block
    or a matrix too large). `budget`: how many cells the matrix may still make."""
    problems = _check_tags(doc, located)
    cells: list[RawCell] = []
    groups = [("matrix", b, True) for b in doc.matrix] + [
        ("include", b, False) for b in doc.include
    ]
    excludes = MatchIndex(doc.exclude)
    overrides = MatchIndex([o.match for o in doc.overrides])
    too_much = _glob_tries(doc, located, groups, {"exclude": excludes, "overrides": overrides})
    if too_much:
        return [], problems + too_much
    layers = _Layers(doc)
    counters = {"matrix": 0, "include": 0}
    used = {"exclude": 0, "overrides": 0}
    for section, block, excludable in groups:
        index = counters[section]
        counters[section] += 1
        if indices:  # blocks were left out: the file's own index, for the line
            index = indices[section][index]
        origin = Origin(located.file, located.line_of((section, index)))
        where = f"{section}[{index}]"
        problem = _block_problem(block, doc.defaults, origin, where, budget - len(cells))
        if problem:
            problems.append(problem)
            continue
        for axes in _product(block, doc.defaults):
            hits = excludes.hits(axes) if excludable else 0
            used["exclude"] |= hits
            if hits:
                continue
            applied = overrides.hits(axes)
            used["overrides"] |= applied
            options = layers.options(block, applied)
            cells.append(
                RawCell(**axes, options=options, env_file=doc, origin=origin, base_dir=base_dir)
            )
    _warn_unused(doc, located, used)
    return cells, problems


def _block_problem(
    block: Block, defaults: Block, origin: Origin, where: str, room: int
) -> Problem | None:
    """Why a block cannot expand: an axis with no value, or more cells than a block may make
    or than `room` (what the matrix may still make)."""
    missing = _missing_axes(block, defaults)
    if missing:
        return Problem(
            f"no value for {', '.join(missing)}; set it in the block or in defaults",
            origin.file,
            origin.line,
            where,
        )
    size, product = _size(block, defaults)
    if size <= min(MAX_BLOCK_CELLS, room):
        return None
    whole = size <= MAX_BLOCK_CELLS  # then it is the matrix's total that is too large
    bound = (
        f"the matrix may make at most {MAX_CELLS:,} cells in all"
        if whole
        else f"a block may make at most {MAX_BLOCK_CELLS:,}"
    )
    return Problem(
        f"{product} = {size:,} cells; {bound} (split it into blocks of the combinations you "
        "build, or use exclude)",
        origin.file,
        origin.line,
        where,
    )


def _glob_tries(
    doc: EnvFile,
    located: Located,
    groups: list[tuple[str, Block, bool]],
    indexes: dict[str, MatchIndex],
) -> list[Problem]:
    """A glob other than a prefix is tried once per value of its axis: 10,000 of them
    against a 1,000-value block are 10^7 tries (seconds). Counted before they are made."""
    values: dict[str, set[str]] = {a: set() for a in AXES}
    for _, block, _ in groups:
        if _size(block, doc.defaults)[0] <= MAX_BLOCK_CELLS:  # larger ones never expand
            for a in AXES:
                values[a].update(getattr(block, a) or getattr(doc.defaults, a) or [])
    problems = []
    for section, index in indexes.items():
        tries = sum(len(values[a]) * len(index.axes[a].globs) for a in AXES)
        regexes = sum(needs_regex(p) for a in AXES for p, _ in index.axes[a].globs)
        why = None
        if tries > MAX_GLOB_TRIES:
            why = (
                f"its globs would be tried {tries:,} times (each glob once per value of "
                f"its axis); a file may need at most {MAX_GLOB_TRIES:,}"
            )
        elif regexes > MAX_REGEX_GLOBS:
            why = (
                f"it has {regexes:,} distinct globs with a [set] or an inner ?, each a regex "
                f"to compile; a file may have at most {MAX_REGEX_GLOBS:,}"
            )
        if why:
            fix = ' (use exact values or prefix globs such as "2.7*", or fewer entries)'
            line = located.line_of((section,))
            problems.append(Problem(why + fix, located.file, line, section))
    return problems


class _Layers:
    """A cell's options: the file's defaults, its block, and the overrides that match it,
    merged in one pass (merge_all). Each layer is read once, and each merge is made once per
    block and set of overrides: 1,000 cells that 10,000 overrides all match share one."""

    def __init__(self, doc: EnvFile) -> None:
        self.doc = doc
        self.defaults = layer_of(doc.defaults)
        self.overrides: dict[int, dict[str, Any]] = {}
        self.merged: dict[tuple[int, int], Options] = {}

    def options(self, block: Block, applied: int) -> Options:
        key = (id(block), applied)
        if key not in self.merged:
            self.merged[key] = merge_all([self.defaults, layer_of(block), *self._applied(applied)])
        return _copy(self.merged[key])  # each cell its own lists, as before

    def _applied(self, applied: int) -> Iterator[dict[str, Any]]:
        for i in bits(applied):
            if i not in self.overrides:
                self.overrides[i] = layer_of(self.doc.overrides[i])
            yield self.overrides[i]


def _copy(options: Options) -> Options:
    values = {
        k: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v
        for k, v in options.__dict__.items()
        if k in options.model_fields_set
    }
    return Options.model_construct(**values)


def _warn_unused(doc: EnvFile, located: Located, used: dict[str, int]) -> None:
    """An exclude or override that selects no cell is almost always a typo: say so."""
    for section, count in (("exclude", len(doc.exclude)), ("overrides", len(doc.overrides))):
        unused = ~used[section] & ((1 << count) - 1)
        many = unused.bit_count()
        notes = [
            f"imagekit: warning: {located.file}:{located.line_of((section, i))}: {section}[{i}] "
            "matches no cell of this file; check its values"
            for i in itertools.islice(bits(unused), _WARNINGS_SHOWN)
        ]
        if many > _WARNINGS_SHOWN:
            notes.insert(
                0,
                f"imagekit: warning: {located.file}: {many} {section} entries match no cell of "
                f"this file; the first {_WARNINGS_SHOWN}:",
            )
        if notes:
            terminal.echo(notes, err=True)  # escaped there: a file name is one line


def _check_tags(doc: EnvFile, located: Located) -> list[str]:
    problems = []
    for where, template in [("tag", doc.tag)] + [
        (f"extra_tags[{i}]", t) for i, t in enumerate(doc.extra_tags)
    ]:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            fields, bad = [], str(exc)
        else:
            bad = ", ".join(f"{{{f}}}" for f in fields if f not in TAG_FIELDS)
            bad = bad or format_specs(template)
        if bad:
            path = ("tag",) if where == "tag" else ("extra_tags", int(where[11:-1]))
            allowed = ", ".join("{" + f + "}" for f in TAG_FIELDS)
            problems.append(
                Problem(
                    f"{template!r} uses {bad}; a tag template may use {allowed}",
                    located.file,
                    located.line_of(path),
                    where,
                )
            )
    return problems


def format_specs(template: str) -> str:
    """A field with a format spec or conversion ({torch:>999999999}, {torch!r}): a tag needs
    neither, and a width asks for memory the size of the width."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:  # reported as a template that does not parse
        return ""
    specs = [
        "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        for _, name, spec, conv in parsed
        if name is not None and (spec or conv)
    ]
    return f"{', '.join(specs)[:80]} (a field takes no format spec or conversion)" if specs else ""
