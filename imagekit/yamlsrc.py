"""YAML loading that remembers where each value came from (file and line).

Validation messages name the file, line, field and value; PyYAML's plain loader forgets
positions, so this walks the composed node tree and records a line per path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Path_ = tuple[str | int, ...]


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
    pass


def load(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise YamlSyntaxError(f"{name}:{line}: not valid YAML: {exc}") from None
    located = Located(file=name, data=None)
    located.data = {} if node is None else _convert(node, (), located)
    return located


def _convert(node: yaml.Node, path: Path_, out: Located) -> Any:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if key in result:
                raise YamlSyntaxError(
                    f"{out.file}:{key_node.start_mark.line + 1}: duplicate key {key!r}"
                )
            out.lines[(*path, key)] = key_node.start_mark.line + 1
            result[key] = _convert(value_node, (*path, key), out)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), out) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise YamlSyntaxError(f"line {node.start_mark.line + 1}: a key must be a plain value")
    return yaml.SafeLoader("").construct_object(node)
