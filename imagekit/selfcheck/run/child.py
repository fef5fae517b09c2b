"""Runs one check in this process and writes its result: python -m imagekit.selfcheck.run.child
NAME RESULT_FILE WORKDIR, or `forked` from the runner's fork server (processes.py), which
has imported torch once for all the checks. Kept apart so a hang or a crash takes only this
process down."""

from __future__ import annotations

import json
import os
import sys
import traceback

from imagekit.contract.check_table import BY_NAME
from imagekit.contract.checks import failed
from imagekit.selfcheck.run.registry import PROBES


def run(name: str, result_file: str, workdir: str) -> None:
    check = BY_NAME[name]
    try:
        fn = PROBES[name]
        result = fn(workdir) if check.workdir else fn()
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        result = failed(f"{type(exc).__name__}: {exc}", traceback=tail)
    with open(result_file, "w", encoding="utf-8") as fh:
        json.dump(result.to_json(), fh, default=str)
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written: leave without the interpreter's teardown, where torch and NCCL
    # can abort (SIGABRT) and turn a written pass into a "crash" (probes/nodes.py does too).
    os._exit(0)


def forked(name: str, result_file: str, workdir: str, log: str) -> None:
    """A check in a process forked from the fork server: a session of its own (a timeout
    kills its group: DDP's ranks too) and its output, C++ libraries' included, in `log`."""
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    run(name, result_file, workdir)


def main() -> None:
    run(*sys.argv[1:4])


if __name__ == "__main__":
    main()
