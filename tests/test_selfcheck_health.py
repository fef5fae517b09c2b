"""The GPU count and hardware health verdicts over recorded host snapshots (real device
names, memory sizes, drivers and link counts; each file's `_source` cites where its readings
come from), the rules one by one, and the NVML reader over a fake pynvml module."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from imagekit.contract.checks import Status
from imagekit.contract.host_snapshot import Gpu
from imagekit.selfcheck.readers import clock_sampler, nvml
from imagekit.selfcheck.verdicts import health
from imagekit.selfcheck.verdicts.findings import Finding

from .conftest import typed

SNAPSHOTS = Path(__file__).parent / "data" / "snapshots"

# file -> the (rule, GPU) of every Status.FAILED its snapshot must give, no more, no fewer.
EXPECTED: dict[str, set[tuple[str, int | None]]] = {
    "h100-1x": set(),
    "a100-sxm4-80gb": set(),
    "l4": set(),
    "h200": set(),
    "b200": set(),
    "gh200": set(),  # the host link is NVLink-C2C: no PCIe rule
    "gb200-nvl72": set(),
    "h100-8x": set(),
    "h100-mig-slice": set(),  # whole-GPU readings are skipped, never failed, on a slice
    "h100-8x-missing-gpu": {("gpu-count", None)},
    "a100-ecc-uncorrected": {("ecc-uncorrected", 0)},
    "h100-8x-row-remap-pending": {("row-remap-pending", 3)},
    "l4-pcie-x8": {("pcie-width", 0)},
    "h100-8x-nvlink-down": {("nvlink-down", 5)},
    "a100-exclusive-process-busy": {("gpu-exclusive-busy", 0), ("gpu-exclusive-busy", 1)},
    "h100-1x-hw-slowdown": {("clocks-hw-slowdown", 0)},
}


def load(name: str) -> dict[str, Any]:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


def findings(snapshot: dict[str, Any]) -> list[Finding]:
    return health.count_findings(typed(snapshot))[0] + health.health_findings(typed(snapshot))[0]


def test_every_recorded_snapshot_is_judged_and_cites_its_source() -> None:
    assert sorted(p.stem for p in SNAPSHOTS.glob("*.json")) == sorted(EXPECTED)
    for name in EXPECTED:
        source = load(name)["_source"]
        assert source["from"] and all(isinstance(s, str) and s for s in source["from"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_snapshot_fails_exactly_as_expected(name: str) -> None:
    snapshot = load(name)
    failed = {(f.rule, f.gpu) for f in findings(snapshot) if f.level == Status.FAILED}
    assert failed == EXPECTED[name]
    statuses = {
        health.check_gpus(typed(snapshot)).status,
        health.check_health(typed(snapshot)).status,
    }
    assert ("failed" in statuses) is bool(EXPECTED[name])


def test_fail_messages_name_the_gpu_the_reading_and_the_rule() -> None:
    (width,) = [f for f in findings(load("l4-pcie-x8")) if f.level == Status.FAILED]
    assert width.text() == (
        "GPU 0: PCIe link at Gen4 x8, the maximum of this card in this slot is Gen4 x16 under "
        "load: the link trained down (reseat the card, check the riser and the slot's BIOS "
        "setting)"
    )
    (link,) = [f for f in findings(load("h100-8x-nvlink-down")) if f.level == Status.FAILED]
    assert link.text().startswith("GPU 5: 17 of 18 NVLinks active: every link of an SXM GPU")
    (count,) = [f for f in findings(load("h100-8x-missing-gpu")) if f.level == Status.FAILED]
    assert "torch 7, NVML 7, /dev/nvidia* 7, expected 8" in count.message


def test_healthy_h100_node_passes_with_its_warnings_listed() -> None:
    result = health.check_health(typed(load("h100-8x")))
    assert result.status == "passed"
    assert result.measurements["warning"].count("persistence mode is off") == 8
    gpus = health.check_gpus(typed(load("h100-8x")))
    assert gpus.status == "passed"
    assert gpus.measurements["counts"] == {
        "torch": 8,
        "NVML": 8,
        "/dev/nvidia*": 8,
        "expected": 8,
    }


def test_a_mig_slice_skips_the_whole_gpu_readings_and_still_judges_the_rest() -> None:
    snapshot = load("h100-mig-slice")
    found = health.health_findings(typed(snapshot))[0]
    mig = {
        f.rule for f in found if f.level == Status.SKIPPED and f.message.startswith("MIG slice:")
    }
    assert mig == {
        "ecc-uncorrected",
        "ecc-sram",
        "ecc-aggregate",
        "row-remap-pending",
        "pcie-link",
        "pcie-replays",
        "power-limit",
        "temperature",
        "nvlink-down",
    }
    assert health.check_health(typed(snapshot)).status == "passed"
    # torch counts the slice, NVML and /dev/nvidia* the GPU: compared within each side
    assert health.check_gpus(typed(snapshot)).status == "passed"
    not_read = [f.message for f in found if f.rule == "other-processes"]
    assert not_read == ["other processes (NVML said: Insufficient Permissions)"]


def test_exclusive_process_busy_forbids_parallel_checks() -> None:
    ok, why = health.parallel_ok(typed(load("a100-exclusive-process-busy")))
    assert not ok and why == "GPU 0 is EXCLUSIVE_PROCESS; GPU 1 is EXCLUSIVE_PROCESS"
    assert health.parallel_ok(typed(load("h100-8x"))) == (True, "")


# -- GPU counts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (None, None),
        ("all", None),
        ("", None),
        ("/var/run/nvidia-container-devices", None),  # the device plugin's volume mounts
        ("none", 0),
        ("void", 0),
        ("0", 1),
        ("0,1,2,3", 4),
        ("GPU-8f6e2b1a-3c4d-4e5f-9a0b-1c2d3e4f5a6b,GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", 2),
        ("MIG-5c3e1f2a-7b8c-5d9e-a0b1-c2d3e4f5a6b7", 1),
    ],
)
def test_visible_devices_count(value: str | None, count: int | None) -> None:
    assert health.visible_count(value) == count


def cpu_host(**overrides: Any) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "format": 1,
        "expected_gpus": None,
        "container": {"device_nodes": [], "visible_devices": None},
        "torch": {"version": "2.8.0+cpu", "cuda": None, "cuda_available": False},
        "nvml": {"available": False, "reason": "NVML did not start: NVML Shared Library Not Found"},
    }
    snapshot.update(overrides)
    return snapshot


def test_a_cpu_only_host_with_nothing_expected_has_nothing_to_judge() -> None:
    result = health.check_gpus(typed(cpu_host()))
    assert result.status == "skipped"
    assert "no GPU on this host" in result.reason
    assert "NVML Shared Library Not Found" in result.reason


def test_gpus_expected_but_none_in_the_container_fails() -> None:
    found, judged = health.count_findings(typed(cpu_host(expected_gpus=8)))
    assert judged == 1
    (failed,) = [f for f in found if f.level == Status.FAILED]
    assert failed.message.startswith("the GPU counts disagree: /dev/nvidia* 0, expected 8. ")


def test_missing_count_sources_are_skips_and_one_source_is_not_a_pass() -> None:
    snapshot = {"nvml": {"available": True, "device_count": 2}}
    found, judged = health.count_findings(typed(snapshot))
    assert judged == 0
    assert [f.message for f in found] == [
        "torch's GPU count was not read",
        "the container's devices were not read",
        "only one GPU count to compare: NVML 2",
    ]


def test_cuda_visible_devices_takes_torch_out_of_the_comparison() -> None:
    snapshot = load("h100-8x")
    snapshot["torch"]["device_count"] = 2
    assert health.check_gpus(typed(snapshot)).status == "failed"
    snapshot["container"]["cuda_visible_devices"] = "0,1"
    result = health.check_gpus(typed(snapshot))
    assert result.status == "passed"
    assert "CUDA_VISIBLE_DEVICES=0,1 limits what torch sees" in result.reason


def test_a_privileged_container_sees_more_gpus_than_it_was_given() -> None:
    snapshot = load("h100-8x")
    snapshot["container"]["visible_devices"] = "0,1"
    found, _ = health.count_findings(typed(snapshot))
    assert [f.rule for f in found if f.level == Status.FAILED] == ["gpu-count"]
    assert "NVIDIA_VISIBLE_DEVICES 2" in found[0].message


# -- one GPU's rules ------------------------------------------------------------------------


# The counters a live run reads beside the recorded ones (issue 52), at a healthy GPU's values.
HEALTHY_COUNTERS = {
    "xid_events": [],
    "ecc_sram_uncorrected": 0,
    "ecc_sram_corrected": 0,
    "ecc_aggregate_uncorrected": 0,
    "pcie_replays_during_run": 0,
    "power_limit_w": 700,
    "power_default_limit_w": 700,
    "temperature_max_c": 70,
    "temperature_slowdown_c": 87,
}


def h100(**overrides: Any) -> dict[str, Any]:
    gpu = {**HEALTHY_COUNTERS, **load("h100-8x")["gpus"][2]}
    gpu.update(overrides)
    return gpu


def levels(gpu: dict[str, Any], peers: int = 7) -> set[tuple[str, str]]:
    return {(f.level, f.rule) for f in health.gpu_findings(typed(gpu, Gpu), peers)}


def test_a_healthy_gpu_gives_no_finding() -> None:
    assert levels(h100(persistence_mode=True)) == set()


def healthy_h100_with(readings: dict[str, Any]) -> dict[str, Any]:
    """A healthy H100's readings with these changed (None: the reading is missing)."""
    gpu = h100(persistence_mode=True)
    for key, value in readings.items():
        if value is None:
            gpu.pop(key)
        else:
            gpu[key] = value
    return gpu


