"""A loaded matrix file (data plus each value's line), the limits on loading it, its errors.

yamlsrc.py loads; yaml_fast.py is its fast pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from imagekit.errors import Problem
from imagekit.paths import MiB

Path_ = tuple[str | int, ...]

MAX_BYTES = MiB  # a matrix file is a few KB; 1 MiB leaves room and stops a bomb (paths.LIMITS)
MAX_DEPTH = 64
MAX_VALUES = 100_000  # values after alias expansion; a real matrix has hundreds
TOO_MANY = (
    f"more than {MAX_VALUES} values after expanding aliases (an alias bomb?); "
    "a matrix needs far fewer"
)
MERGE_TAG = "tag:yaml.org,2002:merge"
COLLECTIONS = (dict, list, set, tuple)  # what a tag may make of a plain value, refused
STR_TAG = "tag:yaml.org,2002:str"
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


def yaml_reason(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: its problem, where, and what it was inside (its own text
    spans lines and names a "<unicode string>")."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return " ".join(str(exc).split())
    mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    started = getattr(exc, "context_mark", None)
    inside = f", {context} from line {started.line + 1}" if context and started else ""
    return f"{problem}{where}{inside or (f', {context}' if context else '')}"


def check_depth(text: str, name: str) -> None:
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
        raise not_valid(name, exc) from None


def not_valid(name: str, exc: yaml.YAMLError) -> YamlSyntaxError:
    """PyYAML's error in file `name`, as the user sees it."""
    return YamlSyntaxError(name, _line(exc), f"not valid YAML: {yaml_reason(exc)}")


def _line(exc: yaml.YAMLError) -> int:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark else 1
