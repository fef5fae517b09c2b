"""Matrix files -> raw cells: the blocks' products, less the excludes, with the overrides
merged in; bounded before the work is done, with the tag templates checked.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from imagekit.errors import Problem, printable
from imagekit.matrix.envfile import AXES, TAG_FIELDS, Block, EnvFile, Match, Options
from imagekit.matrix.yamlsrc import Located


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


def merge(base: Options, top: Options) -> Options:
    """`top` wins field by field; `env` maps merge; a list replaces the one below unless
    `top.inherit` says append or prepend. `inherit` itself applies to its own layer only."""
    values = base.model_dump(exclude_none=True)
    values.pop("inherit", None)
    rules = top.inherit or {}
    for key, value in top.model_dump(exclude_none=True, exclude={"inherit"}).items():
        below = values.get(key)
        if key == "env":
            values[key] = {**(below or {}), **value}
        elif rules.get(key) in ("append", "prepend") and below:
            first, then = (below, value) if rules[key] == "append" else (value, below)
            values[key] = list(dict.fromkeys([*first, *then]))
        else:
            values[key] = value
    return Options(**{k: v for k, v in values.items() if k in Options.model_fields})


def _options_of(model: BaseModel) -> Options:
    return Options(**model.model_dump(include=set(Options.model_fields), exclude_none=True))


# Work is bounded before it is done: a block's product is counted before it is expanded
# (20 values on each of four axes would be 160,000 cells), and so is the matrix's total.
MAX_BLOCK_CELLS = 1_000
MAX_CELLS = 5_000
_GLOB = frozenset("*?[")
_WARNINGS_SHOWN = 20  # per section and file: 10,000 unused excludes are one note, not a flood


class MatchIndex:
    """Which of `matches` select a cell, in time linear in their number: for each axis and
    each value the file uses, the bitmask of the matches that accept it (exact values by a
    dictionary, globs tried once per value); a cell's hits are the AND of its five masks."""

    def __init__(self, matches: list[Match], values: dict[str, set[str]]) -> None:
        self.none_excluded = (1 << len(matches)) - 1
        self.masks: dict[str, dict[str, int]] = {}
        for axis in AXES:
            unconstrained, exact, globs = 0, dict[str, int](), list[tuple[int, str]]()
            for i, match in enumerate(matches):
                patterns = getattr(match, axis)
                if patterns is None:
                    unconstrained |= 1 << i
                    continue
                for pattern in map(str, patterns):
                    if _GLOB.isdisjoint(pattern):
                        exact[pattern] = exact.get(pattern, 0) | 1 << i
                    else:
                        globs.append((i, pattern))
            self.masks[axis] = {
                value: unconstrained
                | exact.get(value, 0)
                | sum({1 << i for i, p in globs if fnmatch.fnmatchcase(value, p)})
                for value in values[axis]
            }

    def hits(self, axes: dict[str, str]) -> int:
        mask = self.none_excluded
        for axis in AXES:
            mask &= self.masks[axis][axes[axis]]
        return mask


def bits(mask: int) -> Iterator[int]:
    """The indices of the set bits of `mask`, lowest first (the order overrides apply in)."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def matches(match: Match, axes: dict[str, str]) -> bool:
    for axis in AXES:
        patterns = getattr(match, axis)
        if patterns is not None and not any(
            fnmatch.fnmatchcase(axes[axis], str(p)) for p in patterns
        ):
            return False
    return True


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
    values = {
        a: {v for _, b, _ in groups for v in getattr(b, a) or getattr(doc.defaults, a) or []}
        for a in AXES
    }
    excludes = MatchIndex(doc.exclude, values)
    overrides = MatchIndex([o.match for o in doc.overrides], values)
    counters = {"matrix": 0, "include": 0}
    used = {"exclude": 0, "overrides": 0}
    for section, block, excludable in groups:
        index = counters[section]
        counters[section] += 1
        if indices:  # blocks were left out: the file's own index, for the line
            index = indices[section][index]
        origin = Origin(located.file, located.line_of((section, index)))
        missing = _missing_axes(block, doc.defaults)
        if missing:
            problems.append(
                Problem(
                    f"no value for {', '.join(missing)}; set it in the block or in defaults",
                    origin.file,
                    origin.line,
                    f"{section}[{index}]",
                )
            )
            continue
        size, product = _size(block, doc.defaults)
        limit = min(MAX_BLOCK_CELLS, budget - len(cells))
        if size > limit:
            whole = size <= MAX_BLOCK_CELLS  # then it is the matrix's total that is too large
            problems.append(
                Problem(
                    f"{product} = {size:,} cells; "
                    + (
                        f"the matrix may make at most {MAX_CELLS:,} cells in all"
                        if whole
                        else f"a block may make at most {MAX_BLOCK_CELLS:,}"
                    )
                    + " (split it into blocks of the combinations you build, or use exclude)",
                    origin.file,
                    origin.line,
                    f"{section}[{index}]",
                )
            )
            continue
        for axes in _product(block, doc.defaults):
            hits = excludes.hits(axes) if excludable else 0
            used["exclude"] |= hits
            if hits:
                continue
            options = merge(_options_of(doc.defaults), _options_of(block))
            applied = overrides.hits(axes)
            used["overrides"] |= applied
            for i in bits(applied):
                options = merge(options, _options_of(doc.overrides[i]))
            cells.append(
                RawCell(**axes, options=options, env_file=doc, origin=origin, base_dir=base_dir)
            )
    _warn_unused(doc, located, used)
    return cells, problems


def _warn_unused(doc: EnvFile, located: Located, used: dict[str, int]) -> None:
    """An exclude or override that selects no cell is almost always a typo: say so."""
    for section, count in (("exclude", len(doc.exclude)), ("overrides", len(doc.overrides))):
        unused = [i for i in range(count) if not used[section] >> i & 1]
        if len(unused) > _WARNINGS_SHOWN:
            print(
                f"imagekit: warning: {printable(located.file)}: {len(unused)} {section} entries "
                f"match no cell of this file; the first {_WARNINGS_SHOWN}:",
                file=sys.stderr,
            )
        for i in unused[:_WARNINGS_SHOWN]:
            line = located.line_of((section, i))
            print(
                f"imagekit: warning: {printable(located.file)}:{line}: {section}[{i}] "
                "matches no cell of this file; check its values",
                file=sys.stderr,
            )


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
