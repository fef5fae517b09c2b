"""Build progress: a live table per cell on a terminal (rich), plain lines in CI, or quiet."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Protocol

from imagekit import terminal
from imagekit.builder.log import StepLog


class Display(Protocol):
    def __enter__(self) -> Display: ...
    def __exit__(self, *exc: object) -> None: ...
    def start(self, cell_id: str) -> None: ...
    def line(self, cell_id: str, text: str, steps: StepLog) -> None: ...
    def finish(self, cell_id: str, status: str) -> None: ...
    def message(self, text: str) -> None: ...


class QuietDisplay:
    def __enter__(self) -> QuietDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start(self, cell_id: str) -> None:
        return None

    def line(self, cell_id: str, text: str, steps: StepLog) -> None:
        return None

    def finish(self, cell_id: str, status: str) -> None:
        return None

    def message(self, text: str) -> None:
        terminal.echo(text, err=True)


class PlainDisplay(QuietDisplay):
    """Every BuildKit line, prefixed with its cell (a gutter of its own: no line of a build
    starts a line of the output): greppable CI logs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def _print(self, text: str) -> None:
        with self._lock:
            terminal.echo(text)

    def start(self, cell_id: str) -> None:
        self._print(f"[{cell_id}] build started")

    def line(self, cell_id: str, text: str, steps: StepLog) -> None:
        self._print(f"[{cell_id}] {text}")

    def finish(self, cell_id: str, status: str) -> None:
        self._print(f"[{cell_id}] {status}")

    def message(self, text: str) -> None:
        self._print(text)


class LiveDisplay(QuietDisplay):
    """One row per cell with its state, current step and elapsed time."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._console = Console(stderr=False)
        self._live = Live(console=self._console, refresh_per_second=4, get_renderable=self._table)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, show_header=True, header_style="bold")
        for column in ("cell", "state", "step", "time"):
            table.add_column(column, overflow="ellipsis", no_wrap=True)
        with self._lock:
            rows = list(self._rows.items())
        for cell_id, row in rows:
            elapsed = (row.get("end") or time.monotonic()) - row["start"]
            cells = (cell_id, row["state"], row["step"][:70], f"{elapsed:5.0f}s")
            table.add_row(*(terminal.rich_text(c) for c in cells))
        return table

    def __enter__(self) -> LiveDisplay:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def start(self, cell_id: str) -> None:
        with self._lock:
            self._rows[cell_id] = {"state": "building", "step": "", "start": time.monotonic()}

    def line(self, cell_id: str, text: str, steps: StepLog) -> None:
        with self._lock:
            self._rows[cell_id]["step"] = steps.current

    def finish(self, cell_id: str, status: str) -> None:
        with self._lock:
            row = self._rows.setdefault(cell_id, {"start": time.monotonic(), "step": ""})
            row["state"], row["end"] = status, time.monotonic()

    def message(self, text: str) -> None:
        self._console.print(terminal.rich_text(text))


def make_display(mode: str) -> Display:
    if mode == "quiet":
        return QuietDisplay()
    if mode == "plain" or (mode == "auto" and (os.environ.get("CI") or not sys.stdout.isatty())):
        return PlainDisplay()
    return LiveDisplay()