@pytest.mark.parametrize(
    ("readings", "want"),
    [
        # idle: the generation drops for power saving, so it is not judged there
        ({"pcie_gen": 1, "pcie_gen_under_load": None}, {(Status.SKIPPED, "pcie-gen")}),
        ({"pcie_gen": 5, "pcie_gen_under_load": None}, set()),
        ({"pcie_gen_under_load": 3}, {(Status.FAILED, "pcie-gen")}),
        (
            {"pcie_gen": 5, "pcie_width": 8, "pcie_width_under_load": None},
            {(Status.WARNED, "pcie-width")},
        ),
        ({"pcie_width_under_load": 8}, {(Status.FAILED, "pcie-width")}),
        # a Gen5 card in a Gen4 slot: NVML's maximum is the slot's, no fault of the link
        ({"pcie_max_gen": 4, "pcie_gen_under_load": 4}, set()),
        (
            {"pcie_max_gen": None, "unread": {"pcie_max_gen": "Not Supported"}},
            {(Status.SKIPPED, "pcie-link")},
        ),
    ],
)
def test_pcie_rules(readings: dict[str, Any], want: set[tuple[str, str]]) -> None:
    assert levels(healthy_h100_with(readings)) == want


@pytest.mark.parametrize(
    ("name", "active", "total", "peers", "want"),
    [
        ("NVIDIA H100 80GB HBM3", 17, 18, 7, {(Status.FAILED, "nvlink-down")}),
        ("NVIDIA H100 80GB HBM3", 18, 18, 7, set()),
        # issue 52: a part the table gives NVLinks must show them
        ("NVIDIA H100 80GB HBM3", 0, 18, 7, {(Status.FAILED, "nvlink-visible")}),
        ("NVIDIA H100 80GB HBM3", 0, 0, 7, {(Status.FAILED, "nvlink-visible")}),  # NotSupported
        ("NVIDIA H100 80GB HBM3", 12, 12, 7, {(Status.FAILED, "nvlink-visible")}),  # 6 unseen
        ("NVIDIA H200", 0, 0, 1, {(Status.FAILED, "nvlink-visible")}),
        ("NVIDIA H200", 0, 0, 0, {(Status.SKIPPED, "nvlink-visible")}),  # the one-GPU VM
        ("NVIDIA H100 80GB HBM3", 0, 18, 0, {(Status.SKIPPED, "nvlink-visible")}),
        ("NVIDIA A100-SXM4-80GB", 11, 12, 0, {(Status.FAILED, "nvlink-down")}),
        ("NVIDIA B200", 17, 18, 7, {(Status.FAILED, "nvlink-down")}),
        ("NVIDIA H100 NVL", 0, 0, 1, {(Status.WARNED, "nvlink-visible")}),  # no bridge seen
        ("NVIDIA H100 NVL", 12, 12, 1, set()),
        ("NVIDIA H100 PCIe", 0, 18, 1, set()),  # no bridge fitted: none promised
        ("NVIDIA A100 80GB PCIe", 4, 12, 1, {(Status.WARNED, "nvlink-down")}),
        ("NVIDIA L4", 0, 0, 0, set()),
        ("NVIDIA L4", 0, 0, 1, set()),
    ],
)
def test_nvlink_rules(
    name: str, active: int, total: int, peers: int, want: set[tuple[str, str]]
) -> None:
    gpu = h100(name=name, nvlinks_active=active, nvlinks_total=total, persistence_mode=True)
    assert levels(gpu, peers) == want


