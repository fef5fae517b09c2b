"""Runs one check in this process and writes its result: python -m imagekit.selfcheck.child
NAME RESULT_FILE WORKDIR. Kept apart so a hang or a crash takes only this process down."""

from __future__ import annotations

import json
import os
import sys
import traceback

from imagekit.contract.checks import failed
from imagekit.selfcheck.registry import BY_NAME, function_of


def main() -> None:
    name, result_file, workdir = sys.argv[1:4]
    check = BY_NAME[name]
    try:
        fn = function_of(check.target)
        result = fn(workdir) if check.workdir else fn()
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        result = failed(f"{type(exc).__name__}: {exc}", traceback=tail)
    with open(result_file, "w", encoding="utf-8") as fh:
        json.dump(result.to_json(), fh, default=str)
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written: leave without the interpreter's teardown, where torch and NCCL
    # can abort (SIGABRT) and turn a written pass into a "crash" (nodes_check.py does too).
    os._exit(0)


if __name__ == "__main__":
    main()
