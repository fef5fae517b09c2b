"""Matrix files -> raw cells: the blocks' products, less the excludes, with the overrides
merged in; bounded before the work is done, with the tag templates checked.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import re
import string
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel

from imagekit import terminal
from imagekit.errors import Problem
from imagekit.matrix.envfile import (
    AXES,
    TAG_FIELDS,
    Block,
    EnvFile,
    InheritField,
    Match,
    Options,
)
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


def merge(base: Options, top: Options) -> Options:
    """`top` wins field by field; `env` maps merge; a list replaces the one below unless
    `top.inherit` says append or prepend. `inherit` itself applies to its own layer only."""
    return merge_all([_layer(base), _layer(top)])


OPTION_FIELDS = tuple(Options.model_fields)
_LIST_FIELDS = frozenset(get_args(InheritField))  # the lists `inherit` may append to


def _layer(model: BaseModel) -> dict[str, Any]:
    """A model's options that are set, as `model_dump(exclude_none=True)` has them but not
    copied (merge_all copies what it returns)."""
    return {k: v for k in OPTION_FIELDS if (v := getattr(model, k, None)) is not None}


def merge_all(layers: Iterable[dict[str, Any]]) -> Options:
    """`merge` of each layer onto the ones below, in one pass: the same result, in time
    linear in the layers' size (merging 10,000 overrides one at a time copied and
    revalidated the growing lists 10,000 times)."""
    fold = _Fold()
    for layer in layers:
        fold.add(layer)
    return fold.result()


class _Fold:
    """Options merged so far. A list field is kept as the chunks it was made of and joined
    once: `dict.fromkeys` over all of them equals deduplicating at each append, because
    it keeps first occurrences. A list only replaced (never appended to) is not
    deduplicated, as `merge` leaves it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.chunks: dict[str, deque[list[Any]]] = {}
        self.joined: set[str] = set()  # lists appended or prepended to: deduplicated
        self.filled: set[str] = set()  # lists not empty (`merge`'s "and below")

    def add(self, layer: dict[str, Any]) -> None:
        rules = layer.get("inherit") or {}
        for key, value in layer.items():
            if key == "inherit":
                continue  # applies to its own layer only
            if key == "env":
                self.values.setdefault("env", {}).update(value)
            elif key in _LIST_FIELDS:
                self._list(key, value, rules.get(key))
            else:
                self.values[key] = value

    def _list(self, key: str, value: list[Any], rule: str | None) -> None:
        if rule in ("append", "prepend") and key in self.filled:
            chunks = self.chunks[key]
            chunks.append(value) if rule == "append" else chunks.appendleft(value)
            self.joined.add(key)
            return
        self.chunks[key] = deque([value])
        self.joined.discard(key)
        if value:
            self.filled.add(key)
        else:
            self.filled.discard(key)

    def result(self) -> Options:
        values = {k: dict(v) if k == "env" else v for k, v in self.values.items()}
        for key, chunks in self.chunks.items():
            if key in self.joined:
                values[key] = list(dict.fromkeys(itertools.chain.from_iterable(chunks)))
            else:
                values[key] = list(chunks[0])
        # every value was validated when its layer was; validating again is what made a
        # 10,000-entry pip list cost seconds
        return Options.model_construct(**{k: values[k] for k in OPTION_FIELDS if k in values})


# Work is bounded before it is done: a block's product is counted before it is expanded
# (20 values on each of four axes would be 160,000 cells), and so is the matrix's total.
MAX_BLOCK_CELLS = 1_000
MAX_CELLS = 5_000
# Globs other than a prefix ("2.7*") are tried once per value: a real file tries hundreds.
MAX_GLOB_TRIES = 200_000
# A glob with a [set] (or ? between stars) is a regex, compiled once per pattern (~25 us each):
# thousands of distinct ones are seconds, and past fnmatch's cache every value recompiles.
MAX_REGEX_GLOBS = 2_000
_GLOB = frozenset("*?[")
_LITERAL_PREFIX = re.compile(r"[^*?\[]*")
_WARNINGS_SHOWN = 20  # per section and file: 10,000 unused excludes are one note, not a flood


class MatchIndex:
    """Which of `matches` select a cell, in time linear in their number: for each axis and
    each value a cell has, the bitmask of the matches that accept it, made once and kept; a
    cell's hits are the AND of its five masks. Exact values are one dictionary lookup, the
    prefix globs ("2.7*") one lookup per prefix length, and each other glob is tried once per
    value (glob_match: mostly without compiling a regex). `work` counts the lookups and
    tries, for the tests; MAX_GLOB_TRIES bounds the tries before they are made."""

    def __init__(self, matches: list[Match], values: dict[str, set[str]] | None = None) -> None:
        self.none_excluded = (1 << len(matches)) - 1
        self.work = 0
        self.axes = {axis: _AxisPatterns(matches, axis) for axis in AXES}
        self.masks: dict[str, dict[str, int]] = {axis: {} for axis in AXES}
        for axis, known in (values or {}).items():  # optional: masks are made on demand
            for value in known:
                self.mask(axis, value)

    def mask(self, axis: str, value: str) -> int:
        masks = self.masks[axis]
        if value not in masks:
            masks[value], work = self.axes[axis].mask(value)
            self.work += work
        return masks[value]

    def hits(self, axes: dict[str, str]) -> int:
        mask = self.none_excluded
        for axis in AXES:
            mask &= self.mask(axis, axes[axis])
        return mask


