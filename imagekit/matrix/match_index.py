"""Which excludes and overrides select a cell: a bitmask index over the matches, fast globs."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

from imagekit.matrix.envfile import AXES, Match

_GLOB = frozenset("*?[")
_LITERAL_PREFIX = re.compile(r"[^*?\[]*")


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
