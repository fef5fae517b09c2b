"""NVML fault injection through the real `pynvml` module (nvidia-ml-py): its functions are
replaced by a healthy two-GPU H100 host (GPU 1 has MIG on, with two MIG devices), its own
exception classes are raised (`pynvml.NVMLError(code)` is the code's subclass), and every
NVML call the self-check makes is failed with every error pynvml defines, plus pynvml's
NVMLLibraryMismatchError and a plain RuntimeError; then at random. Whatever NVML answers, the
reading is left out with the reason, the snapshot is written and judged (`--judge` exits 0
or 1), no rule whose reading failed is reported as passed, and a lost GPU fails.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import json
import os
import random
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from imagekit.contract.checks import Status
from imagekit.selfcheck.readers import (
    clock_sampler,
    nvml,
    nvml_calls,
    nvml_counters,
    nvml_links,
    snapshot,
)
from imagekit.selfcheck.run.main import main
from imagekit.selfcheck.verdicts import cpulist as numa
from imagekit.selfcheck.verdicts import devices, health

from .conftest import typed

H100 = "NVIDIA H100 80GB HBM3"
UUIDS = ["GPU-5d1a2e3b-7c4f-4d8e-9a0b-1c2d3e4f5a6b", "GPU-9e8d35e3-0c1d-4b5a-8f7e-6d5c4b3a2910"]
MIG_UUIDS = ["MIG-2bbca808-35cf-59a3-81cd-726377e03a78", "MIG-7f3e9a1c-4d2b-5e6f-8a9b-0c1d2e3f4a5b"]
MIG_GPU = 1
OTHER_PID = 4321
REAL = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("nvml")}

# Every error pynvml can raise for an NVML return code, by its constant's name, and the two
# that are not NVMLErrors.
CODES = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")}
MISMATCH = (
    "Unversioned function called and the pyNVML version does not match the NVML lib "
    "version. Either use matching pyNVML and NVML lib versions or use a versioned function "
    "such as nvmlDeviceGetComputeRunningProcesses_v2"
)
ERRORS: dict[str, Callable[[], BaseException]] = {
    **{name: (lambda code=code: pynvml.NVMLError(code)) for name, code in CODES.items()},
    "NVMLLibraryMismatchError": lambda: pynvml.NVMLLibraryMismatchError(MISMATCH),
    "RuntimeError": lambda: RuntimeError("the driver went away"),
}
LOST = {"NVML_ERROR_GPU_IS_LOST": "gpu_lost", "NVML_ERROR_RESET_REQUIRED": "gpu_reset_required"}
CLUSTER = "5e3a9c1d-8b2f-4d7e-a6c0-1f9b2d4e8a70"
# The fabric every GPU of the default host registered with (an HGX board's NVSwitches).
FABRIC = {"state": "completed", "status": "success", "clique_id": 32766, "cluster_uuid": CLUSTER}


@functools.cache
def pynvml_calls() -> frozenset[str]:
    """Every pynvml function the NVML readers call (nvml.py, nvml_links.py, clock_sampler.py,
    nvml_calls.py, nvml_counters.py: `nvml.nvml...`, and the Xid watch's and the sampler's
    `self._nvml.nvml...`), read from their source."""
    calls: set[str] = set()
    for module in (nvml, nvml_links, clock_sampler, nvml_calls, nvml_counters):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("nvml"):
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "nvml") or (
                isinstance(owner, ast.Attribute) and owner.attr == "_nvml"
            ):
                calls.add(node.attr)
    return frozenset(calls)


@dataclass(frozen=True)
class Handle:
    gpu: int


@dataclass(frozen=True)
class MigHandle:
    gpu: int
    slot: int


# The system calls; every other call concerns one GPU (its handle, index or UUID).
SYSTEM = {
    "nvmlEventSetCreate",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlSystemGetProcessName",
}


class Host:
    """The answers of a healthy 2 x H100 host behind pynvml's API; `fail(call, gpu)` returns
    the exception a call should raise instead (gpu: the GPU it concerns, None for a system
    call), or None. `raised` records (call, gpu, error class) of every fault injected.

    By default an x86 HGX board (two sockets of 56 cores with hyperthreads, PCIe to the
    host, NVSwitches: a completed fabric, no NUMA node of GPU memory); `grace=True` makes
    it two Grace superchips instead (NVLink-C2C, 72 CPUs per Grace, each GPU's memory a NUMA
    node of its own)."""

    def __init__(
        self,
        fail: Callable[[str, int | None], BaseException | None] | None = None,
        mig_gpu: int | None = MIG_GPU,
        idle: tuple[int, ...] = (),
        grace: bool = False,
    ):
        self.fail = fail or (lambda call, gpu: None)
        self.mig_gpu = mig_gpu  # the GPU with MIG on (its devices: MIG_UUIDS), if any
        self.idle = idle  # GPUs that nothing runs on: their PCIe link is down to Gen1
        self.old_clock_api = False  # a driver before 535: no ClocksEventReasons symbol
        self.old_fabric_api = False  # a driver before 550: no GpuFabricInfoV symbol
        self.raised: list[tuple[str, int | None, str]] = []
        self.c2c = 1 if grace else 0  # isC2cEnabled
        self.numa_nodes: tuple[int, ...] | None = (2, 10) if grace else None  # None: NotSupported
        self.cpus = 144 if grace else 224  # os.cpu_count()
        self.affinity = ("0-71", "72-143") if grace else ("0-55,112-167", "56-111,168-223")
        self.fabric = {"state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, "status": 0}
        self.cpu_set_sizes: list[int] = []  # the cpuSetSize of each CPU affinity asked
        self.xids: dict[int, list[int]] = {}  # the Xid events each GPU raises during the run

    def install(self, monkeypatch: pytest.MonkeyPatch, keep: tuple[str, ...] = ()) -> None:
        for call in sorted(pynvml_calls() - set(keep)):
            monkeypatch.setattr(pynvml, call, self._wrapped(call, getattr(self, call)))
        monkeypatch.setattr(os, "cpu_count", lambda: self.cpus)

    def _wrapped(self, call: str, answer: Callable[..., Any]) -> Callable[..., Any]:
        def fn(*args: Any) -> Any:
            gpu = None if call in SYSTEM else self._gpu_of(args[0])
            exc = self.fail(call, gpu)
            if exc is not None:
                self.raised.append((call, gpu, type(exc).__name__))
                raise exc
            return answer(*args)

        fn.__name__ = call
        return fn

    def _gpu_of(self, arg: Any) -> int | None:
        if isinstance(arg, Handle | MigHandle):
            return arg.gpu
        if isinstance(arg, int):
            return arg
        for index, uuid in enumerate(UUIDS):
            if arg == uuid:
                return index
        return self.mig_gpu if arg in MIG_UUIDS else None

    # -- the system
    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(UUIDS)

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return "python3"

    # -- Xid events: one event set per GPU
    def nvmlEventSetCreate(self) -> dict[str, Any]:
        return {"gpu": None}

    def nvmlDeviceRegisterEvents(self, h: Handle, types: int, events: dict[str, Any]) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError
        events["gpu"] = h.gpu

    def nvmlEventSetWait_v2(self, events: dict[str, Any], ms: int) -> Any:
        pending = self.xids.get(events["gpu"], [])
        if not pending:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return SimpleNamespace(eventData=pending.pop(0), eventType=0x8)

    def nvmlEventSetFree(self, events: dict[str, Any]) -> None:
        pass

    # -- handles
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= index < len(UUIDS):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle | MigHandle:
        if uuid in UUIDS:
            return Handle(UUIDS.index(uuid))
        if uuid in MIG_UUIDS and self.mig_gpu is not None:
            return MigHandle(self.mig_gpu, MIG_UUIDS.index(uuid))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    # -- one GPU
    def nvmlDeviceGetName(self, h: Handle) -> str:
        return H100

    def nvmlDeviceGetUUID(self, h: Handle | MigHandle) -> str:
        return MIG_UUIDS[h.slot] if isinstance(h, MigHandle) else UUIDS[h.gpu]

    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> Any:
        return SimpleNamespace(total=81559 << 20, free=80000 << 20, used=1559 << 20)

    def nvmlDeviceGetCudaComputeCapability(self, h: Handle) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetComputeMode(self, h: Handle) -> int:
        return pynvml.NVML_COMPUTEMODE_DEFAULT

    def nvmlDeviceGetPersistenceMode(self, h: Handle) -> int:
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetMigMode(self, h: Handle) -> list[int]:
        on = h.gpu == self.mig_gpu
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if on else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Handle, slot: int) -> MigHandle:
        if slot >= len(MIG_UUIDS):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # an empty slot
        return MigHandle(h.gpu, slot)

    def nvmlDeviceGetEccMode(self, h: Handle) -> list[int]:
        return [pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED]

    def nvmlDeviceGetTotalEccErrors(self, h: Handle, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetMemoryErrorCounter(
        self, h: Handle, kind: int, counter: int, location: int
    ) -> int:
        return 0

    def nvmlDeviceGetPcieReplayCounter(self, h: Handle) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, h: Handle) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Handle) -> int:
        return pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Handle) -> int:
        return 1 if h.gpu in self.idle else 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Handle) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Handle) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Handle) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, h: Handle, link: int) -> int:
        if link >= 18:  # H100 SXM has 18 links; NVML answers InvalidArgument past them
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkVersion(self, h: Handle, link: int) -> int:
        return pynvml.NVML_NVLINK_VERSION_4_0

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[Any]:
        if h.gpu == 0:
            return [SimpleNamespace(pid=OTHER_PID, usedGpuMemory=512 << 20)]
        return []

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Handle) -> int:
        if self.old_clock_api:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return pynvml.nvmlClocksEventReasonSwPowerCap

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Handle) -> int:
        return pynvml.nvmlClocksEventReasonSwPowerCap

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        return 612_345  # mW

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 71

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:
        return 700_000  # mW

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: Handle) -> int:
        return 700_000

    def nvmlDeviceGetTemperatureThreshold(self, h: Handle, kind: int) -> int:
        assert kind == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return 87

    def nvmlDeviceGetC2cModeInfoV(self, h: Handle) -> Any:
        info = pynvml.c_nvmlC2cModeInfo_v1_t()
        info.isC2cEnabled = self.c2c
        return info

    def nvmlDeviceGetNumaNodeId(self, h: Handle) -> int:
        if self.numa_nodes is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.numa_nodes[h.gpu]

    def nvmlDeviceGetCpuAffinity(self, h: Handle, size: int) -> Any:
        """cpuSetSize words, as NVML fills them (CPUs past them are cut off)."""
        self.cpu_set_sizes.append(size)
        words = masks_of(self.affinity[h.gpu], size)
        return (ctypes.c_ulonglong * size)(*words)

    def nvmlDeviceGetGpuFabricInfoV(self, h: Handle, info: Any) -> int:
        if self.old_fabric_api:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._fabric_into(info._obj)

    def nvmlDeviceGetGpuFabricInfo(self, h: Handle, info: Any) -> int:
        return self._fabric_into(info._obj)

    def _fabric_into(self, info: Any) -> int:
        info.state = self.fabric["state"]
        info.status = self.fabric["status"]
        info.cliqueId = FABRIC["clique_id"]
        field = type(info).clusterUuid
        ctypes.memmove(
            ctypes.addressof(info) + field.offset, bytes.fromhex(CLUSTER.replace("-", "")), 16
        )
        return pynvml.NVML_SUCCESS


def masks_of(cpus: str, words: int, bits: int = numa.WORD_BITS) -> list[int]:
    """A cpulist as `words` bitmask words (the inverse of numa.cpulist, cut at `words`)."""
    out = [0] * words
    for part in filter(None, cpus.split(",")):
        first, _, last = part.partition("-")
        for cpu in range(int(first), int(last or first) + 1):
            if cpu < words * bits:
                out[cpu // bits] |= 1 << cpu % bits
    return out


def host_snapshot(samples: int = 2) -> dict[str, Any]:
    """What a live run writes for this host: the parent's NVML reading (the real reader over
    the patched pynvml), the clock sampler's readings merged in (by UUID), torch's view, and
    the gpus and health verdicts selected."""
    watch = nvml_counters.XidWatch()
    watch.start()
    snap = snapshot.read_host(2)
    snap["container"] = {
        "device_nodes": ["/dev/nvidia0", "/dev/nvidia1"],
        "visible_devices": None,
        "gpus_requested": True,
        "cuda_visible_devices": None,
        "cuda_device_order": "PCI_BUS_ID",
    }
    sampler = clock_sampler.ClockSampler(dict(enumerate(UUIDS)), min_samples=1)
    if sampler.open():
        for _ in range(samples):
            sampler.sample()
        sampler.close()
    clock_sampler.merge_readings(snap["gpus"], sampler.readings())
    snapshot.with_xids(snap, watch.stop())
    snap["torch"] = {"version": "2.9.0", "cuda": "12.8", "cuda_available": True}
    snap["torch"]["device_count"] = 2
    snap["selected"] = ["gpus", "health"]
    snap["checks"] = {}
    return snap


# What each health rule needs: where all the readings of one of the alternatives are there,
# the rule can be judged; where none is complete, a finding of one of the rules must say so
# (a skip, or a failure), never silence (which the table shows as a pass).
NEEDS: dict[tuple[str, ...], tuple[tuple[str, ...], ...]] = {
    ("ecc-uncorrected",): (("ecc_volatile_uncorrected",),),
    ("row-remap-pending",): (("remapped_rows_pending",), ("retired_pages_pending",)),
    # the link now: under load, else at idle (where the idle reading is already the maximum,
    # or is lower and said so: a warning, or a skip "read at idle only")
    ("pcie-link", "pcie-gen", "pcie-width"): tuple(
        ("pcie_max_gen", "pcie_max_width", gen, width)
        for gen in ("pcie_gen_under_load", "pcie_gen")
        for width in ("pcie_width_under_load", "pcie_width")
    ),
    # a part the product table gives NVLinks says so as nvlink-visible (issue 52)
    ("nvlink-down", "nvlink-visible"): (("nvlinks_active", "nvlinks_total"),),
    ("xid",): (("xid_events",),),
    ("ecc-sram",): (("ecc_sram_uncorrected", "ecc_sram_corrected"),),
    ("ecc-aggregate",): (("ecc_aggregate_uncorrected",),),
    ("pcie-replays",): (("pcie_replays_during_run",),),
    ("power-limit",): (("power_limit_w", "power_default_limit_w"),),
    ("temperature",): (("temperature_max_c", "temperature_slowdown_c"),),
    ("compute-mode",): (("compute_mode",),),
    ("persistence-off",): (("persistence_mode",),),
    ("clocks-hw-slowdown",): (("clock_event_reasons",),),
    ("other-processes",): (("processes",),),
}


def not_passed(snap: dict[str, Any]) -> set[tuple[str, int | None]]:
    found, _ = health.health_findings(typed(snap))
    return {(f.rule, f.gpu) for f in found if f.level in (Status.SKIPPED, Status.FAILED)}


def assert_nothing_unread_passed(snap: dict[str, Any]) -> None:
    said = not_passed(snap)
    for gpu in snap["gpus"]:
        for rules, alternatives in NEEDS.items():
            if any(all(k in gpu for k in keys) for keys in alternatives):
                continue
            assert any((rule, gpu["index"]) in said for rule in rules), (
                f"GPU {gpu['index']}: {rules[0]} passed without its readings: {gpu}"
            )


def assert_judged(snap: dict[str, Any], tmp_path: Path) -> int:
    """The snapshot is plain JSON, and `--judge` on it exits 0 or 1."""
    path = tmp_path / "host.json"
    path.write_text(json.dumps(snap))  # no default=: every value is JSON already
    code = main(["--judge", str(path)])
    assert code in (0, 1)
    return code


@pytest.fixture(scope="module")
def baseline() -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        Host().install(patch)
        return host_snapshot()


@pytest.fixture(scope="module")
def judged_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("judged")


def test_the_healthy_host_is_read_whole_and_passes(
    baseline: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu0, gpu1 = baseline["gpus"]
    assert baseline["nvml"] == {
        "available": True,
        "reason": "",
        "driver": "580.95.05",
        "device_count": 2,
    }
    assert gpu0["uuid"] == UUIDS[0] and gpu0["nvlinks_active"] == 18 and gpu0["nvlink_version"] == 4
    assert gpu0["processes"] == [{"pid": OTHER_PID, "used_mib": 512, "name": "python3"}]
    assert gpu0["clock_event_reasons"] == ["sw_power_cap"] and gpu0["pcie_gen_under_load"] == 5
    assert gpu1["mig_mode"] is True and gpu1["mig_uuids"] == MIG_UUIDS
    assert (gpu0["host_link"], gpu0["cpu_affinity"]) == ("pcie", "0-55,112-167")
    assert (gpu1["host_link"], gpu1["cpu_affinity"]) == ("pcie", "56-111,168-223")
    assert gpu0["fabric"] == gpu1["fabric"] == FABRIC
    # an x86 host's GPU memory is no NUMA node: NVML answers NotSupported, the only gap
    assert gpu0["unread"] == gpu1["unread"] == {"numa_node": "Not Supported"}
    assert assert_judged(baseline, tmp_path) == 0
    assert re.search(r"health +PASSED", capsys.readouterr().out)


def test_every_nvml_call_is_faked_here() -> None:
    """A new NVML call in the NVML readers needs its healthy answer here, so its faults are tested."""
    assert pynvml_calls() <= {name for name in dir(Host) if name.startswith("nvml")}
    assert len(pynvml_calls()) >= 33


def test_pynvml_errors_are_what_the_reader_expects() -> None:
    """What the fault tests rely on in the real nvidia-ml-py: NVMLError(code) is the code's
    own subclass, NVMLLibraryMismatchError is not an NVMLError, and "lost" is code 15."""
    assert type(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)).__name__ == "NVMLError_GpuIsLost"
    assert (
        pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST).value == 15 == pynvml.NVML_ERROR_GPU_IS_LOST
    )
    assert pynvml.NVML_ERROR_RESET_REQUIRED == 16 and pynvml.NVML_ERROR_GPU_NOT_FOUND == 28
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    assert len(CODES) >= 31
    for code in CODES.values():
        assert isinstance(pynvml.NVMLError(code), pynvml.NVMLError)
        assert nvml_calls.reason_of(pynvml.NVMLError(code))  # words even without the library
    assert nvml_calls.fault_of(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "gpu_lost"
    assert nvml_calls.fault_of(pynvml.NVMLError_ResetRequired()) == "gpu_reset_required"
    assert nvml_calls.fault_of(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_NOT_FOUND)) is None
    assert nvml_calls.fault_of(RuntimeError("GPU is lost")) is None


# -- one call, one error -------------------------------------------------------------------

# The readings each call gives (the sampler's too); a failure leaves them out, with a reason.
KEYS: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetHandleByIndex": ("handle",),
    "nvmlDeviceGetHandleByUUID": clock_sampler.SAMPLED,
    "nvmlDeviceGetName": ("name",),
    "nvmlDeviceGetUUID": ("uuid",),
    "nvmlDeviceGetMemoryInfo": ("memory_total_mib",),
    "nvmlDeviceGetCudaComputeCapability": ("compute_capability",),
    "nvmlDeviceGetComputeMode": ("compute_mode",),
    "nvmlDeviceGetPersistenceMode": ("persistence_mode",),
    "nvmlDeviceGetMigMode": ("mig_mode",),
    "nvmlDeviceGetMaxMigDeviceCount": ("mig_uuids",),
    "nvmlDeviceGetMigDeviceHandleByIndex": ("mig_uuids",),
    "nvmlDeviceGetEccMode": ("ecc_mode",),
    "nvmlDeviceGetTotalEccErrors": ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"),
    "nvmlDeviceGetMemoryErrorCounter": ("ecc_sram_uncorrected", "ecc_sram_corrected"),
    "nvmlDeviceGetPcieReplayCounter": ("pcie_replays",),
    "nvmlDeviceRegisterEvents": ("xid_events",),
    "nvmlDeviceGetRemappedRows": ("remapped_rows_pending", "remapped_rows_failure"),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("retired_pages_pending",),
    "nvmlDeviceGetCurrPcieLinkGeneration": ("pcie_gen", "pcie_gen_under_load"),
    "nvmlDeviceGetCurrPcieLinkWidth": ("pcie_width", "pcie_width_under_load"),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("pcie_max_gen",),
    "nvmlDeviceGetMaxPcieLinkWidth": ("pcie_max_width",),
    "nvmlDeviceGetNvLinkState": ("nvlinks_active", "nvlinks_total", "nvlink_version"),
    "nvmlDeviceGetNvLinkVersion": (),  # the generation unknown: left out, links go by arch
    "nvmlDeviceGetComputeRunningProcesses": ("processes",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("clock_event_reasons",),
    "nvmlDeviceGetCurrentClocksThrottleReasons": ("clock_event_reasons",),
    "nvmlDeviceGetPowerUsage": ("power_max_w",),
    "nvmlDeviceGetTemperature": ("temperature_max_c",),
    "nvmlDeviceGetEnforcedPowerLimit": ("power_limit_w",),
    "nvmlDeviceGetPowerManagementDefaultLimit": ("power_default_limit_w",),
    "nvmlDeviceGetTemperatureThreshold": ("temperature_slowdown_c",),
    "nvmlDeviceGetC2cModeInfoV": ("host_link",),
    "nvmlDeviceGetNumaNodeId": ("numa_node",),
    "nvmlDeviceGetCpuAffinity": ("cpu_affinity",),
    "nvmlDeviceGetGpuFabricInfoV": ("fabric",),
    "nvmlDeviceGetGpuFabricInfo": ("fabric",),
}
# Answers that are no failure of the reading, by design (documented in the NVML readers).
MEANS_NONE = {
    ("nvmlEventSetWait_v2", "NVML_ERROR_TIMEOUT"),  # no event left: none
    ("nvmlDeviceGetMigMode", "NVML_ERROR_NOT_SUPPORTED"),  # no MIG on this GPU
    ("nvmlDeviceGetNvLinkState", "NVML_ERROR_NOT_SUPPORTED"),  # no such link
    ("nvmlDeviceGetNvLinkState", "NVML_ERROR_INVALID_ARGUMENT"),
    ("nvmlDeviceGetNvLinkState", "NVML_ERROR_NOT_FOUND"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", "NVML_ERROR_NOT_FOUND"),  # an empty MIG slot
    ("nvmlDeviceGetMigDeviceHandleByIndex", "NVML_ERROR_INVALID_ARGUMENT"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", "NVML_ERROR_NO_PERMISSION"),  # not this container's
    ("nvmlDeviceGetCurrentClocksEventReasons", "NVML_ERROR_FUNCTION_NOT_FOUND"),  # < 535
    ("nvmlDeviceGetC2cModeInfoV", "NVML_ERROR_NOT_SUPPORTED"),  # no C2C link: "pcie"
    ("nvmlDeviceGetGpuFabricInfoV", "NVML_ERROR_NOT_SUPPORTED"),  # no fabric: "not_supported"
    ("nvmlDeviceGetGpuFabricInfoV", "NVML_ERROR_FUNCTION_NOT_FOUND"),  # < 550: the older call
    ("nvmlDeviceGetGpuFabricInfo", "NVML_ERROR_NOT_SUPPORTED"),
}
MIG_CALLS = {"nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex"}
CALLS = sorted(pynvml_calls())


@pytest.mark.parametrize("call", CALLS)
def test_one_call_failing_leaves_its_reading_unread_and_the_run_going(
    call: str,
    baseline: dict[str, Any],
    judged_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`call` fails with each error in turn (one pytest item per call: 33 errors each)."""
    for error in sorted(ERRORS):
        with pytest.MonkeyPatch.context() as patch:
            try:
                one_call_fails(call, error, baseline, patch, judged_dir)
            except AssertionError as exc:
                raise AssertionError(f"{call} raising {error}: {exc}") from exc
            finally:
                capsys.readouterr()