def test_nvlink_not_visible_names_the_model_its_links_and_the_gpus() -> None:
    unread = h100(nvlinks_active=None, nvlinks_total=None, persistence_mode=True)
    unread["unread"] = {"nvlinks_total": "Not Supported"}
    (finding,) = [
        f for f in health.gpu_findings(typed(unread, Gpu), 7) if f.rule == "nvlink-visible"
    ]
    assert finding.level == Status.FAILED
    assert finding.text() == (
        "GPU 2: NVLink not visible: NVLink state (NVML said: Not Supported), where the H100 SXM "
        "has 18, with 8 GPUs here: the fabric manager not running, a VM without NVLink "
        "passthrough, or the links down (nvidia-smi nvlink -s)"
    )
    alone = h100(name="NVIDIA H200", nvlinks_active=0, nvlinks_total=0, persistence_mode=True)
    (said,) = [f for f in health.gpu_findings(typed(alone, Gpu), 0) if f.rule == "nvlink-visible"]
    assert said.text() == (
        "GPU 2: NVLink not visible: NVML shows 0 active of 0 links, where the H200 SXM has 18; "
        "one GPU in this container"
    )


@pytest.mark.parametrize(
    ("readings", "want"),
    [
        ({"ecc_volatile_uncorrected": 2}, {(Status.FAILED, "ecc-uncorrected")}),
        ({"remapped_rows_failure": True}, {(Status.FAILED, "row-remap-failure")}),
        (
            {"remapped_rows_pending": True, "remapped_rows_failure": True},
            {(Status.FAILED, "row-remap-pending"), (Status.FAILED, "row-remap-failure")},
        ),
        (
            {"ecc_volatile_uncorrected": None, "ecc_mode": False},
            {(Status.SKIPPED, "ecc-uncorrected")},
        ),
        # a V100 retires pages instead of remapping rows: each GPU is judged by its own
        (
            {
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
                "retired_pages_pending": True,
                "unread": {"remapped_rows_pending": "Not Supported"},
            },
            {(Status.FAILED, "retired-pages-pending")},
        ),
        (
            {
                "remapped_rows_pending": None,
                "remapped_rows_failure": None,
                "unread": {"remapped_rows_pending": "Not Supported"},
            },
            {(Status.SKIPPED, "row-remap-pending")},
        ),
        ({"compute_mode": "PROHIBITED"}, {(Status.FAILED, "compute-prohibited")}),
        ({"compute_mode": "EXCLUSIVE_PROCESS"}, set()),  # a note, not a finding
        ({"persistence_mode": False}, {(Status.WARNED, "persistence-off")}),
        ({"clock_event_reasons": ["sw_power_cap"]}, set()),  # normal under a full GEMM
        ({"clock_event_reasons": ["sw_thermal_slowdown"]}, {(Status.WARNED, "clocks-thermal")}),
        ({"clock_event_reasons": ["hw_thermal_slowdown"]}, {(Status.FAILED, "clocks-hw-slowdown")}),
        ({"clock_event_reasons": None}, {(Status.SKIPPED, "clocks-hw-slowdown")}),
        (
            {"processes": [{"pid": 31337, "used_mib": 30210, "name": "python"}]},
            {(Status.WARNED, "other-processes")},
        ),
    ],
)
def test_gpu_rules(readings: dict[str, Any], want: set[tuple[str, str]]) -> None:
    assert levels(healthy_h100_with(readings)) == want


