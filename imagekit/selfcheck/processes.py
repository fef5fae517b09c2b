"""Runs each check in its own process with a time limit and decides the outcome.

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

from imagekit.contract import exits
from imagekit.contract import labels as label
from imagekit.selfcheck.registry import BY_NAME, ORDER, limit

REQUIREMENTS = ("gpu", "flash", "flash-attn", "onnx", "tensorrt", "compile")

__all__ = ["ORDER", "REQUIREMENTS", "run_all", "run_check"]


def run_all(
    names: list[str],
    timeout: float | None,
    jobs: int,
    done: Callable[[str, dict], None],  # type: ignore[type-arg]
) -> dict[str, dict[str, Any]]:
    """Functional checks side by side (each is mostly torch's import and start-up), then the
    ones that time something, one at a time; results come back in ORDER."""
    results: dict[str, dict[str, Any]] = {}

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


def run_check(name: str, timeout: float) -> dict[str, Any]:
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
            result = {
                "status": "failed",
                "timed_out": True,
                "measurements": {},
                "reason": f"timed out after {timeout:g}s and was killed (a hang, e.g. a "
                "collective that never completed)",
            }
    result["name"] = name
    result["seconds"] = round(time.monotonic() - started, 2)
    result.setdefault("timed_out", False)
    result["log_tail"] = "\n".join(output.splitlines()[-20:])
    return result


def _result(returncode: int, result_file: Path, output: str) -> dict[str, Any]:
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        return {
            "status": "failed",
            "measurements": {"signal": sig},
            "reason": f"crashed: killed by signal {sig} ({-returncode})",
        }
    if not result_file.is_file():
        tail = " | ".join(output.splitlines()[-3:])
        return {
            "status": "failed",
            "measurements": {},
            "reason": f"exited with {returncode} without a result: {tail}",
        }
    return dict(json.loads(result_file.read_text()))


def required(requested: set[str], labels: dict[str, str], gpu: bool) -> set[str]:
    """--require plus what the image's labels promise (features need a GPU to be proven)."""
    need = set(requested)
    features = set(filter(None, labels.get(label.FEATURES, "").split(",")))
    if "flash-attn" in features:
        need |= {"flash", "flash-attn"} if gpu else {"flash"}
    if "onnx" in features:
        need.add("onnx")
    if labels.get(label.COMPILE) == "true":
        need.add("compile")
    if "onnx-tensorrt" in features:
        need |= {"onnx", "tensorrt"} if gpu else {"onnx"}
    return need


def apply_requirements(results: dict[str, dict[str, Any]], need: set[str]) -> None:
    """Turn skips (and missing pieces) of required things into failures, saying why."""

    def fail(name: str, why: str) -> None:
        if name in results and results[name]["status"] != "failed":
            results[name]["status"] = "failed"
            results[name]["reason"] = f"required ({why}); {results[name].get('reason', '')}".rstrip(
                "; "
            )

    stack = results.get("stack", {}).get("measurements", {})
    if "gpu" in need and "stack" in results and not stack.get("gpu"):
        fail("stack", "gpu: no GPU is visible to torch")
    if "flash" in need and results.get("flash", {}).get("status") == "skipped":
        fail("flash", "flash")
    flash_pkg = str(results.get("flash", {}).get("measurements", {}).get("flash_attn_package", ""))
    if "flash-attn" in need and not flash_pkg[:1].isdigit():
        fail("flash", f"flash-attn: flash_attn package {flash_pkg or 'did not run'}")
    for name in ("onnx", "compile"):
        if name in need and results.get(name, {}).get("status") == "skipped":
            fail(name, name)
    ort_trt = results.get("onnx", {}).get("measurements", {}).get("tensorrt_ran")
    if (
        "tensorrt" in need
        and results.get("tensorrt", {}).get("status") == "skipped"
        and not ort_trt
    ):
        fail("tensorrt", "tensorrt")


def exit_code(results: dict[str, dict[str, Any]]) -> int:
    failed = any(r["status"] == "failed" for r in results.values())
    return exits.CHECK_FAILED if failed else exits.CHECK_PASSED
