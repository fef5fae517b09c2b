"""One finding about the host (a rule that was broken, worth a warning, or could not be
judged), and how a check's findings become its result. Pure data, standard library only:
every hardware verdict (gpus, health, perf, links) is a list of these over the host snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from imagekit.contract.checks import CheckResult, Status, failed, passed, skipped
from imagekit.contract.host_snapshot import Gpu
from imagekit.contract.records import or_default, or_none


@dataclass(frozen=True)
class Finding:
    level: Status  # FAILED, WARNED or SKIPPED (skipped: the rule could not be judged, and why)
    rule: str  # a short stable id, e.g. "ecc-uncorrected", for reports and tests
    message: str  # a sentence with the GPU index, the reading and the rule
    gpu: int | None = None

    def text(self) -> str:
        return self.message if self.gpu is None else f"GPU {self.gpu}: {self.message}"


def fail(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(Status.FAILED, rule, message, gpu)


def warn(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(Status.WARNED, rule, message, gpu)


def skip(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(Status.SKIPPED, rule, message, gpu)


def not_read(gpu: Gpu, key: str, rule: str, what: str) -> Finding:
    """The skip for a rule whose reading `key` is missing from one GPU's readings: NVML's
    reason where it gave one (for the key, or for the GPU's handle), else "not read"."""
    unread: Mapping[str, str] = gpu.unread or {}
    why = unread.get(key) or unread.get("handle")
    said = f"NVML said: {why}" if why else "not read"
    return skip(rule, f"{what} ({said})", or_none(gpu.index))


def name_of(gpu: Gpu) -> str:
    """The GPU's name as text, "" where it was not read (a null name reads "None")."""
    return str(or_default(gpu.name, ""))


def mig_skip(gpu: Gpu, rule: str, what: str) -> Finding:
    """A MIG slice's container reads the whole GPU's state, which is not the slice's own."""
    return skip(
        rule, f"MIG slice: {what} is read on the whole GPU, not judged here", or_none(gpu.index)
    )


def result_of(findings: Iterable[Finding], judged: int, **measurements: Any) -> CheckResult:
    """Failed when any rule failed; skipped when no rule could be judged at all (never a pass
    for what was not read); else passed. Warnings and skips are listed either way."""
    found = list(findings)
    by = {
        level: [f.text() for f in found if f.level == level]
        for level in (Status.FAILED, Status.WARNED, Status.SKIPPED)
    }
    m = dict(measurements)
    m["findings"] = [{**asdict(f), "level": f.level.value} for f in found]
    if by[Status.WARNED]:
        m["warning"] = "; ".join(by[Status.WARNED])
    if by[Status.FAILED]:
        return failed("; ".join(by[Status.FAILED]), **m)
    if judged == 0:
        return skipped("; ".join(by[Status.SKIPPED]) or "nothing to judge", **m)
    not_judged = "; ".join(f"not judged: {s}" for s in by[Status.SKIPPED])
    return passed(not_judged, **m)