def test_messages_carry_the_reading() -> None:
    procs = [{"pid": 31337, "used_mib": 30210, "name": "python"}]
    (found,) = health.gpu_findings(typed(h100(persistence_mode=True, processes=procs), Gpu), 7)
    assert found.text() == (
        "GPU 2: other processes hold memory on this GPU: pid 31337 (python, 30210 MiB): they "
        "share its memory and compute with the job"
    )
    (ecc,) = health.gpu_findings(
        typed(h100(persistence_mode=True, ecc_volatile_uncorrected=3), Gpu), 7
    )
    assert ecc.text().startswith("GPU 2: 3 uncorrectable ECC error(s) since the driver loaded")
    gpu = h100(persistence_mode=True, unread={"clock_event_reasons": "GPU is lost"})
    del gpu["clock_event_reasons"]
    (skipped,) = health.gpu_findings(typed(gpu, Gpu), 7)
    assert skipped.text() == (
        "GPU 2: clock event reasons during the perf measurements (NVML said: GPU is lost)"
    )


def test_exclusive_mode_is_a_note_and_serialises_the_checks() -> None:
    snapshot = load("h100-1x")
    snapshot["gpus"][0]["compute_mode"] = "EXCLUSIVE_PROCESS"
    result = health.check_health(typed(snapshot))
    assert result.status == "passed"
    assert result.measurements["note"] == (
        "GPU 0 is EXCLUSIVE_PROCESS: the self-check runs its GPU checks one at a time"
    )
    assert health.parallel_ok(typed(snapshot)) == (False, "GPU 0 is EXCLUSIVE_PROCESS")
    snapshot["gpus"][0].update(compute_mode="DEFAULT", processes=[{"pid": 7, "used_mib": 500}])
    assert health.parallel_ok(typed(snapshot)) == (False, "GPU 0 is in use by pid 7")