def one_call_fails(
    call: str,
    error: str,
    baseline: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    judged_dir: Path,
) -> None:
    # The GPU the call is failed on (MIG calls only reach the MIG GPU); the other one must
    # read as on a healthy host.
    target = MIG_GPU if call in MIG_CALLS else 0
    host = Host(lambda c, gpu: ERRORS[error]() if c == call and gpu in (target, None) else None)
    host.old_clock_api = call == "nvmlDeviceGetCurrentClocksThrottleReasons"
    host.old_fabric_api = call == "nvmlDeviceGetGpuFabricInfo"
    host.install(monkeypatch)
    snap = host_snapshot()
    assert host.raised, f"{call} was never called"
    assert_judged(snap, judged_dir)
    assert_nothing_unread_passed(snap)

    said = nvml_calls.reason_of(ERRORS[error]())
    if call in ("nvmlInit", "nvmlDeviceGetCount"):
        assert snap["nvml"]["available"] is False and snap["gpus"] == []
        assert snap["nvml"]["reason"].endswith(f": {said}")
        return
    if call == "nvmlSystemGetDriverVersion":
        assert snap["nvml"]["reason"] == f"driver version not read: {said}"
        assert "driver" not in snap["nvml"] and snap["gpus"] == baseline["gpus"]
        return
    if call in ("nvmlShutdown", "nvmlEventSetFree"):
        assert snap["gpus"] == baseline["gpus"]
        return
    if call in ("nvmlEventSetCreate", "nvmlEventSetWait_v2"):  # every GPU's set: every GPU
        if (call, error) in MEANS_NONE:
            assert snap["gpus"] == baseline["gpus"]
        else:
            assert all(g["unread"]["xid_events"].endswith(said) for g in snap["gpus"])
        return
    if call == "nvmlSystemGetProcessName":  # a PID of another namespace has no name here
        assert snap["gpus"][0]["processes"] == [{"pid": OTHER_PID, "used_mib": 512, "name": ""}]
        return
    gpu, other = snap["gpus"][target], snap["gpus"][1 - target]
    assert other == baseline["gpus"][1 - target]
    fault = LOST.get(error)
    keys = KEYS[call]
    if call == "nvmlDeviceGetNvLinkVersion" and fault:
        keys = KEYS["nvmlDeviceGetNvLinkState"]  # a lost GPU is lost for every question
    if (call, error) in MEANS_NONE:
        assert "unread" not in gpu or not set(keys) & set(gpu["unread"])
    else:
        for key in keys:
            assert key not in gpu, key
            assert gpu["unread"][key], key
    if fault:
        assert fault in gpu
        assert ("gpu-lost" if fault == "gpu_lost" else "gpu-reset-required", target) in {
            (f.rule, f.gpu)
            for f in health.health_findings(typed(snap))[0]
            if f.level == Status.FAILED
        }
    else:
        assert "gpu_lost" not in gpu and "gpu_reset_required" not in gpu


