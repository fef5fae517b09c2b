"""A self-check's result, one record for every side: each probe returns it, the runner and
the judge complete it, the report writes it as JSON, and the host (`imagekit test`, the
stamp, `imagekit launch`'s preflight drain) reads it back with `CheckResult.from_json`.

Also here: the one vocabulary of outcomes (`Status`: a check's result is passed, failed or
skipped; one finding of a verdict is failed, warned or skipped) and the environment the
host sets for the self-check in the image. Standard library only (it runs in the image).
The JSON form is documented in docs/host-snapshot.md ("A check's result").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """How a check, or one finding of a verdict, came out; the value is what JSON holds."""

    PASSED = "passed"  # a result: the check ran and every rule it judged held
    FAILED = "failed"  # a result or a finding: a rule was broken, or the probe crashed/hung
    SKIPPED = "skipped"  # a result or a finding: nothing could be judged, and why
    WARNED = "warned"  # a finding only: worth reading, not a failure


RESULT_STATUSES = (Status.PASSED, Status.FAILED, Status.SKIPPED)
# The same words as plain strings, for the multi-node check's verdict (probes/nodes.py),
# which contract/multinode.py carries as JSON.
PASSED, FAILED = Status.PASSED.value, Status.FAILED.value


class RecordError(ValueError):
    """A result read from JSON that is not one: names the field, the value and what fits."""


@dataclass
class CheckResult:
    status: Status
    reason: str = ""  # why it failed or was skipped; notes on a pass ("not judged: ...")
    measurements: dict[str, Any] = field(default_factory=dict)  # figures, units in the key
    name: str = ""  # the check's name in the registry; set by the runner or the judge
    seconds: float = 0.0  # wall time of the probe's process (0 for a pure verdict)
    timed_out: bool = False  # killed at its time limit (then status is failed)
    log_tail: str = ""  # the last lines the probe printed

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED

    @property
    def skipped(self) -> bool:
        return self.status is Status.SKIPPED

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason,
            "measurements": self.measurements,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "log_tail": self.log_tail,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "result") -> CheckResult:
        """A result from its JSON form; only `status` is required (a hand-written or older
        file may leave out the runner's bookkeeping)."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
        status = data.get("status")
        if status not in {s.value for s in RESULT_STATUSES}:
            allowed = ", ".join(s.value for s in RESULT_STATUSES)
            raise RecordError(f"{where}.status: {status!r} is not a result status ({allowed})")
        measurements = data.get("measurements") or {}
        if not isinstance(measurements, Mapping):
            raise RecordError(f"{where}.measurements: expected an object")
        seconds = data.get("seconds") or 0.0
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise RecordError(f"{where}.seconds: {seconds!r} is not a number of seconds")
        timed_out = data.get("timed_out", False)
        if not isinstance(timed_out, bool):
            raise RecordError(f"{where}.timed_out: {timed_out!r} is not true or false")
        return cls(
            status=Status(status),
            reason=str(data.get("reason") or ""),
            measurements=dict(measurements),
            name=str(data.get("name") or ""),
            seconds=float(seconds),
            timed_out=timed_out,
            log_tail=str(data.get("log_tail") or ""),
        )


def passed(reason: str = "", **measurements: Any) -> CheckResult:
    return CheckResult(Status.PASSED, reason, measurements)


def failed(reason: str, **measurements: Any) -> CheckResult:
    return CheckResult(Status.FAILED, reason, measurements)


def skipped(reason: str, **measurements: Any) -> CheckResult:
    return CheckResult(Status.SKIPPED, reason, measurements)


def verdict(problems: list[str], **measurements: Any) -> CheckResult:
    return failed("; ".join(problems), **measurements) if problems else passed(**measurements)


def results_from_report(report: object) -> list[CheckResult]:
    """The `checks` of a self-check's JSON report (report.to_json), each as a record."""
    if not isinstance(report, Mapping):
        raise RecordError(f"report: expected an object, got {type(report).__name__}")
    checks = report.get("checks") or []
    if not isinstance(checks, list):
        raise RecordError("checks: expected a list of results")
    return [CheckResult.from_json(c, f"checks[{i}]") for i, c in enumerate(checks)]


# -- the environment the host sets for the self-check in the image ---------------------------
# `imagekit test` (imagetest/image.py) sets these; the self-check reads them.
ENV_LABELS = "IMAGEKIT_LABELS"  # JSON object: the image's real labels, over the baked copy
# The GPUs the container was given: "none" (not asked for), "all" (given, count not fixed:
# torch must see at least one), or N (torch, NVML and the device nodes must all see N).
ENV_GPUS = "IMAGEKIT_GPUS"
GPUS_NONE, GPUS_ALL = "none", "all"
ENV_PROFILE = "IMAGEKIT_PROFILE"  # the launch profile (matrix/profiles.py), over the label
ENV_TIMEOUT = "IMAGEKIT_SELFCHECK_TIMEOUT"  # seconds per check, over each check's own limit
ENV_FAULT = "IMAGEKIT_SELFCHECK_FAULT"  # comma list of faults, for the runner's own tests
# Set by `imagekit test` where the image's platform is not the host's (QEMU user emulation).
ENV_EMULATED = "IMAGEKIT_EMULATED"
# How much longer a check may take under emulation: QEMU ran this project's arm64 steps
# 2-8x slower than native on two x86-64 cores (docs/benchmarks.md, arm64), torch's first
# compile slower still; the limits are for hangs, not for speed.
EMULATED_SLOWDOWN = 10


def gpus_value(given: bool, count: int | None) -> str:
    """What the host writes into ENV_GPUS."""
    if not given:
        return GPUS_NONE
    return GPUS_ALL if count is None else str(count)


def gpus_given(env: Mapping[str, str]) -> tuple[bool, int | None]:
    """(were GPUs given, how many) from ENV_GPUS; unset or unreadable is (False, None)."""
    raw = env.get(ENV_GPUS, GPUS_NONE).strip()
    if raw == GPUS_ALL:
        return True, None
    if raw.isdigit() and int(raw) > 0:
        return True, int(raw)
    return False, None  # "none", "0" (as `--gpus 0` is `--gpus none`), or unreadable
