"""When scripts/test-all.sh may start the `beside` tests beside the real phase.

They start once the real phase has built the session image (a cold build that wants both
CPUs) and has run every test that checks which steps BuildKit took from its cache (marked
`checks_cache`; tests/real/conftest.py sorts them first). With other pytest processes
building on the engine, such a test found steps uncached between its own two builds (twice,
2026-11-29: the CUDA test's prune, then a cause not found), so those tests have the engine to
themselves. The gate opens by touching the file IMAGEKIT_TEST_SESSION_READY names; where that
is unset (every run but test-all.sh's real phase with two CPUs), it does nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

READY_ENV = "IMAGEKIT_TEST_SESSION_READY"
MARK = "checks_cache"


@dataclass
class Gate:
    ready: Path | None  # the file to touch; None: nobody waits
    built: bool = False  # the session image is built
    checked: bool = False  # every `checks_cache` test has run
    opened: bool = False  # the file touched (once)

    def session_built(self) -> None:
        self.built = True
        self._open_if_due()

    def test_starting(self, checks_cache: bool) -> None:
        """A test is about to run; the `checks_cache` ones come first, so the first other
        test means they are all done."""
        if not checks_cache:
            self.checked = True
        self._open_if_due()

    def _open_if_due(self) -> None:
        if self.built and self.checked and not self.opened and self.ready is not None:
            self.ready.touch()
            self.opened = True


def from_env() -> Gate:
    named = os.environ.get(READY_ENV)
    return Gate(Path(named) if named else None)
