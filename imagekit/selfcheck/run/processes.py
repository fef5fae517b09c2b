"""Runs each probe in its own process with a time limit and records how it ended (the
judge, judge.py, decides what the run comes to).

Standard library only: this runs inside images before anything else is known to work.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from imagekit.contract.check_table import BY_NAME, ORDER, alone, limit
from imagekit.contract.checks import CheckResult, RecordError, failed
from imagekit.contract.host_snapshot import HostSnapshot

# The checks' processes fork from one server that imported torch once: a fresh interpreter's
# `import torch` costs 1.2-1.5 CPU seconds, a quarter of a CPU self-check's work on 2 cores.
PRELOAD = ("torch", "imagekit.selfcheck.run.child")
ENV_SPAWN = "IMAGEKIT_SELFCHECK_SPAWN"  # "1": a fresh interpreter per check, no fork server


def run_all(
    names: list[str],
    timeout: float | None,
    jobs: int,
    done: Callable[[str, CheckResult], None],
    gpu_host: bool = True,
    slowdown: float = 1,
    extra_s: Mapping[str, float] | None = None,
) -> dict[str, CheckResult]:
    """Functional checks side by side, then the ones that time something on this host
    (check_table.alone), one at a time; results come back in ORDER. `slowdown` raises each
    check's own limit (under emulation), never one given with --timeout; `extra_s` adds
    seconds to a check's limit (the perf probe's soak)."""
    results: dict[str, CheckResult] = {}
    more = extra_s or {}

    def one(name: str) -> None:
        own = limit(name, timeout) * (1 if timeout else slowdown)
        results[name] = run_check(name, own + more.get(name, 0.0))
        done(name, results[name])

    # The longest first (by limit), so the slowest check is not the last one started.
    parallel = sorted(
        (n for n in names if not alone(n, gpu_host)), key=lambda n: -BY_NAME[n].limit_s
    )
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, parallel))
    for name in names:
        if alone(name, gpu_host):
            one(name)
    return {n: results[n] for n in ORDER if n in results}


def jobs_for(host: HostSnapshot, requested: int) -> tuple[int, str]:
    """How many checks may run side by side: one at a time where a GPU admits one process
    (EXCLUSIVE_PROCESS) or none (PROHIBITED), or another process shares it, so the
    self-check's own parallelism never turns into a red; the reason when it is one."""
    from imagekit.selfcheck.verdicts.health import parallel_ok

    ok, why = parallel_ok(host)
    return (requested, "") if ok else (1, why)


def gpu_possible(host: HostSnapshot) -> bool:
    """Whether this host may have a GPU the checks run on: NVIDIA device nodes, a driver,
    GPUs NVML lists or GPUs asked for. Only a host with none of them runs the checks that
    time GPU work side by side."""
    container = host.container
    return bool(
        (container and (container.device_nodes or container.gpus_requested))
        or host.driver
        or host.gpus
    )


@functools.cache
def fork_server() -> Any:
    """The fork server context (torch imported once, PRELOAD), or None where there is none:
    not this platform's, or $IMAGEKIT_SELFCHECK_SPAWN=1. A torch that fails to import
    fails there quietly and again, reported, in the check."""
    if os.environ.get(ENV_SPAWN) == "1":
        return None
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def run_check(name: str, timeout: float) -> CheckResult:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"selfcheck-{name}-") as tmp:
        result_file = Path(tmp) / "result.json"
        forked = _run_forked(name, timeout, result_file, Path(tmp))
        if forked is not None:
            result, output = forked
        else:
            result, output = _run_spawned(name, timeout, result_file, tmp)
    result.name = name
    result.seconds = round(time.monotonic() - started, 2)
    result.log_tail = "\n".join(output.splitlines()[-20:])
    return result


def _run_forked(
    name: str, timeout: float, result_file: Path, tmp: Path
) -> tuple[CheckResult, str] | None:
    """The check in a process forked from the fork server; None where it cannot start (no
    server, or the server died: a crash importing torch), so a fresh interpreter runs it."""
    ctx = fork_server()
    if ctx is None:
        return None
    from imagekit.selfcheck.run import child

    log = tmp / "output.log"
    args = (name, str(result_file), str(tmp), str(log))
    proc = ctx.Process(target=child.forked, args=args, name=f"selfcheck-{name}")
    try:
        proc.start()
    except Exception:  # any failure of the server: run it the old way
        return None
    proc.join(timeout)
    timed_out = proc.exitcode is None
    if timed_out:
        _kill_group(proc)
        proc.join()
    output = log.read_text(errors="replace") if log.is_file() else ""
    result = _timed_out(timeout) if timed_out else _result(proc.exitcode, result_file, output)
    return result, output


def _kill_group(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # not yet its own session
        proc.kill()


def _timed_out(timeout: float) -> CheckResult:
    result = failed(
        f"timed out after {timeout:g}s and was killed (a hang, e.g. a "
        "collective that never completed)"
    )
    result.timed_out = True
    return result


def _run_spawned(name: str, timeout: float, result_file: Path, tmp: str) -> tuple[CheckResult, str]:
    """The check in a fresh interpreter (python -m imagekit.selfcheck.run.child)."""
    cmd = [sys.executable, "-m", "imagekit.selfcheck.run.child", name, str(result_file), tmp]
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
        return _result(proc.returncode, result_file, output), output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return _timed_out(timeout), output


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
