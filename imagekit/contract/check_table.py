"""The self-check's checks and verdicts by name: their order, time limits, which run alone
and which probes each verdict needs. Standard library only: `imagekit test` and launch
files read the names and limits here; the image binds each name to its function
(selfcheck/run/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """A probe: code that runs in a process of its own and measures something."""

    name: str
    limit_s: float  # killed and failed as a hang after this long
    workdir: bool = False  # the function takes a scratch directory
    exclusive: bool = False  # times something: runs alone, after the parallel ones
    # What it times on a host without GPUs too; the other exclusive ones time only GPU work
    # (amp's bf16 speed-up, NCCL's bus bandwidth, perf), so there they run side by side.
    times_cpu: bool = False


@dataclass(frozen=True)
class Verdict:
    """A verdict: a pure function over the host snapshot, run in no process of its own."""

    name: str
    needs: tuple[str, ...]  # the probes whose readings it judges (NVML is always read)


CHECKS: tuple[Check, ...] = (
    Check("stack", 60),
    Check("amp", 120, exclusive=True),
    Check("checkpoint", 60),
    Check("compile", 300),
    # Its NCCL all-reduce's bus bandwidth is judged against floors: alone, like the others
    # that time something.
    Check("ddp", 150, exclusive=True),
    Check("flash", 90, exclusive=True, times_cpu=True),
    Check("onnx", 150, workdir=True),
    Check("int8", 150, workdir=True),
    Check("tensorrt", 300, workdir=True),
    # Every GPU at once: GEMM, copy, memory pattern, host-to-device and peer copies.
    Check("perf", 180, exclusive=True),
)
BY_NAME = {c.name: c for c in CHECKS}
VERDICTS: tuple[Verdict, ...] = (
    Verdict("gpus", ("stack",)),
    Verdict("health", ()),
    Verdict("perf", ("perf",)),
    Verdict("links", ("perf", "ddp")),
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
