"""YAML loading that remembers where each value came from (file and line).

Validation messages name the file, line, field and value; PyYAML's plain loader forgets
positions, so this records a line per path as it builds the data.

A matrix file is user input that may be hostile or broken, so loading is bounded: the
file's size, its nesting depth (checked on the token stream, before PyYAML's recursive
composer runs) and the number of values after alias expansion (a few nested aliases
otherwise expand to billions). A self-referencing alias is refused. Every failure is a
YamlSyntaxError naming the file and line, never a crash. YAML merge keys
(`<<: *defaults`) are supported: explicit keys win over merged ones.

Two ways to the same result. The fast pass builds the data and the lines in one walk over
libyaml's events (iterative: no recursion to bound) and gives up at anything unusual: an
error of its own, more than MAX_DEPTH open collections, a second document, a merge of
several mappings. The careful path (depth check on the tokens, compose, walk the nodes:
three passes, a third of the speed) then decides, so every message and line is its own.
Two errors of a large file are the fast pass's to report, because the careful path would
report the same: a syntax error (after the same token check) and the value cap (when the
rest of the file is clean); tests/test_hostile_yaml.py holds both paths to agreeing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from imagekit.matrix.yaml_fast import Unusual, fast
from imagekit.matrix.yaml_located import (
    COLLECTIONS,
    LOADER,
    MAX_VALUES,
    MERGE_TAG,
    TOO_MANY,
    Located,
    Path_,
    YamlNumber,
    YamlSyntaxError,
    check_depth,
    not_valid,
)
from imagekit.paths import UnsafeFile, read_checked


def load(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    text = _read(path, name)
    with paused_gc():
        try:
            return fast(text, name)
        except Unusual:
            return _careful(text, name)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a file's objects are made: a 1 MiB file makes
    ~10^6 containers, and the collector rescanned them again and again as they grew (half
    the load time). What is made here has no cycles and is bounded by the file's caps."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _careful(text: str, name: str) -> Located:
    """The three-pass load: its errors are the ones users see."""
    check_depth(text, name)
    try:
        node = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        raise not_valid(name, exc) from None
    except RecursionError:
        raise YamlSyntaxError(name, 1, "nested too deeply to be a matrix file") from None
    located = Located(file=name, data=None)
    walker = _Walker(located)
    located.data = {} if node is None else walker.convert(node, (), ())
    return located


def _read(path: Path, name: str) -> str:
    try:
        data = read_checked(path, "matrix file")
    except UnsafeFile as exc:
        why = str(exc).removeprefix(f"{path}: ")
        raise YamlSyntaxError(name, None, why) from None
    if data is None:
        raise YamlSyntaxError(name, None, "no such file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlSyntaxError(
            name,
            line,
            f"not UTF-8 text (byte {exc.object[exc.start]:#x} at offset "
            f"{exc.start}); save the file as UTF-8",
        ) from None


class _Walker:
    def __init__(self, out: Located) -> None:
        self.out = out
        self.values = 0
        self.constructor = yaml.SafeLoader("")  # one for the file: it caches shared nodes

    def convert(self, node: yaml.Node, path: Path_, active: tuple[int, ...]) -> Any:
        self._count(node)
        if id(node) in active:
            raise self._error(node, "an alias refers to a value that contains it (a cycle)")
        self.out.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, (*active, id(node)))
        if isinstance(node, yaml.SequenceNode):
            inner = (*active, id(node))
            return [self.convert(item, (*path, i), inner) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: Path_, active: tuple[int, ...]) -> dict:  # type: ignore[type-arg]
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merged.update(self._merge_source(value_node, path, active))
                continue
            key = self._scalar(key_node, as_key=True)
            if key in result:
                raise self._error(key_node, f"duplicate key {key!r}")
            self.out.lines[(*path, key)] = key_node.start_mark.line + 1
            result[key] = self.convert(value_node, (*path, key), active)
        return {**{k: v for k, v in merged.items() if k not in result}, **result}

    def _merge_source(self, node: yaml.Node, path: Path_, active: tuple[int, ...]) -> dict:  # type: ignore[type-arg]
        """`<<: *a` or `<<: [*a, *b]` (earlier mappings win, as in YAML's merge spec)."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[Any, Any] = {}
        for source in reversed(sources):
            value = self.convert(source, path, active)
            if not isinstance(value, dict):
                raise self._error(source, "`<<` merges mappings only (e.g. `<<: *defaults`)")
            merged.update(value)
        return merged

    def _scalar(self, node: yaml.Node, as_key: bool = False) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            what = "a key" if as_key else "this value"
            raise self._error(node, f"{what} must be a plain value")
        try:
            value = self.constructor.construct_object(node)
        # not only YAML's errors: `2001-13-45` is read as a date and `!!float x` as a float,
        # whose constructors raise ValueError (a crash, exit 70, before)
        except (yaml.YAMLError, ValueError, ArithmeticError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise self._error(node, f"{problem} (tag {node.tag}); use plain YAML values") from None
        if isinstance(value, COLLECTIONS):  # `!!map x` or `!!set x`: a container from a word
            raise self._error(node, f"tag {node.tag} on a plain value; use plain YAML values")
        if isinstance(value, float) and not isinstance(value, bool):
            return YamlNumber(value, str(node.value))
        return value

    def _count(self, node: yaml.Node) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._error(node, TOO_MANY)

    def _error(self, node: yaml.Node, message: str) -> YamlSyntaxError:
        return YamlSyntaxError(self.out.file, node.start_mark.line + 1, f"{message}")
