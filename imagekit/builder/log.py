"""Reading BuildKit's plain progress output: which steps ran, how long, which were cached.

Lines look like `#8 [builder 3/6] RUN ...`, `#8 CACHED`, `#8 DONE 12.3s`, `#8 ERROR: ...`.
After the steps, buildx (0.15 on; Docker 20.10's built-in BuildKit has no build checks)
lists what BuildKit warned about, colored on a terminal or not:

     2 warnings found (use docker --debug to expand):
     - LegacyKeyValueFormat: "ENV key=value" should be used ... (line 3)
     - InvalidBaseImagePlatform: Base image debian:bookworm-slim was pulled with ... (line 1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_START = re.compile(r"^#(\d+) (\[(?!internal\])[^\]]+\] .*)$")
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_ERROR = re.compile(r"^#(\d+) ERROR")
_MOUNT = re.compile(r"--mount=\S+")
_COLOR = re.compile(r"\x1b\[[0-9;]*m")
_WARNINGS_FOUND = re.compile(r"^\s*\d+ warnings? found\b")
_WARNING = re.compile(r"^\s*- ([A-Za-z][A-Za-z0-9]*): (.*?)(?: \(line (\d+)\))?$")
# The warning that says the build ran on a base of another platform than it was built for:
# its files are that platform's whatever the image's config says (FACTS 10).
WRONG_BASE_PLATFORM = "InvalidBaseImagePlatform"


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    cached: bool = False
    error: bool = False


@dataclass(frozen=True)
class BuildWarning:
    """One of BuildKit's warnings about the build: the rule's name (its build check, e.g.
    InvalidBaseImagePlatform), what it said, and the Dockerfile line (0: none given)."""

    rule: str
    message: str
    line: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "message": self.message, "line": self.line}


@dataclass
class StepLog:
    steps: dict[int, Step] = field(default_factory=dict)
    current: str = ""
    warnings: list[BuildWarning] = field(default_factory=list)
    _in_warnings: bool = False

    def feed(self, line: str) -> None:
        if self._warning(_COLOR.sub("", line)):
            return
        if match := _START.match(line):
            vertex = int(match.group(1))
            if vertex not in self.steps:
                # Mount options make every install step look alike; keep the command.
                name = " ".join(_MOUNT.sub("", match.group(2)).split())
                self.steps[vertex] = Step(name=name[:200])
            self.current = self.steps[vertex].name
        elif (match := _DONE.match(line)) and int(match.group(1)) in self.steps:
            step = self.steps[int(match.group(1))]
            step.seconds = float(match.group(2))
            # A FROM only resolves an image that is already there: nothing was rebuilt, so a
            # fully cached build counts every step as cached.
            step.cached = step.cached or "] FROM " in step.name
        elif (match := _CACHED.match(line)) and int(match.group(1)) in self.steps:
            self.steps[int(match.group(1))].cached = True
        elif (match := _ERROR.match(line)) and int(match.group(1)) in self.steps:
            self.steps[int(match.group(1))].error = True

    def _warning(self, line: str) -> bool:
        """The warnings' block at the end of the output: its lines, once each."""
        if _WARNINGS_FOUND.match(line):
            self._in_warnings = True
            return True
        match = _WARNING.match(line) if self._in_warnings else None
        if match is None:
            self._in_warnings = self._in_warnings and not line.startswith("#")
            return False
        found = BuildWarning(match.group(1), match.group(2), int(match.group(3) or 0))
        if found not in self.warnings:  # the same rule on the same line, once
            self.warnings.append(found)
        return True

    def warnings_as_list(self) -> list[dict[str, object]]:
        return [w.as_dict() for w in self.warnings]

    def as_list(self) -> list[dict[str, object]]:
        return [
            {"step": s.name, "seconds": s.seconds, "cached": s.cached, "error": s.error}
            for _, s in sorted(self.steps.items())
        ]