def test_a_lost_gpu_fails_the_health_verdict_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lost = lambda call, gpu: pynvml.NVMLError_GpuIsLost() if gpu == 1 else None  # noqa: E731
    Host(lost).install(monkeypatch)
    snap = host_snapshot()
    assert snap["gpus"][1] == {
        "index": 1,
        "unread": {
            "handle": "GPU is lost",
            **dict.fromkeys(clock_sampler.SAMPLED, sampler_lost()),
            "xid_events": "GPU is lost",
        },
        "gpu_lost": "handle: GPU is lost",
        "clock_samples": 0,
    }
    assert assert_judged(snap, tmp_path) == 1
    out = capsys.readouterr().out
    assert re.search(r"health +FAILED", out) and "GPU 1: NVML says the GPU is lost" in out
    # every other rule of that GPU says it was not judged, with NVML's words
    skips = {
        f.rule
        for f in health.health_findings(typed(snap))[0]
        if f.gpu == 1 and f.level == Status.SKIPPED
    }
    assert {"ecc-uncorrected", "compute-mode", "other-processes", "nvlink-down"} <= skips


def sampler_lost() -> str:
    return f"NVML found no handle for {UUIDS[1]}: GPU is lost"


def test_a_gpu_lost_before_the_probes_stays_lost_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvml_again reads NVML once more after the probes; a GPU the first reading found lost
    keeps the mark even where the second one reads it."""
    with pytest.MonkeyPatch.context() as patch:
        Host(lambda call, gpu: pynvml.NVMLError_GpuIsLost() if gpu == 1 else None).install(patch)
        host = host_snapshot()
    Host().install(monkeypatch)
    again = snapshot.nvml_again(host)
    assert again["gpus"][1]["gpu_lost"] == "handle: GPU is lost"
    assert again["gpus"][1]["uuid"] == UUIDS[1] and "gpu_lost" not in again["gpus"][0]


# -- at random -------------------------------------------------------------------------------


def random_faults(
    rng: random.Random, p: float
) -> Callable[[str, int | None], BaseException | None]:
    names = sorted(ERRORS)

    def fail(call: str, gpu: int | None) -> BaseException | None:
        return ERRORS[rng.choice(names)]() if rng.random() < p else None

    return fail


@pytest.mark.parametrize("p", [0.05, 0.3])
def test_random_faults_never_escape_and_nothing_unread_passes(
    p: float, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(20260613)
    for _trial in range(500):
        host = Host(random_faults(rng, p))
        host.old_clock_api = rng.random() < 0.3
        host.old_fabric_api = host.old_clock_api  # a driver before 535 lacks both
        host.install(monkeypatch)
        snap = host_snapshot()
        assert_judged(snap, tmp_path)
        capsys.readouterr()
        assert_nothing_unread_passed(snap)
        # a GPU NVML called lost (in an answer the reader acts on) fails, by its index
        failed = {f.gpu for f in health.health_findings(typed(snap))[0] if f.rule == "gpu-lost"}
        lost = {
            gpu
            for call, gpu, kind in host.raised
            if kind == "NVMLError_GpuIsLost" and gpu is not None and snap["gpus"]
        }
        assert lost <= failed, host.raised
        # the perf probe's identity reading and match never raise either
        known, _why = nvml.read_identities()
        devices.match_devices([UUIDS[0], None], known, "0,1", "PCI_BUS_ID")


@pytest.mark.subprocess
def test_random_faulty_snapshots_judge_in_a_fresh_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`python -m imagekit.selfcheck --judge` itself: exit 0 or 1, never 2 or a traceback."""
    rng = random.Random(7)
    for trial in range(3):
        Host(random_faults(rng, 0.4)).install(monkeypatch)
        path = tmp_path / f"host{trial}.json"
        path.write_text(json.dumps(host_snapshot()))
        done = subprocess.run(
            [sys.executable, "-m", "imagekit.selfcheck", "--judge", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        assert "Traceback" not in done.stderr


# -- the real pynvml wrappers over a driver without a symbol --------------------------------


def c_library(monkeypatch: pytest.MonkeyPatch, symbols: dict[str, Callable[..., int]]) -> None:
    """pynvml's own function lookup, over a 'library' of Python functions taking the ctypes
    arguments pynvml passes; a symbol it lacks is NVML_ERROR_FUNCTION_NOT_FOUND, as pynvml
    answers for a libnvidia-ml.so.1 without it."""

    def lookup(name: str) -> Callable[..., int]:
        if name not in symbols:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return symbols[name]

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)


def test_a_driver_without_the_v3_processes_symbol_leaves_processes_unread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before R510 libnvidia-ml has no nvmlDeviceGetComputeRunningProcesses_v3: pynvml's
    unversioned wrapper (@throwOnVersionMismatch) turns FunctionNotFound into
    NVMLLibraryMismatchError, which is no NVMLError. The run goes on; the reading is
    unread, with pynvml's words."""
    Host().install(monkeypatch, keep=("nvmlDeviceGetComputeRunningProcesses",))
    assert (
        pynvml.nvmlDeviceGetComputeRunningProcesses is REAL["nvmlDeviceGetComputeRunningProcesses"]
    )
    c_library(monkeypatch, {})
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        pynvml.nvmlDeviceGetComputeRunningProcesses(Handle(0))
    snap = host_snapshot()
    for gpu in snap["gpus"]:
        assert "processes" not in gpu
        assert gpu["unread"]["processes"].startswith(
            "NVMLLibraryMismatchError: Unversioned function called"
        )
        assert "name" in gpu and "ecc_volatile_uncorrected" in gpu  # the rest is read
    assert assert_judged(snap, tmp_path) == 0
    assert "other-processes" in {
        f.rule for f in health.health_findings(typed(snap))[0] if f.level == Status.SKIPPED
    }
    capsys.readouterr()


def test_the_v3_processes_symbol_answering_gpu_lost_marks_the_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same wrapper with the symbol there: its return code becomes pynvml's NVMLError
    subclass through _nvmlCheckReturn, and GPU_IS_LOST marks the GPU lost."""
    Host().install(monkeypatch, keep=("nvmlDeviceGetComputeRunningProcesses",))
    lost = pynvml.NVML_ERROR_GPU_IS_LOST
    c_library(monkeypatch, {"nvmlDeviceGetComputeRunningProcesses_v3": lambda *a: lost})
    snap = host_snapshot()
    assert snap["gpus"][0]["gpu_lost"] == "processes: GPU is lost"
    assert ("gpu-lost", 0) in not_passed(snap)


def test_a_driver_before_535_samples_the_throttle_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlDeviceGetCurrentClocksEventReasons is missing from older libraries: the real
    pynvml raises NVMLError_FunctionNotFound and the sampler asks the older symbol."""
    keep = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    Host().install(monkeypatch, keep=keep)

    def throttle(handle: Any, reasons: Any) -> int:
        reasons._obj.value = pynvml.nvmlClocksEventReasonHwSlowdown
        return pynvml.NVML_SUCCESS

    c_library(monkeypatch, {"nvmlDeviceGetCurrentClocksThrottleReasons": throttle})
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(Handle(0))
    snap = host_snapshot()
    assert snap["gpus"][0]["clock_event_reasons"] == ["hw_slowdown"]
    assert ("clocks-hw-slowdown", 0) in not_passed(snap)


# -- the sampler's thread ----------------------------------------------------------------------


def test_the_sampler_thread_survives_every_error_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = threading.Event()

    def fail(call: str, gpu: int | None) -> BaseException | None:
        if call == "nvmlDeviceGetCurrentClocksEventReasons":
            started.set()
            return pynvml.NVMLLibraryMismatchError(MISMATCH)
        if call == "nvmlDeviceGetCurrPcieLinkWidth":
            return RuntimeError("no width")
        return None

    Host(fail).install(monkeypatch)
    with clock_sampler.ClockSampler(dict(enumerate(UUIDS)), interval=0.005) as sampler:
        assert started.wait(5)
    readings = sampler.readings()
    assert sampler.error == ""
    for key in (0, 1):
        assert readings[key]["clock_samples"] >= 2
        assert readings[key]["pcie_gen_under_load"] == 5
        assert readings[key]["unread"] == {
            "clock_event_reasons": f"NVMLLibraryMismatchError: {MISMATCH}"[
                : nvml_calls.REASON_CHARS
            ],
            "pcie_width_under_load": "RuntimeError: no width",
        }


def test_a_sampler_thread_that_dies_leaves_its_reason_on_every_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Host().install(monkeypatch)
    sampler = clock_sampler.ClockSampler(dict(enumerate(UUIDS)), interval=0.005)

    def broken() -> None:
        raise MemoryError("out of memory in the sampler")

    monkeypatch.setattr(sampler, "sample", broken)
    with sampler:
        pass
    assert sampler.error == "clock sampling stopped: MemoryError: out of memory in the sampler"
    for key in (0, 1):
        assert sampler.readings()[key] == {  # the limits were read when it opened
            "clock_samples": 0,
            "power_limit_w": 700,
            "power_default_limit_w": 700,
            "temperature_slowdown_c": 87,
            "unread": dict.fromkeys(("clock_event_reasons", *clock_sampler.MAXIMA), sampler.error),
        }


def test_a_gpu_whose_handle_the_sampler_cannot_get_is_the_only_one_unsampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Host(
        lambda call, gpu: (
            pynvml.NVMLError_NotFound()
            if call == "nvmlDeviceGetHandleByUUID" and gpu == 1
            else None
        )
    ).install(monkeypatch)
    sampler = clock_sampler.ClockSampler({0: UUIDS[0], 1: UUIDS[1]})
    assert sampler.open()
    sampler.sample()
    sampler.close()
    readings = sampler.readings()
    assert readings[0]["pcie_gen_under_load"] == 5 and "unread" not in readings[0]
    assert readings[1] == {
        "clock_samples": 0,
        "unread": dict.fromkeys(
            clock_sampler.SAMPLED, f"NVML found no handle for {UUIDS[1]}: Not Found"
        ),
    }


# -- Grace hosts: the host link, the GPU's NUMA node, its CPUs, the NVLink fabric ------------

MISMATCH_WORDS = f"NVMLLibraryMismatchError: {MISMATCH}"[: nvml_calls.REASON_CHARS]
NEW_READINGS = ("host_link", "numa_node", "cpu_affinity", "fabric")


def grace_gpus(
    monkeypatch: pytest.MonkeyPatch,
    fail: Callable[[str, int | None], BaseException | None] | None = None,
    **answers: Any,
) -> tuple[Host, list[dict[str, Any]]]:
    """The GPUs NVML reads on two Grace superchips, `answers` replacing the host's."""
    host = Host(fail, mig_gpu=None, grace=True)
    for name, value in answers.items():
        setattr(host, name, value)
    host.install(monkeypatch)
    status, gpus = nvml.read_nvml()
    assert status["available"], status
    return host, gpus


def test_a_grace_host_reads_c2c_the_numa_nodes_and_the_cpus_near_each_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host, (gpu0, gpu1) = grace_gpus(monkeypatch)
    assert {k: gpu0[k] for k in NEW_READINGS} == {
        "host_link": "c2c",
        "numa_node": 2,
        "cpu_affinity": "0-71",
        "fabric": FABRIC,
    }
    assert (gpu1["host_link"], gpu1["numa_node"], gpu1["cpu_affinity"]) == ("c2c", 10, "72-143")
    assert "unread" not in gpu0 and "unread" not in gpu1
    assert host.cpu_set_sizes == [3, 3]  # 144 CPUs in 64-bit words


# What each call reads on the GPU it answers for: (key, the healthy reading, the reading a
# NotSupported answer gives, or None where it leaves the key unread).
GRACE_READS: dict[str, tuple[str, Any, Any]] = {
    "nvmlDeviceGetC2cModeInfoV": ("host_link", "c2c", "pcie"),
    "nvmlDeviceGetNumaNodeId": ("numa_node", 2, None),
    "nvmlDeviceGetCpuAffinity": ("cpu_affinity", "0-71", None),
    "nvmlDeviceGetGpuFabricInfoV": ("fabric", FABRIC, {"state": "not_supported"}),
}
REFUSALS = {
    "NVML_ERROR_NO_PERMISSION": "Insufficient Permissions",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "Function Not Found",
    "NVMLLibraryMismatchError": MISMATCH_WORDS,
    "RuntimeError": "RuntimeError: the driver went away",
}


def grace_answers() -> list[tuple[str, str | None, str, Any, str]]:
    """(call, error from ERRORS or None for the healthy answer, key, the value read or None,
    the reason it is unread)."""
    out: list[tuple[str, str | None, str, Any, str]] = []
    for call, (key, healthy, unsupported) in GRACE_READS.items():
        out.append((call, None, key, healthy, ""))
        why = "" if unsupported is not None else "Not Supported"
        out.append((call, "NVML_ERROR_NOT_SUPPORTED", key, unsupported, why))
        for error, reason in REFUSALS.items():
            if call == "nvmlDeviceGetGpuFabricInfoV" and error == "NVML_ERROR_FUNCTION_NOT_FOUND":
                out.append((call, error, key, FABRIC, ""))  # before R550: the older call
            else:
                out.append((call, error, key, None, reason))
    return out


@pytest.mark.parametrize(("call", "error", "key", "value", "reason"), grace_answers())
def test_each_grace_reading_under_each_answer(
    call: str,
    error: str | None,
    key: str,
    value: Any,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(c: str, gpu: int | None) -> BaseException | None:
        return ERRORS[error]() if error and c == call and gpu == 0 else None

    _, (gpu, other) = grace_gpus(monkeypatch, fail)
    if value is None:
        assert key not in gpu and gpu["unread"] == {key: reason}
    else:
        assert gpu[key] == value and "unread" not in gpu
    # the rest of the GPU, and the other GPU, read as ever
    assert all(k in gpu for k in NEW_READINGS if k != key)
    assert other["host_link"] == "c2c" and other["fabric"] == FABRIC and "unread" not in other


def test_the_older_fabric_call_fails_soft_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver before R550 (no GpuFabricInfoV) whose older call refuses: unread, or no
    fabric where it answers NotSupported."""
    for error, want in (
        ("NVML_ERROR_NO_PERMISSION", None),
        ("NVML_ERROR_FUNCTION_NOT_FOUND", None),
        ("NVML_ERROR_NOT_SUPPORTED", {"state": "not_supported"}),
    ):
        with pytest.MonkeyPatch.context() as patch:
            refuse = lambda c, gpu, e=error: (  # noqa: E731
                ERRORS[e]() if c == "nvmlDeviceGetGpuFabricInfo" else None
            )
            _, (gpu, _other) = grace_gpus(patch, refuse, old_fabric_api=True)
            assert gpu.get("fabric") == want, error
            if want is None:
                assert gpu["unread"] == {"fabric": nvml_calls.reason_of(ERRORS[error]())}


def test_a_negative_numa_node_is_no_numa_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GB200 under CDMM, or a GH200 whose GPU memory is not onlined: NVML says -1."""
    _, gpus = grace_gpus(monkeypatch, numa_nodes=(-1, 0))
    assert "numa_node" not in gpus[0] and gpus[0]["unread"] == {"numa_node": "no NUMA node"}
    assert gpus[1]["numa_node"] == 0


def test_c2c_off_is_pcie(monkeypatch: pytest.MonkeyPatch) -> None:
    _, gpus = grace_gpus(monkeypatch, c2c=0)
    assert [g["host_link"] for g in gpus] == ["pcie", "pcie"]


@pytest.mark.parametrize(
    ("state", "status", "want"),
    [
        (0, 0, {"state": "not_supported"}),
        (1, 0, {**FABRIC, "state": "not_started"}),
        (2, 0, {**FABRIC, "state": "in_progress"}),
        (3, 0, FABRIC),
        (3, pynvml.NVML_ERROR_TIMEOUT, {**FABRIC, "status": "Timeout"}),
        (3, pynvml.NVML_ERROR_NOT_SUPPORTED, {**FABRIC, "status": "Not Supported"}),
    ],
)
def test_fabric_states_and_statuses(
    state: int, status: int, want: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, gpus = grace_gpus(monkeypatch, fabric={"state": state, "status": status})
    assert gpus[0]["fabric"] == want
    # a status NVML reports of the fabric is no answer about the GPU: never lost for it
    assert "gpu_lost" not in gpus[0]


def test_a_fabric_state_nvml_does_not_document_is_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    _, gpus = grace_gpus(monkeypatch, fabric={"state": 7, "status": 0})
    assert "fabric" not in gpus[0]
    assert gpus[0]["unread"] == {"fabric": "fabric state 7 is none NVML documents"}


def test_an_empty_cpu_affinity_is_no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    _, gpus = grace_gpus(monkeypatch, affinity=("", "72-143"))
    assert gpus[0]["unread"] == {"cpu_affinity": "no CPU in NVML's affinity mask"}
    assert gpus[1]["cpu_affinity"] == "72-143"


@pytest.mark.parametrize(("cpus", "words"), [(1, 1), (64, 1), (65, 2), (144, 3), (None, 16)])
def test_the_cpu_set_covers_every_cpu(cpus: int | None, words: int) -> None:
    assert nvml_links.cpu_set_size(cpus) == words


def test_a_lost_gpu_answering_a_grace_reading_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    lost = lambda c, gpu: (  # noqa: E731
        pynvml.NVMLError_GpuIsLost() if c == "nvmlDeviceGetCpuAffinity" and gpu == 1 else None
    )
    _, gpus = grace_gpus(monkeypatch, lost)
    assert gpus[1]["gpu_lost"] == "cpu_affinity: GPU is lost"


# The same readings through the real pynvml wrappers, over a C library of Python functions
# (c_library): what the wrappers pass (ctypes references, cpuSetSize) and read back.
GRACE_CALLS = (
    "nvmlDeviceGetC2cModeInfoV",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetGpuFabricInfo",
)
SUCCESS = pynvml.NVML_SUCCESS


def c2c_symbol(enabled: int) -> Callable[..., int]:
    def answer(handle: Any, info: Any) -> int:
        info._obj.isC2cEnabled = enabled
        return SUCCESS

    return answer


def numa_symbol(node: int) -> Callable[..., int]:
    def answer(handle: Any, out: Any) -> int:
        out._obj.value = node
        return SUCCESS

    return answer


def affinity_symbol(cpus: str, sizes: list[int]) -> Callable[..., int]:
    def answer(handle: Any, size: int, out: Any) -> int:
        sizes.append(size)
        for word, mask in enumerate(masks_of(cpus, size)):
            out._obj[word] = mask
        return SUCCESS

    return answer


def fabric_symbol(state: int) -> Callable[..., int]:
    def answer(handle: Any, out: Any) -> int:
        host = Host()
        host.fabric = {"state": state, "status": SUCCESS}
        return host._fabric_into(out._obj)

    return answer


def refuse(code: int) -> Callable[..., int]:
    return lambda *args: code


def test_the_real_wrappers_read_a_gb200_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 2 of a GB200 compute tray (144 CPUs, its Grace's 72-143), in a completed fabric,
    under CDMM (no NUMA node of GPU memory)."""
    Host().install(monkeypatch, keep=GRACE_CALLS)
    monkeypatch.setattr(os, "cpu_count", lambda: 144)
    sizes: list[int] = []
    c_library(
        monkeypatch,
        {
            "nvmlDeviceGetC2cModeInfoV": c2c_symbol(1),
            "nvmlDeviceGetNumaNodeId": numa_symbol(-1),
            "nvmlDeviceGetCpuAffinity": affinity_symbol("72-143", sizes),
            "nvmlDeviceGetGpuFabricInfoV": fabric_symbol(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED),
        },
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert (gpu["host_link"], gpu["cpu_affinity"], gpu["fabric"]) == ("c2c", "72-143", FABRIC)
    assert gpu["unread"] == {"numa_node": "no NUMA node"}
    assert sizes == [3, 3]


def test_the_real_wrappers_on_an_x86_host_without_c2c_or_fabric(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Host().install(monkeypatch, keep=GRACE_CALLS)
    not_supported = refuse(pynvml.NVML_ERROR_NOT_SUPPORTED)
    c_library(
        monkeypatch,
        {
            "nvmlDeviceGetC2cModeInfoV": not_supported,
            "nvmlDeviceGetNumaNodeId": not_supported,
            "nvmlDeviceGetCpuAffinity": refuse(pynvml.NVML_ERROR_NO_PERMISSION),
            "nvmlDeviceGetGpuFabricInfoV": fabric_symbol(
                pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
            ),
        },
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert (gpu["host_link"], gpu["fabric"]) == ("pcie", {"state": "not_supported"})
    assert gpu["unread"] == {
        "numa_node": "Not Supported",
        "cpu_affinity": "Insufficient Permissions",
    }


def test_the_real_wrappers_over_a_driver_before_r550(monkeypatch: pytest.MonkeyPatch) -> None:
    """No C2C or GpuFabricInfoV symbol (FunctionNotFound): the host link is unread, the
    fabric is read through the older call."""
    Host().install(monkeypatch, keep=GRACE_CALLS)
    c_library(
        monkeypatch,
        {
            "nvmlDeviceGetNumaNodeId": numa_symbol(1),
            "nvmlDeviceGetCpuAffinity": affinity_symbol("0-71", []),
            "nvmlDeviceGetGpuFabricInfo": fabric_symbol(pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS),
        },
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert gpu["unread"] == {"host_link": "Function Not Found"}
    assert (gpu["numa_node"], gpu["cpu_affinity"]) == (1, "0-71")
    assert gpu["fabric"] == {**FABRIC, "state": "in_progress"}


class Binding12535FabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvidia-ml-py 12.535 declares it: a c_char UUID, partitionId."""

    _fields_ = [
        ("clusterUuid", ctypes.c_char * 16),
        ("status", ctypes.c_uint),
        ("partitionId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class Binding13610FabricInfo(ctypes.Structure):
    """As nvidia-ml-py 13.610 declares it: an 80-byte UUID (seen on a real H200,
    docs/gpu-runs/2026-11-27-h200/grace-readings.json), so every field after it is misplaced."""

    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 80),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


def driver_fabric(raw_uuid: bytes, clique: int, state: int) -> Callable[..., int]:
    """nvmlDeviceGetGpuFabricInfo as the driver answers: nvml.h's layout written at the
    pointer, whatever structure the caller passed."""

    def answer(handle: Any, out: Any) -> int:
        filled = struct.pack("<16sIII", raw_uuid, SUCCESS, clique, state)
        ctypes.memmove(ctypes.addressof(out._obj), filled, len(filled))
        return SUCCESS

    return answer


OLD_BINDING_LACKS = (
    "nvmlDeviceGetC2cModeInfoV",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetGpuFabricInfoV",
    "c_nvmlGpuFabricInfoV_t",
    "c_nvmlC2cModeInfo_v1_t",
)


def test_an_nvidia_ml_py_12_535_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oldest binding imagekit installs has no C2C, NUMA node or GpuFabricInfoV wrapper
    (seen on a real H200 host, docs/gpu-runs/2026-11-27-h200), names the clique partitionId
    and reads the UUID as text cut at its first NUL byte. The driver's C2C and NUMA symbols
    are called as nvml.h declares them."""
    Host().install(monkeypatch, keep=GRACE_CALLS)
    for name in OLD_BINDING_LACKS:
        monkeypatch.delattr(pynvml, name)
    monkeypatch.setattr(pynvml, "c_nvmlGpuFabricInfo_t", Binding12535FabricInfo)
    c_library(
        monkeypatch,
        {
            # a NUL byte first: read as text, the UUID would end there
            "nvmlDeviceGetGpuFabricInfo": driver_fabric(bytes(range(16)), 7, 3),
            "nvmlDeviceGetC2cModeInfoV": c2c_symbol(1),
            "nvmlDeviceGetNumaNodeId": numa_symbol(4),
            "nvmlDeviceGetCpuAffinity": affinity_symbol("0-71", []),
        },
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert gpu["fabric"] == {
        "state": "completed",
        "status": "success",
        "clique_id": 7,
        "cluster_uuid": "00010203-0405-0607-0809-0a0b0c0d0e0f",
    }
    assert (gpu["host_link"], gpu["numa_node"], gpu["cpu_affinity"]) == ("c2c", 4, "0-71")
    assert "unread" not in gpu


def test_the_older_fabric_call_reads_nvml_hs_layout_not_the_bindings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver without GpuFabricInfoV under nvidia-ml-py 13.610: its structure would put
    the state 64 bytes past where the driver wrote it and read a completed fabric as
    not_supported; the reader's own (nvml.h's) reads it right."""
    Host().install(monkeypatch, keep=GRACE_CALLS)
    monkeypatch.setattr(pynvml, "c_nvmlGpuFabricInfo_t", Binding13610FabricInfo)
    uuid_bytes = bytes.fromhex(CLUSTER.replace("-", ""))
    c_library(
        monkeypatch,
        {
            "nvmlDeviceGetC2cModeInfoV": c2c_symbol(1),
            "nvmlDeviceGetNumaNodeId": numa_symbol(-1),
            "nvmlDeviceGetCpuAffinity": affinity_symbol("0-71", []),
            "nvmlDeviceGetGpuFabricInfo": driver_fabric(uuid_bytes, FABRIC["clique_id"], 3),
        },
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert gpu["fabric"] == FABRIC


def test_an_old_binding_over_an_old_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the binding's wrapper nor the driver's symbol: unread, in NVML's words."""
    Host().install(monkeypatch, keep=GRACE_CALLS)
    for name in OLD_BINDING_LACKS:
        monkeypatch.delattr(pynvml, name)
    refused = refuse(pynvml.NVML_ERROR_NOT_SUPPORTED)
    c_library(
        monkeypatch,
        {"nvmlDeviceGetCpuAffinity": refused, "nvmlDeviceGetGpuFabricInfo": refused},
    )
    _, (gpu, _other) = nvml.read_nvml()
    assert gpu["fabric"] == {"state": "not_supported"}
    assert gpu["unread"] == {
        "host_link": "Function Not Found",
        "numa_node": "Function Not Found",
        "cpu_affinity": "Not Supported",
    }


@pytest.mark.parametrize(
    ("xids", "level"), [({1: [79]}, Status.FAILED), ({1: [13]}, Status.WARNED), ({}, None)]
)
def test_xid_events_during_the_run_reach_the_verdict(
    xids: dict[int, list[int]], level: Status | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real pynvml: GPU 1 raises Xid 79 (off the bus) or 13 (an application's
    fault) between the first reading and the last; the watch's own event set delivers it."""
    host = Host(mig_gpu=None)
    host.xids = {gpu: list(events) for gpu, events in xids.items()}
    host.install(monkeypatch)
    snap = host_snapshot()
    assert [g["xid_events"] for g in snap["gpus"]] == [xids.get(0, []), xids.get(1, [])]
    found = {(f.level, f.rule, f.gpu) for f in health.health_findings(typed(snap))[0]}
    assert {(lv, gpu) for lv, rule, gpu in found if rule == "xid"} == (
        {(level, 1)} if level else set()
    )


def test_nvml_counters_reach_the_snapshot_and_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    """SRAM and lifetime ECC counts through the real pynvml, with its own constants."""

    class Worn(Host):
        def nvmlDeviceGetMemoryErrorCounter(
            self, h: Handle, kind: int, counter: int, location: int
        ) -> int:
            assert (counter, location) == (
                pynvml.NVML_AGGREGATE_ECC,
                pynvml.NVML_MEMORY_LOCATION_SRAM,
            )
            return 3 if kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED and h.gpu == 0 else 0

        def nvmlDeviceGetTotalEccErrors(self, h: Handle, kind: int, counter: int) -> int:
            return 7 if counter == pynvml.NVML_AGGREGATE_ECC else 0

    Worn(mig_gpu=None).install(monkeypatch)
    snap = host_snapshot()
    gpu0 = snap["gpus"][0]
    assert (gpu0["ecc_sram_uncorrected"], gpu0["ecc_sram_corrected"]) == (3, 0)
    assert gpu0["ecc_aggregate_uncorrected"] == 7 and gpu0["ecc_volatile_uncorrected"] == 0
    found = {(f.level, f.rule, f.gpu) for f in health.health_findings(typed(snap))[0]}
    assert (Status.FAILED, "ecc-sram", 0) in found and (Status.FAILED, "ecc-sram", 1) not in found
    assert {(Status.WARNED, "ecc-aggregate", 0), (Status.WARNED, "ecc-aggregate", 1)} <= found
