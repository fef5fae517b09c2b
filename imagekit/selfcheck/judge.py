"""The self-check's verdict as a function of the host snapshot alone: a live run and
`--judge FILE` call the same `judge`, so both print the same table and exit the same way.

The hardware verdicts (gpus, health, perf, links) are computed here from the readings; the
functional checks (amp, ddp, onnx, ...) ran code and their recorded results are taken as
they are, then the image's promises (--require and its labels) are applied to them all.
"""

from __future__ import annotations

from collections.abc import Callable

from imagekit.selfcheck import health, links, perf_verdict, processes
from imagekit.selfcheck.registry import ORDER
from imagekit.selfcheck.results import Result
from imagekit.selfcheck.snapshot import PERF_PROBE, Snapshot

VERDICTS: dict[str, Callable[[Snapshot], Result]] = {
    "gpus": health.check_gpus,
    "health": health.check_health,
    "perf": perf_verdict.check_perf_verdict,
    "links": links.check_links,
}


def judge(snap: Snapshot, names: list[str] | None = None) -> dict[str, Result]:
    """Every check named (default: those the snapshot records, plus every verdict), in the
    order of the table, with the image's requirements applied."""
    recorded: dict[str, Result] = dict(snap.get("checks", {}))
    chosen = names if names is not None else snap.get("selected") or list(ORDER)
    out: dict[str, Result] = {}
    for name in ORDER:
        if name not in chosen:
            continue
        if name in VERDICTS:
            out[name] = _verdict(name, snap, recorded.get(name))
        elif name in recorded:
            # A hand-written or older snapshot may leave out the runner's bookkeeping.
            out[name] = {"seconds": 0.0, "timed_out": False, **recorded[name], "name": name}
    processes.apply_requirements(out, requirements(snap))
    return out


def requirements(snap: Snapshot) -> set[str]:
    """What this run must not skip: --require, plus what the image's labels promise."""
    return processes.required(set(snap.get("require", [])), snap.get("labels", {}), gpu(snap))


def _verdict(name: str, snap: Snapshot, probe: Result | None) -> Result:
    """A verdict over the readings; where its own probe crashed, timed out or could not run,
    that outcome stands (a probe that measured nothing is no pass)."""
    if name == PERF_PROBE and probe is not None and _probe_ended_early(probe):
        return dict(probe)
    result = VERDICTS[name](snap)
    result["name"] = name
    result["seconds"] = float(probe["seconds"]) if probe else 0.0
    result["timed_out"] = False
    result.setdefault("log_tail", probe.get("log_tail", "") if probe else "")
    return result


def _probe_ended_early(probe: Result) -> bool:
    if probe.get("status") == "skipped":
        return True
    return probe.get("status") == "failed" and not probe.get("measurements", {}).get("gpus")


def gpu(snap: Snapshot) -> bool:
    return bool(snap.get("torch", {}).get("cuda_available"))
