"""The host snapshot: every reading the self-check's verdicts use, gathered once into plain
JSON (docs/host-snapshot.md). A live run reads the host, runs the probes, assembles the
snapshot and judges it (judge.py); `--judge FILE` judges a recorded one the same way.

Standard library only. The readers here are thin; NVML is read through nvml.py, the CPU
through int8.py, the NUMA layout through numa.py, each of which fails soft (a reading that
cannot be taken is left out, with the reason, and its rule is then skipped, never passed).
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from imagekit import __version__
from imagekit.contract import labels as label
from imagekit.contract.checks import ENV_PROFILE, CheckResult, RecordError, gpus_given
from imagekit.contract.host_snapshot import FORMAT, HostSnapshot
from imagekit.selfcheck.readers import container, numa
from imagekit.selfcheck.readers.promises import labels
from imagekit.selfcheck.verdicts import devices

# The host snapshot as plain JSON, as assembled here and written (docs/host-snapshot.md); the
# verdicts judge its typed record, contract/host_snapshot.py's HostSnapshot.
Snapshot = dict[str, Any]
# Probes whose measurements become snapshot readings rather than a row of the table.
PERF_PROBE = "perf"
# Measurements of the perf probe kept per GPU (the rest of a GPU's keys come from NVML).
GPU_MEASURED = (
    "gemm_bf16_tflops",
    "gemm_dtype",
    "copy_tbps",
    "memtest",
    "h2d_gbps",
    "d2h_gbps",
    "host_copy_settled",
    "clock_event_reasons",
    "clock_event_counts",
    "pcie_gen_under_load",
    "pcie_width_under_load",
    "power_max_w",
    "temperature_max_c",
    "power_limit_w",
    "power_default_limit_w",
    "temperature_slowdown_c",
    "soak",
    "clock_samples",
    "perf_error",
    "name",
    "memory_total_mib",
    "torch_index",
    "torch_uuid",
    "matched_by",
    "gpu_lost",
    "gpu_reset_required",
)


def read_host(expect_gpus: int | None, require: str = "") -> Snapshot:
    """What the parent process reads before any check runs: no torch, no CUDA context (a
    context here would block the checks under the EXCLUSIVE_PROCESS compute mode)."""
    from imagekit.selfcheck.readers import nvml

    host = container.read_container()
    promised = labels()
    nvml_status, gpus = nvml.read_nvml()
    return {
        "format": FORMAT,
        "imagekit": __version__,
        "taken_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "expected_gpus": expect_gpus,
        "container": {
            "device_nodes": list(host.device_nodes),
            "visible_devices": host.visible_devices,
            "gpus_requested": host.gpus_requested,
            "cuda_visible_devices": host.cuda_visible_devices,
            "cuda_device_order": host.cuda_device_order,
            "imex_channels": _listed(host.imex_channels),
        },
        "cpu": _cpu(),
        "numa": numa.read_numa(),
        "driver": host.driver,
        "nvml": nvml_status,
        "gpus": gpus,
        "profile": os.environ.get(ENV_PROFILE) or promised.get(label.PROFILE),
        "labels": promised,
        "require": sorted(filter(None, require.split(","))),
    }


def _listed(names: tuple[str, ...] | None) -> list[str] | None:
    return None if names is None else list(names)


def _cpu() -> dict[str, Any]:
    """/proc/cpuinfo's model and flags, the machine this process runs as, and whether it is
    emulated (emulated.emulation: "" natively)."""
    from imagekit.selfcheck.readers import cpuinfo
    from imagekit.selfcheck.verdicts import emulated

    cpu = cpuinfo.read_cpu()
    machine = platform.machine()
    found = emulated.emulation(
        machine, cpu.get("flags") or (), os.environ, cpu.get("implementer", "")
    )
    return {**cpu, "machine": machine, "emulated": found}


def nvml_again(host: Snapshot) -> Snapshot:
    """NVML read once more after the probes: error counters, row remaps and retired pages
    that the memory test itself brought out belong to this verdict, not the next one. A GPU
    the first reading found lost (or needing a reset) stays marked so."""
    from imagekit.selfcheck.readers import nvml, nvml_calls

    status, gpus = nvml.read_nvml()
    if not status.get("available"):
        return host
    before = {g.get("index"): g for g in host.get("gpus") or []}
    for gpu in gpus:
        first = before.get(gpu.get("index"), {})
        for key in nvml_calls.FAULT_KEYS:  # a GPU found gone or unusable stays marked
            if key in first:
                gpu.setdefault(key, first[key])
        if isinstance(first.get("pcie_replays"), int) and isinstance(gpu.get("pcie_replays"), int):
            gpu["pcie_replays_during_run"] = gpu["pcie_replays"] - first["pcie_replays"]
    return {**host, "nvml": status, "gpus": gpus, "run_seconds": _since(host.get("taken_at"))}


def _since(taken_at: Any) -> int | None:
    """Whole seconds from the first reading (`taken_at`) to now; None where it is unreadable."""
    try:
        start = datetime.fromisoformat(str(taken_at))
    except ValueError:
        return None
    return max(0, round((datetime.now(timezone.utc) - start).total_seconds()))


def with_xids(snap: Snapshot, readings: Mapping[int, dict[str, Any]]) -> Snapshot:
    """The Xid watch's readings (nvml_counters.XidWatch.stop) merged into each GPU by NVML's
    index; key -1 (NVML or its event set could not be had) concerns every GPU."""
    from imagekit.selfcheck.readers import clock_sampler

    gpus = snap.get("gpus") or []
    every = readings.get(-1, {})
    clock_sampler.merge_readings(
        gpus, {g.get("index"): readings.get(g.get("index"), every) for g in gpus}
    )
    return snap


def assemble(host: Snapshot, results: Mapping[str, CheckResult]) -> Snapshot:
    """The host readings plus what the probes measured: the perf probe's per-GPU figures
    merged into each GPU by index, torch's view from the stack check, NCCL's from ddp; every
    check's own result is kept under `checks`."""
    snap = dict(host)
    snap["torch"] = _torch_view(results.get("stack"))
    perf = _measured(results.get(PERF_PROBE))
    snap["gpus"] = merge_gpus(host.get("gpus", []), perf.get("gpus", []))
    for key in ("p2p", "host_copies", "soak_s"):
        if key in perf:
            snap[key] = perf[key]
    nccl = _nccl_view(results.get("ddp"))
    if nccl:
        snap["nccl"] = nccl
    snap["checks"] = {name: result.to_json() for name, result in results.items()}
    return snap