def test_no_gpu_readings_is_skipped_with_nvmls_reason() -> None:
    result = health.check_health(typed(cpu_host()))
    assert result.status == "skipped"
    assert result.reason == "no GPU readings: NVML did not start: NVML Shared Library Not Found"


# -- the NVML reader ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, []),
        (pynvml.nvmlClocksEventReasonGpuIdle, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x8 | 0x40, ["hw_slowdown", "hw_thermal_slowdown"]),
        (0x8 | 0x80, ["hw_slowdown", "hw_power_brake_slowdown"]),
        (0x20, ["sw_thermal_slowdown"]),
        (
            0x2 | 0x10 | 0x100,
            ["applications_clocks_setting", "sync_boost", "display_clock_setting"],
        ),
        (0x4 | 0x400, ["sw_power_cap", "unknown_0x400"]),
    ],
)
def test_reason_names(mask: int, names: list[str]) -> None:
    assert clock_sampler.reason_names(mask) == names


def test_reason_bits_are_nvmls() -> None:
    for bit, name in clock_sampler.REASON_BITS:
        camel = "".join(part.capitalize() for part in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit


class FakeNvml:
    """pynvml's API over a table: devices[i][function name] is the value (or a callable of
    the extra arguments) or an NVMLError to raise; pynvml's own constants and errors."""

    def __init__(self, devices: list[dict[str, Any]], init_error: Exception | None = None):
        for name in dir(pynvml):
            if name.startswith(("NVML", "nvmlClocks", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self.devices = devices
        self.init_error = init_error
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        if pid == 4242:
            raise pynvml.NVMLError_NotFound()
        return b"python3"

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvmlDevice"):
            raise AttributeError(name)

        def call(handle: int, *args: Any) -> Any:
            value = self.devices[handle].get(name, pynvml.NVMLError_NotSupported())
            if isinstance(value, Exception):
                raise value
            return value(*args) if callable(value) else value

        return call


SRAM_CORRECTED = (
    pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
    pynvml.NVML_AGGREGATE_ECC,
    pynvml.NVML_MEMORY_LOCATION_SRAM,
)


def h100_device(**overrides: Any) -> dict[str, Any]:
    links = [1] * 17 + [0]

    def link_state(link: int) -> int:
        if link >= len(links):
            raise pynvml.NVMLError_InvalidArgument()
        return links[link]

    device = {
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": "GPU-5d1a2e3b-7c4f-4d8e-9a0b-1c2d3e4f5a6b",
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=81559 << 20),
        "nvmlDeviceGetCudaComputeCapability": (9, 0),
        "nvmlDeviceGetComputeMode": pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
        "nvmlDeviceGetPersistenceMode": pynvml.NVML_FEATURE_ENABLED,
        "nvmlDeviceGetMigMode": [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE],
        "nvmlDeviceGetEccMode": [pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED],
        "nvmlDeviceGetTotalEccErrors": lambda kind, counter: (
            2
            if (kind, counter)
            == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
            else 99
        ),
        "nvmlDeviceGetMemoryErrorCounter": lambda kind, counter, location: (
            12 if (kind, counter, location) == SRAM_CORRECTED else 0
        ),
        "nvmlDeviceGetPcieReplayCounter": 7,
        "nvmlDeviceGetPowerUsage": 650_000,  # mW
        "nvmlDeviceGetTemperature": lambda sensor: 70,
        "nvmlDeviceGetEnforcedPowerLimit": 700_000,
        "nvmlDeviceGetPowerManagementDefaultLimit": 700_000,
        "nvmlDeviceGetTemperatureThreshold": lambda kind: 87,
        "nvmlDeviceGetRemappedRows": (3, 1, 1, 0),
        "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVMLError_NotSupported(),
        "nvmlDeviceGetCurrPcieLinkGeneration": 1,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetNvLinkState": link_state,
        "nvmlDeviceGetNvLinkVersion": lambda link: pynvml.NVML_NVLINK_VERSION_4_0,
        "nvmlDeviceGetComputeRunningProcesses": [
            SimpleNamespace(pid=1000, usedGpuMemory=512 << 20),
            SimpleNamespace(pid=4242, usedGpuMemory=None),
        ],
        # socket 0 of a 2 x 56-core host: its cores 0-55 and their hyperthreads 112-167
        "nvmlDeviceGetCpuAffinity": lambda size: [(1 << 56) - 1, 0xFFFF << 48, (1 << 40) - 1, 0],
    }
    device.update(overrides)
    return device


def test_reader_reads_every_field_of_an_h100() -> None:
    fake = FakeNvml([h100_device()])
    info, gpus = nvml.read_with(fake, own_pids={1000})
    assert info == {"available": True, "reason": "", "driver": "580.95.05", "device_count": 1}
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-5d1a2e3b-7c4f-4d8e-9a0b-1c2d3e4f5a6b",
            "memory_total_mib": 81559,
            "compute_capability": "9.0",
            "compute_mode": "EXCLUSIVE_PROCESS",
            "persistence_mode": True,
            "mig_mode": False,
            "ecc_mode": True,
            "ecc_volatile_uncorrected": 2,
            "ecc_aggregate_uncorrected": 99,
            "ecc_sram_uncorrected": 0,
            "ecc_sram_corrected": 12,
            "remapped_rows_pending": True,
            "remapped_rows_failure": False,
            "pcie_gen": 1,
            "pcie_width": 16,
            "pcie_max_gen": 5,
            "pcie_max_width": 16,
            "pcie_replays": 7,
            "nvlinks_active": 17,
            "nvlinks_total": 18,
            "nvlink_version": 4,
            "host_link": "pcie",  # NVML: C2C NotSupported
            "cpu_affinity": "0-55,112-167",
            "fabric": {"state": "not_supported"},
            "processes": [{"pid": 4242, "used_mib": None, "name": ""}],
            "unread": {"retired_pages_pending": "Not Supported", "numa_node": "Not Supported"},
        }
    ]
    assert fake.shutdowns == 1


