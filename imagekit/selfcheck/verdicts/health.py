"""Hardware verdicts over the host snapshot: do the GPU counts agree, and is each GPU healthy
(memory errors, PCIe and NVLink links, compute mode, clocks during the perf measurements,
other processes)? Pure functions over the typed host snapshot (contract/host_snapshot.py);
nvml.py reads what they judge. The rules over one GPU are gpu_rules.py's; here they run over
every GPU, beside the count rules and whether the checks may run side by side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from imagekit.contract.checks import CheckResult
from imagekit.contract.host_snapshot import HostSnapshot
from imagekit.contract.records import given, or_default, or_none
from imagekit.selfcheck.verdicts.devices import PCI_ORDER, parse_visible, resolve_visible
from imagekit.selfcheck.verdicts.findings import Finding, fail, result_of, skip
from imagekit.selfcheck.verdicts.gpu_rules import EXCLUSIVE, Gpu, Judged, judge_gpu, pid_list

_ID = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+")


# -- how many GPUs ------------------------------------------------------------------------


def visible_count(value: str | None) -> int | None:
    """How many GPUs $NVIDIA_VISIBLE_DEVICES names: a list of indices or UUIDs counts; "all",
    unset, or a path (the device plugin's volume-mounts strategy) count nothing; "none" and
    "void" give none."""
    if value is None or not value.strip() or value.strip().lower() == "all":
        return None
    if value.strip().lower() in ("none", "void"):
        return 0
    items = [item.strip() for item in value.split(",") if item.strip()]
    return len(items) if all(_ID.fullmatch(item) for item in items) else None


def _is_mig(snapshot: HostSnapshot) -> bool:
    visible = (snapshot.container and snapshot.container.visible_devices) or ""
    gpus = snapshot.gpus or []
    return "MIG-" in visible.upper() or any(g.mig_mode for g in gpus)


def gpu_counts(snapshot: HostSnapshot) -> tuple[dict[str, int], list[Finding]]:
    """Each source's GPU count, and a skip for each source that was not read."""
    counts: dict[str, int] = {}
    skips: list[Finding] = []
    torch, container, nvml = snapshot.torch, snapshot.container, snapshot.nvml
    if not given(torch):
        skips.append(skip("gpu-count", "torch's GPU count was not read"))
    elif not torch.cuda_available:
        skips.append(skip("gpu-count", "torch sees no CUDA device (the stack check says why)"))
    elif _cuda_limits(snapshot):
        cvd = container.cuda_visible_devices
        skips.append(skip("gpu-count", f"CUDA_VISIBLE_DEVICES={cvd} limits what torch sees"))
    else:
        counts["torch"] = int(or_default(torch.device_count, 0))
    if not given(nvml):
        skips.append(skip("gpu-count", "NVML was not read"))
    elif not nvml.available:
        skips.append(skip("gpu-count", f"NVML: {nvml.reason or 'unavailable'}"))
    else:
        counts["NVML"] = int(or_default(nvml.device_count, 0))  # type: ignore[arg-type]
    if not given(container):
        skips.append(skip("gpu-count", "the container's devices were not read"))
    else:
        counts["/dev/nvidia*"] = len(container.device_nodes or [])
        visible = visible_count(or_none(container.visible_devices))
        if visible is not None:
            counts["NVIDIA_VISIBLE_DEVICES"] = visible
    expected = or_none(snapshot.expected_gpus)
    if expected is not None:
        counts["expected"] = int(expected)
    return counts, skips


def _cuda_limits(snapshot: HostSnapshot) -> bool:
    """Whether $CUDA_VISIBLE_DEVICES (as CUDA reads it) may hide some of NVML's GPUs from
    torch; a value that names every GPU of the container, in any order, hides none."""
    container = snapshot.container
    value = or_none(container.cuda_visible_devices) if container else None
    if value is None:
        return False
    entries = parse_visible(value) or []
    if any(isinstance(e, str) and e.startswith("MIG-") for e in entries):
        return True  # torch counts slices
    gpus = [g for g in snapshot.gpus or [] if isinstance(g.index, int)]
    whole = sorted(g.index for g in gpus)
    own_order = len(whole) > 1 and or_none(container.cuda_device_order) != PCI_ORDER
    if not whole or (own_order and any(isinstance(e, int) for e in entries)):
        return True  # nothing to resolve it against, or indices in CUDA's own order
    return sorted(resolve_visible(entries, gpus)) != whole


def unmatched_findings(snapshot: HostSnapshot) -> list[Finding]:
    """The perf probe's readings of a torch device that matched no NVML GPU (by UUID): they
    are put on no GPU (docs/host-snapshot.md), and said so here."""
    perf = (snapshot.checks or {}).get("perf")
    measured = (perf.measurements.get("gpus") if perf else None) or []
    return [
        skip(
            "gpu-match",
            f"torch device {m.get('torch_index')} (UUID {m.get('torch_uuid') or 'not read'}) "
            f"is no GPU NVML read, so its perf readings are on none: {m['unmatched']}",
        )
        for m in measured
        if isinstance(m, Mapping) and m.get("unmatched")
    ]


def count_findings(snapshot: HostSnapshot) -> Judged:
    """torch, NVML, the container's device nodes, $NVIDIA_VISIBLE_DEVICES and --expect-gpus
    must agree on the number of GPUs. On a MIG host torch and a MIG-UUID list count slices,
    NVML and /dev/nvidia* whole GPUs: each side is compared within itself."""
    counts, found = gpu_counts(snapshot)
    if not any(counts.values()):
        return [*found, skip("gpu-count", "no GPU on this host")], 0
    groups = [counts]
    if _is_mig(snapshot):
        slices = ("torch", "expected", "NVIDIA_VISIBLE_DEVICES")
        groups = [
            {k: v for k, v in counts.items() if k in slices},
            {k: v for k, v in counts.items() if k not in slices},
        ]
    judged = 0
    for group in groups:
        if len(group) < 2:
            continue
        judged += 1
        if len(set(group.values())) > 1:
            found.append(fail("gpu-count", _count_message(group)))
    if not judged:
        found.append(skip("gpu-count", f"only one GPU count to compare: {_listed(counts)}"))
    return found, judged


def _listed(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{source} {n}" for source, n in counts.items())


def _count_message(counts: Mapping[str, int]) -> str:
    return (
        f"the GPU counts disagree: {_listed(counts)}. A GPU that NVML or torch does not see "
        "has fallen off the bus or failed to start (look for Xid 79 in the host's kernel "
        "log, then nvidia-smi); a container given other GPUs than expected was started with "
        "the wrong --gpus or device request"
    )


def gpu_findings(gpu: Gpu, peers: int = 0) -> list[Finding]:
    """Every health rule over one GPU's readings. `peers`: the other GPUs of the snapshot
    (whether NVLinks have something to link to)."""
    return judge_gpu(gpu, peers)[0]


def health_findings(snapshot: HostSnapshot) -> Judged:
    gpus = snapshot.gpus
    if not gpus:
        nvml = snapshot.nvml
        read = given(nvml) and bool(nvml.to_json())  # an empty reading is none, as {} was
        why = or_none(nvml.reason) if read and not nvml.available else "no GPU was read"
        return [skip("gpu-health", f"no GPU readings: {why}")], 0
    found: list[Finding] = []
    judged = 0
    for gpu in gpus:
        more, n = judge_gpu(gpu, len(gpus) - 1, or_none(snapshot.run_seconds))
        found += more
        judged += n
    return found, judged


# -- results and scheduling -----------------------------------------------------------------


def check_gpus(snapshot: HostSnapshot) -> CheckResult:
    found, judged = count_findings(snapshot)
    counts, _ = gpu_counts(snapshot)
    return result_of(found + unmatched_findings(snapshot), judged, counts=counts)


def check_health(snapshot: HostSnapshot) -> CheckResult:
    found, judged = health_findings(snapshot)
    m: dict[str, Any] = {"gpus": len(snapshot.gpus or [])}
    exclusive = _exclusive(snapshot)
    if exclusive:
        m["note"] = f"{exclusive}: the self-check runs its GPU checks one at a time"
    return result_of(found, judged, **m)


def _exclusive(snapshot: HostSnapshot) -> str:
    modes = [
        f"GPU {or_none(g.index)} is {g.compute_mode}"
        for g in snapshot.gpus or []
        if g.compute_mode in (*EXCLUSIVE, "PROHIBITED")
    ]
    return "; ".join(modes)


def parallel_ok(snapshot: HostSnapshot) -> tuple[bool, str]:
    """Whether the self-check may run its CUDA checks side by side: not where a GPU takes one
    process at a time (EXCLUSIVE_*), none (PROHIBITED), or is shared with another process."""
    exclusive = _exclusive(snapshot)
    if exclusive:
        return False, exclusive
    busy = [
        f"GPU {or_none(g.index)} is in use by pid {pid_list(g.processes)}"
        for g in snapshot.gpus or []
        if g.processes
    ]
    if busy:
        return False, "; ".join(busy)
    return True, ""
