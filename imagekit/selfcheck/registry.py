"""The self-check's checks as records: what runs, where it lives, its time limit, and whether
it measures speed (then it runs alone, after the others, so nothing else skews it).
Standard library only: `imagekit test` on the host reads the limits from here too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    target: str  # "module:function" inside imagekit.selfcheck
    limit_s: float  # killed and failed as a hang after this long
    workdir: bool = False  # the function takes a scratch directory
    exclusive: bool = False  # times something: runs alone, after the parallel ones


CHECKS: tuple[Check, ...] = (
    Check("stack", "stack:check_stack", 60),
    Check("amp", "training:check_amp", 120, exclusive=True),
    Check("checkpoint", "training:check_checkpoint", 60),
    Check("compile", "training:check_compile", 300),
    Check("ddp", "ddp:check_ddp", 150),
    Check("flash", "attention:check_flash", 90, exclusive=True),
    Check("onnx", "inference:check_onnx", 150, workdir=True),
    Check("int8", "inference:check_int8", 150, workdir=True),
    Check("tensorrt", "inference:check_tensorrt", 300, workdir=True),
    # Every GPU at once: GEMM, copy, memory pattern, host-to-device and peer copies.
    Check("perf", "perf:check_perf", 180, exclusive=True),
)
BY_NAME = {c.name: c for c in CHECKS}
# Judged from the snapshot, each with the probes whose readings it needs (NVML is read by
# the self-check's own process for every run).
VERDICTS: dict[str, tuple[str, ...]] = {
    "gpus": ("stack",),
    "health": (),
    "links": ("perf", "ddp"),
}
ORDER = (
    "stack",
    "gpus",
    "health",
    *(c.name for c in CHECKS if c.name != "stack"),
    "links",
)
STARTUP_S = 120  # a container's start and the report, beyond the checks themselves


def limit(name: str, override: float | None) -> float:
    if name not in BY_NAME:
        return 0.0  # a verdict runs no process of its own
    return override if override else BY_NAME[name].limit_s


def probes_for(names: list[str] | tuple[str, ...]) -> list[str]:
    """The probes to run for these checks, in ORDER: each probe asked for, and what each
    verdict asked for needs."""
    wanted = {n for n in names if n in BY_NAME}
    for name in names:
        wanted.update(VERDICTS.get(name, ()))
    return [n for n in ORDER if n in wanted]


def total_limit(names: list[str] | tuple[str, ...], override: float | None) -> float:
    """The longest a whole self-check may take: every check at its limit, run one by one."""
    return sum(limit(n, override) for n in probes_for(names)) + STARTUP_S
