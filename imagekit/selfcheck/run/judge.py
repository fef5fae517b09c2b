"""The self-check's verdict as a function of the host snapshot alone: a live run and
`--judge FILE` call the same `judge`, so both print the same table and exit the same way.

The hardware verdicts (gpus, health, perf, links; contract/check_table.py VERDICTS) are
computed here from the readings; the functional probes (amp, ddp, onnx, ...) ran code and
their recorded results are taken as they are; then the image's promises (--require and
its labels) are applied to them all, and the exit code follows. This module owns both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagekit.contract import exits
from imagekit.contract import labels as label
from imagekit.contract.check_table import ORDER, VERDICT_BY_NAME
from imagekit.contract.checks import CheckResult, Status
from imagekit.contract.host_snapshot import HostSnapshot
from imagekit.selfcheck.readers.snapshot import PERF_PROBE
from imagekit.selfcheck.run.registry import JUDGES

# What --require may name: each turns that check's skip into a failure.
REQUIREMENTS = ("gpu", "flash", "flash-attn", "onnx", "tensorrt", "compile")


def typed(snap: HostSnapshot | Mapping[str, Any]) -> HostSnapshot:
    """The snapshot as its typed record: a plain one (a live run's, a test's) is parsed here,
    once; a key of the wrong type is refused, naming it (RecordError)."""
    return snap if isinstance(snap, HostSnapshot) else HostSnapshot.from_json(snap)


def judge(
    snapshot: HostSnapshot | Mapping[str, Any], names: list[str] | None = None
) -> dict[str, CheckResult]:
    """Every check named (default: those the snapshot records, plus every verdict), in the
    order of the table, with the image's requirements applied."""
    snap = typed(snapshot)
    recorded = recorded_results(snap)
    chosen = names if names is not None else snap.selected or list(ORDER)
    out: dict[str, CheckResult] = {}
    for name in ORDER:
        if name not in chosen:
            continue
        if name in VERDICT_BY_NAME:
            out[name] = _verdict(name, snap, recorded, chosen)
        elif name in recorded:
            out[name] = recorded[name]
    apply_requirements(out, requirements(snap) - unprovable_promises(snap, out))
    return out


def unprovable_promises(snap: HostSnapshot, results: Mapping[str, CheckResult]) -> set[str]:
    """What the labels promise that this run cannot prove: a check whose probe crashed under
    emulation (emulated.unjudged_crash) stays skipped, as a GPU feature does on a CPU host;
    what --require names is still required."""
    asked = set(snap.require or [])
    return {
        name
        for name, result in results.items()
        if result.skipped and result.measurements.get("emulated_crash") and name not in asked
    }


def recorded_results(snap: HostSnapshot) -> dict[str, CheckResult]:
    """The probes' results as the snapshot holds them: copies, which the judge may change."""
    out = {}
    for name, held in (snap.checks or {}).items():
        result = CheckResult.from_json(held.to_json(), f"checks.{name}")
        result.name = name
        out[name] = result
    return out


def requirements(snap: HostSnapshot) -> set[str]:
    """What this run must not skip: --require, plus what the image's labels promise."""
    return required(set(snap.require or []), snap.labels or {}, gpu(snap))


def _verdict(
    name: str, snap: HostSnapshot, recorded: Mapping[str, CheckResult], chosen: list[str]
) -> CheckResult:
    """A verdict over the readings. Where its own probe crashed, timed out or could not run,
    that outcome stands (a probe that measured nothing is no pass); where a probe it needs
    failed (its own, or one the table does not show), the verdict fails with that reason:
    readings a failed probe left behind are no pass either."""
    probe = recorded.get(name)
    if name == PERF_PROBE and probe is not None and _probe_ended_early(probe):
        return probe
    result: CheckResult = JUDGES[name](snap)
    result.name = name
    result.seconds = probe.seconds if probe else 0.0
    result.timed_out = False
    result.log_tail = result.log_tail or (probe.log_tail if probe else "")
    failed_needs = [
        recorded[need]
        for need in VERDICT_BY_NAME[name].needs
        if need in recorded and recorded[need].failed and (need == name or need not in chosen)
    ]
    if failed_needs:
        reasons = [f"the {p.name} probe failed: {p.reason}" for p in failed_needs]
        result.status = Status.FAILED
        result.reason = "; ".join([*reasons, result.reason]).rstrip("; ")
    return result


def _probe_ended_early(probe: CheckResult) -> bool:
    if probe.skipped:
        return True
    return probe.failed and not probe.measurements.get("gpus")


def gpu(snap: HostSnapshot) -> bool:
    return bool(snap.torch and snap.torch.cuda_available)


def required(requested: set[str], labels: Mapping[str, str], gpu: bool) -> set[str]:
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


def apply_requirements(results: dict[str, CheckResult], need: set[str]) -> None:
    """Turn skips (and missing pieces) of required things into failures, saying why."""

    def fail(name: str, why: str) -> None:
        result = results.get(name)
        if result is not None and not result.failed:
            result.status = Status.FAILED
            result.reason = f"required ({why}); {result.reason}".rstrip("; ")

    def skipped(name: str) -> bool:
        return name in results and results[name].skipped

    def measured(name: str, key: str) -> Any:
        return results[name].measurements.get(key) if name in results else None

    if "gpu" in need and "stack" in results and not measured("stack", "gpu"):
        fail("stack", "gpu: no GPU is visible to torch")
    if "flash" in need and skipped("flash"):
        fail("flash", "flash")
    flash_pkg = str(measured("flash", "flash_attn_package") or "")
    if "flash-attn" in need and not flash_pkg[:1].isdigit():
        fail("flash", f"flash-attn: flash_attn package {flash_pkg or 'did not run'}")
    for name in ("onnx", "compile"):
        if name in need and skipped(name):
            fail(name, name)
    if "tensorrt" in need and skipped("tensorrt") and not measured("onnx", "tensorrt_ran"):
        fail("tensorrt", "tensorrt")


def exit_code(results: Mapping[str, CheckResult]) -> int:
    failed = any(r.failed for r in results.values())
    return exits.CHECK_FAILED if failed else exits.CHECK_PASSED