def _measured(result: CheckResult | None) -> dict[str, Any]:
    return result.measurements if result is not None else {}


# Where NVML and torch both name a GPU, NVML's reading is kept (torch only fills in for it).
NVML_WINS = ("name", "memory_total_mib")


def merge_gpus(nvml_gpus: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[dict]:  # type: ignore[type-arg]
    """One dict per NVML GPU: NVML's readings, then the perf probe's measurements of that
    GPU (gpu_of_reading says which). A reading of no GPU stays only in the perf check's own
    measurements, with its reason. A GPU that only torch saw (NVML read none) still gets its
    measurements."""
    by_index: dict[int, dict[str, Any]] = {int(g["index"]): dict(g) for g in nvml_gpus}
    for reading in measured:
        index = gpu_of_reading(reading, nvml_gpus)
        if index is None:
            continue
        gpu = by_index.setdefault(index, {"index": index})
        for key in GPU_MEASURED:
            if key in reading and not (key in gpu and key in NVML_WINS):
                gpu[key] = reading[key]
        if reading.get("unread"):
            gpu["unread"] = {**gpu.get("unread", {}), **reading["unread"]}
    return [by_index[i] for i in sorted(by_index)]


def gpu_of_reading(reading: Mapping[str, Any], nvml_gpus: list[dict[str, Any]]) -> int | None:
    """NVML's index of the GPU a perf reading was measured on: the GPU whose UUID (or a MIG
    device's) is the one torch gave (`torch_uuid`); else the `index` the probe matched it to
    (by UUID against its own NVML reading, or by position: see devices.match_devices). A
    reading from before UUIDs were recorded has torch's index there, which is NVML's under
    CUDA_DEVICE_ORDER=PCI_BUS_ID with every GPU visible (the old convention). None for a
    reading the probe matched to no GPU (`unmatched`), and for one numbered only as torch
    numbers it while NVML did read GPUs here."""
    uuid = reading.get("torch_uuid")
    if uuid and nvml_gpus:
        found = devices.match_devices([uuid], nvml_gpus)[0].index
        if found is not None:
            return found
    index = reading.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        return None
    if reading.get("matched_by") == "torch" and nvml_gpus:
        return None
    return index


def _torch_view(stack: CheckResult | None) -> dict[str, Any]:
    m = _measured(stack)
    if "torch" not in m:
        return {}
    view = {
        "version": m["torch"],
        "cuda": m.get("torch_cuda"),
        "cuda_available": m.get("device") == "cuda",
        "device_count": m.get("gpus", 0) if m.get("device") == "cuda" else 0,
    }
    if "arch_list" in m:
        view["arch_list"] = m["arch_list"]
    return view


def _nccl_view(ddp: CheckResult | None) -> dict[str, Any]:
    m = _measured(ddp)
    if "nccl" not in str(m.get("backend", "")):
        return {}
    view: dict[str, Any] = {"world_size": m.get("nccl_world_size", m.get("world_size"))}
    for key, source in (
        ("busbw_gbps", "allreduce_busbw_GBps"),
        ("message_bytes", "allreduce_message_bytes"),
        ("checked", "allreduce_checked"),
        ("transport", "nccl_transport"),
    ):
        if m.get(source) is not None:
            view[key] = m[source]
    if isinstance(m.get("allreduce_sweep"), list):
        view["sweep"] = [
            {"bytes": point["bytes"], "busbw_gbps": point["busbw_GBps"]}
            for point in m["allreduce_sweep"]
        ]
    view["nodes"] = 1
    return view


def write(snap: Snapshot, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(snap, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


class SnapshotError(ValueError):
    """A snapshot file that cannot be judged: the message names the file and the fix."""


def load(path: Path) -> HostSnapshot:
    """A written snapshot as its record; SnapshotError names what is wrong with it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: cannot read a host snapshot: {exc}") from exc
    if not isinstance(data, dict):
        raise SnapshotError(f"{path}: a host snapshot is a JSON object, not {type(data).__name__}")
    version = data.get("format")
    if version != FORMAT:
        raise SnapshotError(
            f"{path}: field format is {version!r}; this self-check judges format {FORMAT} "
            "(write it again with `python -m imagekit.selfcheck --snapshot FILE`)"
        )
    try:  # every key read as its type, so the judge never meets a half-formed reading
        return HostSnapshot.from_json(data)
    except RecordError as exc:
        raise SnapshotError(f"{path}: {exc} (see docs/host-snapshot.md)") from None


def expected_from_env(env: Mapping[str, str] = os.environ) -> int | None:
    """$IMAGEKIT_GPUS=N, which `imagekit test --gpus N` sets (launch passes --expect-gpus)."""
    return gpus_given(env)[1]
