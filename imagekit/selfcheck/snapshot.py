"""The host snapshot: every reading the self-check's verdicts use, gathered once into plain
JSON (docs/host-snapshot.md). A live run reads the host, runs the probes, assembles the
snapshot and judges it (judge.py); `--judge FILE` judges a recorded one the same way.

Standard library only. The readers here are thin; NVML is read through nvml.py and the CPU
through int8.py, each of which fails soft (a reading that cannot be taken is left out, with
the reason, and its rule is then skipped, never passed).
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from imagekit import __version__
from imagekit.contract import labels as label
from imagekit.selfcheck import gpu_host
from imagekit.selfcheck.results import Result, labels

FORMAT = 1
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
    "clock_event_reasons",
    "pcie_gen_under_load",
    "pcie_width_under_load",
    "clock_samples",
    "perf_error",
    "name",
    "memory_total_mib",
)


def read_host(expect_gpus: int | None, require: str = "") -> Snapshot:
    """What the parent process reads before any check runs: no torch, no CUDA context (a
    context here would block the checks under the EXCLUSIVE_PROCESS compute mode)."""
    from imagekit.selfcheck import int8, nvml

    host = gpu_host.read_host()
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
        },
        "cpu": int8.read_cpu(),
        "driver": host.driver,
        "nvml": nvml_status,
        "gpus": gpus,
        "profile": promised.get(label.PROFILE) or os.environ.get("IMAGEKIT_PROFILE"),
        "labels": promised,
        "require": sorted(filter(None, require.split(","))),
    }


def nvml_again(host: Snapshot) -> Snapshot:
    """NVML read once more after the probes: error counters, row remaps and retired pages
    that the memory test itself brought out belong to this verdict, not the next one."""
    from imagekit.selfcheck import nvml

    status, gpus = nvml.read_nvml()
    return {**host, "nvml": status, "gpus": gpus} if status.get("available") else host


def assemble(host: Snapshot, results: Mapping[str, Result]) -> Snapshot:
    """The host readings plus what the probes measured: the perf probe's per-GPU figures
    merged into each GPU by index, torch's view from the stack check, NCCL's from ddp; every
    check's own result is kept under `checks`."""
    snap = dict(host)
    checks = {name: dict(result) for name, result in results.items()}
    snap["torch"] = _torch_view(checks.get("stack"))
    perf = checks.get(PERF_PROBE, {}).get("measurements", {})
    snap["gpus"] = merge_gpus(host.get("gpus", []), perf.get("gpus", []))
    if "p2p" in perf:
        snap["p2p"] = perf["p2p"]
    nccl = _nccl_view(checks.get("ddp"))
    if nccl:
        snap["nccl"] = nccl
    snap["checks"] = checks
    return snap


# Where NVML and torch both name a GPU, NVML's reading is kept (torch only fills in for it).
NVML_WINS = ("name", "memory_total_mib")


def merge_gpus(nvml_gpus: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[dict]:  # type: ignore[type-arg]
    """One dict per GPU index: NVML's readings, then the perf probe's measurements. A GPU
    that only torch saw (NVML unreadable) still gets its measurements."""
    by_index: dict[int, dict[str, Any]] = {int(g["index"]): dict(g) for g in nvml_gpus}
    for reading in measured:
        gpu = by_index.setdefault(int(reading["index"]), {"index": int(reading["index"])})
        for key in GPU_MEASURED:
            if key in reading and not (key in gpu and key in NVML_WINS):
                gpu[key] = reading[key]
        if reading.get("unread"):
            gpu["unread"] = {**gpu.get("unread", {}), **reading["unread"]}
    return [by_index[i] for i in sorted(by_index)]


def _torch_view(stack: Result | None) -> dict[str, Any]:
    m = (stack or {}).get("measurements", {})
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


def _nccl_view(ddp: Result | None) -> dict[str, Any]:
    m = (ddp or {}).get("measurements", {})
    if "nccl" not in str(m.get("backend", "")):
        return {}
    view: dict[str, Any] = {"world_size": m.get("nccl_world_size", m.get("world_size"))}
    for key, source in (
        ("busbw_gbps", "allreduce_busbw_GBps"),
        ("message_bytes", "allreduce_message_bytes"),
        ("transport", "nccl_transport"),
    ):
        if m.get(source) is not None:
            view[key] = m[source]
    view["nodes"] = 1
    return view


def write(snap: Snapshot, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(snap, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


class SnapshotError(ValueError):
    """A snapshot file that cannot be judged: the message names the file and the fix."""


def load(path: Path) -> Snapshot:
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
    bad = [k for k in ("gpus", "checks") if k in data and not isinstance(data[k], list | dict)]
    if bad:
        raise SnapshotError(
            f"{path}: field {bad[0]} has the wrong shape (see docs/host-snapshot.md)"
        )
    return data


_INT = re.compile(r"\d+")


def expected_from_env(env: Mapping[str, str] = os.environ) -> int | None:
    """$IMAGEKIT_EXPECT_GPUS=N, which `imagekit test --gpus N` and `imagekit launch` set."""
    raw = env.get("IMAGEKIT_EXPECT_GPUS", "")
    return int(raw) if _INT.fullmatch(raw) else None