class _AxisPatterns:
    """One axis of the matches, by kind of pattern, each pattern once with the mask of the
    matches that use it (10,000 overrides of "12.*" are one pattern)."""

    def __init__(self, matches: list[Match], axis: str) -> None:
        by_pattern: dict[str, list[int]] = {}
        unconstrained: list[int] = []
        for i, match in enumerate(matches):
            patterns = getattr(match, axis)
            if patterns is None:
                unconstrained.append(i)
            for pattern in patterns or ():
                by_pattern.setdefault(str(pattern), []).append(i)
        self.unconstrained = _mask(unconstrained)
        self.exact: dict[str, int] = {}
        self.prefixes: dict[str, int] = {}  # "2.7*" -> "2.7"
        self.globs: list[tuple[str, int]] = []
        for pattern, users in by_pattern.items():
            if _GLOB.isdisjoint(pattern):
                self.exact[pattern] = _mask(users)
            elif pattern.endswith("*") and _GLOB.isdisjoint(pattern[:-1]):
                self.prefixes[pattern[:-1]] = _mask(users)
            else:
                self.globs.append((pattern, _mask(users)))
        self.lengths = sorted({len(p) for p in self.prefixes})  # of the prefixes to look up

    def mask(self, value: str) -> tuple[int, int]:
        """The mask of the matches that accept `value`, and the lookups and tries it took."""
        mask = self.unconstrained | self.exact.get(value, 0)
        looked = 0
        for length in self.lengths:
            if length > len(value):
                break
            mask |= self.prefixes.get(value[:length], 0)
            looked += 1
        for pattern, users in self.globs:
            if glob_match(value, pattern):
                mask |= users
        return mask, 1 + looked + len(self.globs)


def _mask(indices: list[int]) -> int:
    """The int with bits `indices` (ascending) set, in one pass over them: OR-ing 1 << i
    into a growing int one index at a time rewrites the whole int each time."""
    if not indices:
        return 0
    flags = bytearray(indices[-1] // 8 + 1)
    for i in indices:
        flags[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(flags, "little")


def glob_match(value: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase(value, pattern)`, mostly without compiling a regex (fnmatch
    compiles one per pattern: 10,000 distinct globs cost 0.3 s). A pattern of literals and
    *, with ? only in its first and last parts (the usual "2.7*", "3.1?", "*-slim"): the
    parts in order, the first at the start, the last at the end, each other at its leftmost
    place (which leaves the most room for the rest). Others go to fnmatch once their
    literal prefix fits."""
    parts = pattern.split("*")
    if needs_regex(pattern):
        prefix = _LITERAL_PREFIX.match(pattern).group()  # type: ignore[union-attr]
        return value.startswith(prefix) and fnmatch.fnmatchcase(value, pattern)
    if len(parts) == 1:
        return len(value) == len(pattern) and _fits(value, 0, pattern)
    head, *middle, tail = parts
    end = len(value) - len(tail)
    if end < len(head) or not _fits(value, 0, head) or not _fits(value, end, tail):
        return False
    start = len(head)
    for part in middle:
        found = value.find(part, start, end)
        if found < 0:
            return False
        start = found + len(part)
    return True


def needs_regex(pattern: str) -> bool:
    """Whether glob_match hands `pattern` to fnmatch (a [set], or ? between two stars)."""
    return "[" in pattern or any("?" in part for part in pattern.split("*")[1:-1])


def _fits(value: str, at: int, part: str) -> bool:
    """`part` (? for any one character) is at `value[at:]`."""
    if "?" not in part:
        return value.startswith(part, at)
    if at + len(part) > len(value):
        return False
    return all(p in ("?", c) for p, c in zip(part, value[at : at + len(part)], strict=True))


def bits(mask: int) -> Iterator[int]:
    """The indices of the set bits of `mask`, lowest first (the order overrides apply in)."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def matches(match: Match, axes: dict[str, str]) -> bool:
    """The plain definition the index must agree with."""
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
            applied = overrides.hits(axes)
            used["overrides"] |= applied
            options = layers.options(block, applied)
            cells.append(
                RawCell(**axes, options=options, env_file=doc, origin=origin, base_dir=base_dir)
            )
    _warn_unused(doc, located, used)
    return cells, problems


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
        self.defaults = _layer(doc.defaults)
        self.overrides: dict[int, dict[str, Any]] = {}
        self.merged: dict[tuple[int, int], Options] = {}

    def options(self, block: Block, applied: int) -> Options:
        key = (id(block), applied)
        if key not in self.merged:
            self.merged[key] = merge_all([self.defaults, _layer(block), *self._applied(applied)])
        return _copy(self.merged[key])  # each cell its own lists, as before

    def _applied(self, applied: int) -> Iterator[dict[str, Any]]:
        for i in bits(applied):
            if i not in self.overrides:
                self.overrides[i] = _layer(self.doc.overrides[i])
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
