"""The disk the real tests use, printed at the end of each real pytest run.

The engines, the registry and BuildKit's cache share one disk (/var/lib). Below 10 GB free,
BuildKit's garbage collection (.ci/engines.sh) evicts cached steps, and a later test that
checks a step was cached fails for no reason of its own (one run reached 6 GB free,
2026-11-29). So each run prints the free space at its start, its lowest point and before or
after which test, and the tests during which the most was used: a disk that fills names what
filled it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NAME = "imagekit-real-disk"
WHERE = Path("/var/lib")  # the engines' data, the registry's and BuildKit's cache
GC_LINE = 10 * 2**30  # bytes free where BuildKit starts evicting (.ci/engines.sh GC)
SHOWN = 8  # the tests named in the summary


def free_bytes(path: Path = WHERE) -> int:
    """What a non-root writer may still use (statvfs f_bavail), as BuildKit reads it."""
    return shutil.disk_usage(path).free


def gb(size: int) -> str:
    return f"{size / 2**30:.1f} GB"


@dataclass
class Plugin:
    read: Callable[[], int] = free_bytes
    folder: str = "tests/real/"
    start: int | None = None
    used: dict[str, int] = field(default_factory=dict)  # test -> bytes used while it ran
    lowest: tuple[int, str] | None = None  # (free bytes, "before|after <test>")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if not item.nodeid.startswith(self.folder):
            return (yield)
        before = self.read()
        if self.start is None:
            self.start = before
        self.note(before, f"before {item.nodeid}")
        try:
            return (yield)
        finally:
            after = self.read()
            self.used[item.nodeid] = before - after
            self.note(after, f"after {item.nodeid}")

    def note(self, free: int, when: str) -> None:
        if self.lowest is None or free < self.lowest[0]:
            self.lowest = (free, when)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.summary():
            terminalreporter.write_line(line)

    def summary(self) -> list[str]:
        if self.start is None or self.lowest is None:
            return []
        low, where = self.lowest
        lines = [
            f"disk ({WHERE}): {gb(self.start)} free at the start, lowest {gb(low)} "
            f"{where}, {gb(self.read())} at the end"
        ]
        if low < GC_LINE:
            lines.append(
                f"disk: under the {gb(GC_LINE)} free where BuildKit evicts its cache "
                "(.ci/engines.sh): a test after that point may find a step uncached"
            )
        top = sorted(self.used.items(), key=lambda kv: kv[1], reverse=True)[:SHOWN]
        lines += [f"disk: {gb(size):>8} used during {test}" for test, size in top if size > 0]
        return lines
