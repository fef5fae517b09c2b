"""Runs each probe in its own process with a time limit and records how it ended (the
judge, judge.py, decides what the run comes to).

Standard library only: this runs inside images before anything else is known to work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from imagekit.contract.checks import CheckResult, RecordError, failed
from imagekit.selfcheck.registry import BY_NAME, ORDER, limit


def run_all(
    names: list[str],
    timeout: float | None,
    jobs: int,
    done: Callable[[str, CheckResult], None],
) -> dict[str, CheckResult]:
    """Functional checks side by side (each is mostly torch's import and start-up), then the
    ones that time something, one at a time; results come back in ORDER."""
    results: dict[str, CheckResult] = {}

    def one(name: str) -> None:
        results[name] = run_check(name, limit(name, timeout))
        done(name, results[name])

    # The longest first (by limit), so the slowest check is not the last one started.
    parallel = sorted(
        (n for n in names if not BY_NAME[n].exclusive), key=lambda n: -BY_NAME[n].limit_s
    )
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, parallel))
    for name in names:
        if BY_NAME[name].exclusive:
            one(name)
    return {n: results[n] for n in ORDER if n in results}


def jobs_for(host: dict[str, Any], requested: int) -> tuple[int, str]:
    """How many checks may run side by side: one at a time where a GPU admits one process
    (EXCLUSIVE_PROCESS) or none (PROHIBITED), or another process shares it, so the
    self-check's own parallelism never turns into a red; the reason when it is one."""
    from imagekit.selfcheck.health import parallel_ok

    ok, why = parallel_ok(host)
    return (requested, "") if ok else (1, why)


def run_check(name: str, timeout: float) -> CheckResult:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"selfcheck-{name}-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "imagekit.selfcheck.child", name, str(result_file), tmp]
        # A new session: on timeout the whole group goes (DDP's rank processes too).
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            errors="replace",
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
            result = _result(proc.returncode, result_file, output)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            result = failed(
                f"timed out after {timeout:g}s and was killed (a hang, e.g. a "
                "collective that never completed)"
            )
            result.timed_out = True
    result.name = name
    result.seconds = round(time.monotonic() - started, 2)
    result.log_tail = "\n".join(output.splitlines()[-20:])
    return result


def _result(returncode: int, result_file: Path, output: str) -> CheckResult:
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:  # a real-time or unnamed signal
            sig = f"signal {-returncode}"
        return failed(f"crashed: killed by signal {sig} ({-returncode})", signal=sig)
    if not result_file.is_file():
        tail = " | ".join(output.splitlines()[-3:])
        return failed(f"exited with {returncode} without a result: {tail}")
    try:
        return CheckResult.from_json(json.loads(result_file.read_text()))
    except (ValueError, RecordError) as exc:
        return failed(f"wrote a result that is not one: {exc}")
