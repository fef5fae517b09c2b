"""The self-check's checks as records, the one list of them: the probes (`CHECKS`: what
runs, where it lives, its time limit, whether it times something and so runs alone) and the
verdicts over the host snapshot (`VERDICTS`: where each lives and the probes whose readings
it needs). Standard library only: `imagekit test` on the host reads the limits from here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    target: str  # "module:function" inside imagekit.selfcheck
    limit_s: float  # killed and failed as a hang after this long
    workdir: bool = False  # the function takes a scratch directory
    exclusive: bool = False  # times something: runs alone, after the parallel ones
    # What it times on a host without GPUs too; the other exclusive ones time only GPU work
    # (amp's bf16 speed-up, NCCL's bus bandwidth, perf), so there they run side by side.
    times_cpu: bool = False


@dataclass(frozen=True)
class Verdict:
    name: str
    target: str  # "module:function" inside imagekit.selfcheck, over the snapshot
    needs: tuple[str, ...]  # the probes whose readings it judges (NVML is always read)


CHECKS: tuple[Check, ...] = (
    Check("stack", "stack:check_stack", 60),
    Check("amp", "training:check_amp", 120, exclusive=True),
    Check("checkpoint", "training:check_checkpoint", 60),
    Check("compile", "training:check_compile", 300),
    # Its NCCL all-reduce's bus bandwidth is judged against floors: alone, like the others
    # that time something.
    Check("ddp", "ddp:check_ddp", 150, exclusive=True),
    Check("flash", "attention:check_flash", 90, exclusive=True, times_cpu=True),
    Check("onnx", "inference:check_onnx", 150, workdir=True),
    Check("int8", "inference:check_int8", 150, workdir=True),
    Check("tensorrt", "inference:check_tensorrt", 300, workdir=True),
    # Every GPU at once: GEMM, copy, memory pattern, host-to-device and peer copies.
    Check("perf", "perf:check_perf", 180, exclusive=True),
)
BY_NAME = {c.name: c for c in CHECKS}
VERDICTS: tuple[Verdict, ...] = (
    Verdict("gpus", "health:check_gpus", ("stack",)),
    Verdict("health", "health:check_health", ()),
    Verdict("perf", "perf_verdict:check_perf_verdict", ("perf",)),
    Verdict("links", "links:check_links", ("perf", "ddp")),
)
VERDICT_BY_NAME = {v.name: v for v in VERDICTS}
ORDER = (
    "stack",
    "gpus",
    "health",
    *(c.name for c in CHECKS if c.name != "stack"),
    "links",
)
STARTUP_S = 120  # a container's start and the report, beyond the checks themselves


def alone(name: str, gpu_host: bool) -> bool:
    """Whether this check runs alone, after the side-by-side ones: it times something on
    this host (a host without GPUs times only the flash kernel's speed-up)."""
    check = BY_NAME[name]
    return check.exclusive and (gpu_host or check.times_cpu)


def limit(name: str, override: float | None) -> float:
    if name not in BY_NAME:
        return 0.0  # a verdict runs no process of its own
    return override if override else BY_NAME[name].limit_s


def probes_for(names: list[str] | tuple[str, ...]) -> list[str]:
    """The probes to run for these checks, in ORDER: each probe asked for, and what each
    verdict asked for needs."""
    wanted = {n for n in names if n in BY_NAME}
    for name in names:
        if name in VERDICT_BY_NAME:
            wanted.update(VERDICT_BY_NAME[name].needs)
    return [n for n in ORDER if n in wanted]


def total_limit(names: list[str] | tuple[str, ...], override: float | None) -> float:
    """The longest a whole self-check may take: every check at its limit, run one by one."""
    return sum(limit(n, override) for n in probes_for(names)) + STARTUP_S


def function_of(target: str) -> Callable[..., Any]:
    """The function a "module:function" target names, imported when asked (the host reads
    this registry without torch or the probes' modules)."""
    module, name = target.split(":")
    return getattr(importlib.import_module(f"imagekit.selfcheck.{module}"), name)  # type: ignore[no-any-return]
