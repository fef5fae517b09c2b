"""Reading BuildKit's plain progress output: which steps ran, how long, which were cached.

Lines look like `#8 [builder 3/6] RUN ...`, `#8 CACHED`, `#8 DONE 12.3s`, `#8 ERROR: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_START = re.compile(r"^#(\d+) (\[(?!internal\])[^\]]+\] .*)$")
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_ERROR = re.compile(r"^#(\d+) ERROR")
_MOUNT = re.compile(r"--mount=\S+")


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    cached: bool = False
    error: bool = False


@dataclass
class StepLog:
    steps: dict[int, Step] = field(default_factory=dict)
    current: str = ""

    def feed(self, line: str) -> None:
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

    def as_list(self) -> list[dict[str, object]]:
        return [
            {"step": s.name, "seconds": s.seconds, "cached": s.cached, "error": s.error}
            for _, s in sorted(self.steps.items())
        ]
