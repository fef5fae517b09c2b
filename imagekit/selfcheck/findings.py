"""One finding about the host (a rule that was broken, worth a warning, or could not be
judged), and how a check's findings become its result. Pure data, standard library only:
every hardware verdict (gpus, health, perf, links) is a list of these over the host snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from imagekit.selfcheck.results import Result, failed, passed, skipped

FAIL, WARN, SKIP = "fail", "warn", "skip"


@dataclass(frozen=True)
class Finding:
    level: str  # FAIL, WARN or SKIP (a skip: the rule could not be judged, and why)
    rule: str  # a short stable id, e.g. "ecc-uncorrected", for reports and tests
    message: str  # a sentence with the GPU index, the reading and the rule
    gpu: int | None = None

    def text(self) -> str:
        return self.message if self.gpu is None else f"GPU {self.gpu}: {self.message}"


def fail(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(FAIL, rule, message, gpu)


def warn(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(WARN, rule, message, gpu)


def skip(rule: str, message: str, gpu: int | None = None) -> Finding:
    return Finding(SKIP, rule, message, gpu)


def result_of(findings: Iterable[Finding], judged: int, **measurements: Any) -> Result:
    """Failed when any rule failed; skipped when no rule could be judged at all (never a pass
    for what was not read); else passed. Warnings and skips are listed either way."""
    found = list(findings)
    by = {level: [f.text() for f in found if f.level == level] for level in (FAIL, WARN, SKIP)}
    m = dict(measurements)
    m["findings"] = [asdict(f) for f in found]
    if by[WARN]:
        m["warning"] = "; ".join(by[WARN])
    if by[FAIL]:
        return failed("; ".join(by[FAIL]), **m)
    if judged == 0:
        return skipped("; ".join(by[SKIP]) or "nothing to judge", **m)
    not_judged = "; ".join(f"not judged: {s}" for s in by[SKIP])
    return passed(not_judged, **m)