def test_reader_leaves_out_what_nvml_refuses_with_its_reason() -> None:
    refused = h100_device(
        nvmlDeviceGetRemappedRows=pynvml.NVMLError_NoPermission(),
        nvmlDeviceGetTotalEccErrors=pynvml.NVMLError_NotSupported(),
        nvmlDeviceGetNvLinkState=pynvml.NVMLError_NoPermission(),
        nvmlDeviceGetMigMode=pynvml.NVMLError_NotSupported(),  # no MIG on this GPU
        nvmlDeviceGetComputeRunningProcesses=pynvml.NVMLError_GpuIsLost(),
    )
    _, (gpu,) = nvml.read_with(FakeNvml([refused]))
    assert gpu["mig_mode"] is False
    assert gpu["unread"] == {
        "ecc_volatile_uncorrected": "Not Supported",
        "ecc_aggregate_uncorrected": "Not Supported",
        "remapped_rows_pending": "Insufficient Permissions",
        "remapped_rows_failure": "Insufficient Permissions",
        "retired_pages_pending": "Not Supported",
        "nvlinks_active": "Insufficient Permissions",
        "nvlinks_total": "Insufficient Permissions",
        "nvlink_version": "Insufficient Permissions",
        "numa_node": "Not Supported",
        "processes": "GPU is lost",
    }
    for key in gpu["unread"]:
        assert key not in gpu
    # and the verdict says so instead of passing it
    skips = {f.rule for f in health.gpu_findings(typed(gpu, Gpu)) if f.level == Status.SKIPPED}
    assert {"ecc-uncorrected", "nvlink-visible", "other-processes"} <= skips


