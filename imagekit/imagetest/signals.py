"""Signals during a multi-node run: SIGTERM and SIGHUP unwind like Ctrl-C while the nodes
run, and every signal is ignored while their containers are removed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a CI cancel, a closed terminal): unwinds like Ctrl-C, so every
    `finally` on the way out runs and the containers go."""


def _raise(signum: int, frame: Any) -> None:
    raise Terminated(f"signal {signal.Signals(signum).name}")


@contextmanager
def signals_raise() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; the caller's own handling applies
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for sig in previous:
        signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """A second Ctrl-C while removing the containers would leave them behind: ignore it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
