"""YAML loading that remembers where each value came from (file and line).

Validation messages name the file, line, field and value; PyYAML's plain loader forgets
positions, so this walks the composed node tree and records a line per path.

A matrix file is user input that may be hostile or broken, so loading is bounded: the
file's size, its nesting depth (checked on the token stream, before PyYAML's recursive
composer runs) and the number of values after alias expansion (a few nested aliases
otherwise expand to billions). A self-referencing alias is refused. Every failure is a
YamlSyntaxError naming the file and line, never a crash. YAML merge keys
(`<<: *defaults`) are supported: explicit keys win over merged ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagekit.errors import Problem, printable
from imagekit.paths import MiB, UnsafeFile, read_checked

Path_ = tuple[str | int, ...]

MAX_BYTES = MiB  # a matrix file is a few KB; 1 MiB leaves room and stops a bomb (paths.LIMITS)
MAX_DEPTH = 64
MAX_VALUES = 100_000  # values after alias expansion; a real matrix has hundreds
MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's scanner and composer when PyYAML has them: 10,000 excludes compose in 0.1 s, not
# 4 s (the pure-Python scanner). The depth check runs first, so its recursion is bounded.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class YamlNumber(float):
    """A float as YAML read it, with the text the user wrote ("3.10"), for messages."""

    raw: str

    def __new__(cls, value: float, raw: str) -> YamlNumber:
        number = super().__new__(cls, value)
        number.raw = raw
        return number


@dataclass
class Located:
    """A loaded document plus the 1-based line of every mapping key and sequence item."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int:
        """Line of the deepest known prefix of `path` (a missing key points at its parent)."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1


class YamlSyntaxError(ValueError):
    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.problem = Problem(message=message, file=file, line=line)
        super().__init__(str(self.problem))


def load(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    text = _read(path, name)
    _check_depth(text, name)
    try:
        node = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(name, _line(exc), f"not valid YAML: {exc}") from None
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
        why = str(exc).removeprefix(f"{printable(str(path))}: ")
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


def _check_depth(text: str, name: str) -> None:
    """Nesting depth from the scanner, which is iterative, before the recursive composer."""
    depth = 0
    try:
        for token in yaml.scan(text, Loader=LOADER):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlSyntaxError(
                        name,
                        token.start_mark.line + 1,
                        f"nested more than {MAX_DEPTH} levels deep; a matrix file needs a handful",
                    )
            elif isinstance(token, _CLOSE):
                depth -= 1
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(name, _line(exc), f"not valid YAML: {exc}") from None


def _line(exc: yaml.YAMLError) -> int:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark else 1


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
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise self._error(node, f"{problem} (tag {node.tag}); use plain YAML values") from None
        if isinstance(value, float) and not isinstance(value, bool):
            return YamlNumber(value, str(node.value))
        return value

    def _count(self, node: yaml.Node) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._error(
                node,
                f"more than {MAX_VALUES} values after expanding aliases (an alias bomb?); "
                "a matrix needs far fewer",
            )

    def _error(self, node: yaml.Node, message: str) -> YamlSyntaxError:
        return YamlSyntaxError(self.out.file, node.start_mark.line + 1, f"{message}")