def test_a_gpu_without_nvlink_has_zero_links() -> None:
    l4 = h100_device(nvmlDeviceGetName="NVIDIA L4")
    del l4["nvmlDeviceGetNvLinkState"]  # the fake answers NotSupported for every link
    _, (gpu,) = nvml.read_with(FakeNvml([l4]))
    assert (gpu["nvlinks_active"], gpu["nvlinks_total"]) == (0, 0)
    assert "nvlink_version" not in gpu and "nvlink_version" not in gpu.get("unread", {})


def test_without_nvml_nothing_is_read_and_the_reason_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound())
    assert nvml.read_with(missing) == (
        {"available": False, "reason": "NVML did not start: NVML Shared Library Not Found"},
        [],
    )
    monkeypatch.setitem(sys.modules, "pynvml", None)
    info, gpus = nvml.read_nvml()
    assert info["available"] is False and "nvidia-ml-py" in info["reason"] and gpus == []


def test_sampler_keeps_reasons_seen_twice_and_the_fastest_link() -> None:
    masks = iter([0x4, 0x4 | 0x8, 0x4 | 0x40 | 0x8, 0x4 | 0x40 | 0x8, 0x4])
    gens = iter([1, 5, 5, 5, 5])
    fake = FakeNvml(
        [
            h100_device(
                nvmlDeviceGetCurrentClocksEventReasons=lambda: next(masks),
                nvmlDeviceGetCurrPcieLinkGeneration=lambda: next(gens),
                nvmlDeviceGetCurrPcieLinkWidth=8,
            )
        ]
    )
    sampler = clock_sampler.ClockSampler([0], nvml=fake)
    assert sampler.open()
    for _ in range(5):
        sampler.sample()
    sampler.close()
    readings = sampler.readings()[0]
    assert readings["clock_event_reasons"] == [
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
    ]
    assert readings["pcie_gen_under_load"] == 5 and readings["pcie_width_under_load"] == 8
    assert readings["clock_samples"] == 5


def test_sampler_falls_back_to_throttle_reasons_and_records_what_failed() -> None:
    fake = FakeNvml(
        [
            h100_device(
                nvmlDeviceGetCurrentClocksEventReasons=pynvml.NVMLError_FunctionNotFound(),
                nvmlDeviceGetCurrentClocksThrottleReasons=0x20,
                nvmlDeviceGetCurrPcieLinkWidth=pynvml.NVMLError_NotSupported(),
            ),
            h100_device(nvmlDeviceGetCurrentClocksEventReasons=pynvml.NVMLError_GpuIsLost()),
        ]
    )
    sampler = clock_sampler.ClockSampler([0, 1], nvml=fake, min_samples=1)
    assert sampler.open()
    sampler.sample()
    sampler.close()
    readings = sampler.readings()
    assert readings[0]["clock_event_reasons"] == ["sw_thermal_slowdown"]
    assert readings[0]["unread"] == {"pcie_width_under_load": "Not Supported"}
    assert (readings[0]["power_max_w"], readings[0]["temperature_max_c"]) == (650, 70)
    assert (readings[0]["power_limit_w"], readings[0]["temperature_slowdown_c"]) == (700, 87)
    assert "clock_event_reasons" not in readings[1]
    assert readings[1]["unread"] == {"clock_event_reasons": "GPU is lost"}
    gpus = [{"index": 1, "unread": {"processes": "GPU is lost"}}]
    clock_sampler.merge_readings(gpus, readings)
    assert gpus[0]["unread"] == {"processes": "GPU is lost", "clock_event_reasons": "GPU is lost"}
    assert gpus[0]["pcie_gen_under_load"] == 1


def test_sampler_thread_samples_until_the_block_ends() -> None:
    started = threading.Event()

    def mask() -> int:
        started.set()
        return 0x4

    fake = FakeNvml([h100_device(nvmlDeviceGetCurrentClocksEventReasons=mask)])
    with clock_sampler.ClockSampler([0], interval=0.01, nvml=fake) as sampler:
        assert started.wait(5)
    assert sampler.reasons() == {0: ["sw_power_cap"]}
    assert fake.shutdowns == 1
    assert sampler.error == ""


def test_sampler_without_nvml_samples_nothing_and_says_why() -> None:
    fake = FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded())
    with clock_sampler.ClockSampler([0], nvml=fake) as sampler:
        pass
    why = "NVML did not start: Driver Not Loaded"
    assert sampler.error == why
    # nothing sampled, and each GPU's readings say why (the health verdict skips them)
    assert sampler.readings() == {
        0: {"clock_samples": 0, "unread": dict.fromkeys(clock_sampler.SAMPLED, why)}
    }


def test_a_clock_cut_says_in_how_many_samples_it_was_seen() -> None:
    """Power cap told apart from thermal and hardware slowdown over the whole load: each
    reason with its share of the sampler's samples."""
    gpu = h100(
        persistence_mode=True,
        clock_event_reasons=["sw_power_cap", "hw_slowdown"],
        clock_event_counts={"sw_power_cap": 38, "hw_slowdown": 12},
        clock_samples=40,
    )
    (finding,) = [
        f for f in health.gpu_findings(typed(gpu, Gpu), 7) if f.rule == "clocks-hw-slowdown"
    ]
    assert finding.message.startswith(
        "clocks cut by hw_slowdown (in 12 of 40 samples) during the perf measurements"
    )
    capped = h100(persistence_mode=True, clock_event_reasons=["sw_power_cap"])
    assert not [
        f for f in health.gpu_findings(typed(capped, Gpu), 7) if f.rule.startswith("clocks")
    ]
