"""Which GPU is which: $CUDA_VISIBLE_DEVICES as CUDA reads it, torch's devices matched to
NVML's GPUs by UUID (never by position where the UUID is known), and the perf probe end to
end on a two-GPU host where torch may use only GPU 1: the clock sampler watches GPU 1, every
figure lands on GPU 1, and the idle GPU 0 is not failed for its idle PCIe link.
"""

from __future__ import annotations

import json
import sys
import types
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from imagekit.contract.checks import CheckResult, Status, passed
from imagekit.contract.host_snapshot import Gpu
from imagekit.selfcheck.probes import copies, perf
from imagekit.selfcheck.readers import nvml, snapshot
from imagekit.selfcheck.run import judge
from imagekit.selfcheck.run.main import main
from imagekit.selfcheck.verdicts import devices, health
from imagekit.selfcheck.verdicts.devices import Match, match_devices, parse_visible, resolve_visible

from .conftest import typed
from .test_selfcheck_nvml_faults import H100, MIG_UUIDS, UUIDS, Host

# -- parsing ------------------------------------------------------------------------------------

# CUDA's rules as torch.cuda._parse_visible_devices models them (its tests' table), and the
# forms CUDA documents for UUIDs and MIG devices.
PARSED: list[tuple[str | None, list[int | str] | None]] = [
    (None, None),  # unset: every GPU
    ("", []),  # empty: no GPU
    ("0", [0]),
    ("1", [1]),
    ("2,1", [2, 1]),  # CUDA's order is the list's
    ("0,1,", [0, 1]),  # an empty entry is invalid: CUDA stops there
    ("1gpu2,2ampere", [1, 2]),  # an entry's leading digits, as strtoul
    ("0, 1, 2, -1, 3", [0, 1, 2]),  # a negative entry ends the list
    ("0, 1, 2, 1", []),  # an entry given twice: none
    ("2, +3, -0, 5", [2, 3, 0, 5]),
    ("one,two,3,4", []),
    ("4,3,two,one", [4, 3]),
    ("+", []),
    ("GPU-9e8d35e3", ["GPU-9e8d35e3"]),  # a UUID prefix
    (UUIDS[1], [UUIDS[1]]),
    (f"{UUIDS[1]},{UUIDS[0]}", [UUIDS[1], UUIDS[0]]),
    (f"{UUIDS[1]}, {UUIDS[0]}", [UUIDS[1], UUIDS[0]]),
    ("GPU-123, 2", ["GPU-123"]),  # indices are no part of a UUID list
    (f"{UUIDS[0]},{UUIDS[0]}", []),
    ("MIG-89c850dc", ["MIG-89c850dc"]),
    (MIG_UUIDS[0], [MIG_UUIDS[0]]),
    (f"MIG-{UUIDS[1]}/1/0", [f"MIG-{UUIDS[1]}/1/0"]),  # legacy (R450/R460) MIG-GPU-<uuid>/gi/ci
    (f"{MIG_UUIDS[0]},{UUIDS[0]}", [MIG_UUIDS[0]]),  # a GPU UUID ends a MIG list
]


@pytest.mark.parametrize(("value", "want"), PARSED)
def test_cuda_visible_devices_parse(value: str | None, want: list[int | str] | None) -> None:
    assert parse_visible(value) == want


# torch's own partial-UUID table (test_partial_uuid_resolver), resolved against NVML's GPUs.
TORCH_UUIDS = [
    "GPU-9942190a-aa31-4ff1-4aa9-c388d80f85f1",
    "GPU-9e8d35e3-a134-0fdd-0e01-23811fdbd293",
    "GPU-e429a63e-c61c-4795-b757-5132caeb8e70",
    "GPU-eee1dfbc-0a0f-6ad8-5ff6-dc942a8b9d98",
    "GPU-bbcd6503-5150-4e92-c266-97cc4390d04e",
    "GPU-472ea263-58d7-410d-cc82-f7fdece5bd28",
    "GPU-e56257c4-947f-6a5b-7ec9-0f45567ccf4e",
    "GPU-1c20e77d-1c1a-d9ed-fe37-18b8466a78ad",
]
EIGHT = [{"index": i, "uuid": u} for i, u in enumerate(TORCH_UUIDS)]
TWO_MIG = [
    {"index": 0, "uuid": UUIDS[0], "mig_mode": False},
    {"index": 1, "uuid": UUIDS[1], "mig_mode": True, "mig_uuids": MIG_UUIDS},
]


@pytest.mark.parametrize(
    ("value", "gpus", "want"),
    [
        ("GPU-9e8d35e3", EIGHT, [1]),
        ("GPU-e4,GPU-9e8d35e3", EIGHT, [2, 1]),
        ("GPU-9e8d35e3,GPU-1,GPU-47", EIGHT, [1, 7, 5]),
        ("GPU-123,GPU-9e8d35e3", EIGHT, []),  # the first invalid UUID ends it
        ("GPU-9e8d35e3,GPU-123,GPU-47", EIGHT, [1]),
        ("GPU-9e8d35e3,GPU-e,GPU-47", EIGHT, [1]),  # so does an ambiguous prefix
        ("GPU-9e8d35e3,GPU-47,GPU-9e8", EIGHT, []),  # the same GPU twice: none
        ("1, 0", EIGHT[:2], [1, 0]),
        ("1, 5, 0", EIGHT[:2], [1]),  # an index past the last GPU ends it
        ("1", TWO_MIG, [1]),
        (MIG_UUIDS[1], TWO_MIG, [1]),  # a MIG device names the GPU it is a slice of
        (MIG_UUIDS[0][:12], TWO_MIG, [1]),
        (f"MIG-{UUIDS[1]}/1/0", TWO_MIG, [1]),
        (f"MIG-{UUIDS[0]}/1/0", TWO_MIG, [0]),
        ("MIG-ffffffff", TWO_MIG, []),
        ("", TWO_MIG, []),
    ],
)
def test_visible_entries_resolve_to_nvml_indices(
    value: str, gpus: list[dict[str, Any]], want: list[int]
) -> None:
    assert resolve_visible(parse_visible(value) or [], [typed(g, Gpu) for g in gpus]) == want


class CUuuid:
    """torch's _CUuuid: str() is the bare 8-4-4-4-12 hex, `.bytes` its 16 bytes as ints."""

    def __init__(self, text: str) -> None:
        self.value = uuidlib.UUID(text.split("-", 1)[1])

    def __str__(self) -> str:
        return str(self.value)

    @property
    def bytes(self) -> list[int]:
        return list(self.value.bytes)


def test_uuid_spellings_are_one_key() -> None:
    bare = UUIDS[1].removeprefix("GPU-")
    for spelling in (
        UUIDS[1],
        UUIDS[1].upper(),
        bare,
        f"MIG-{bare}",
        CUuuid(UUIDS[1]),
        uuidlib.UUID(bare),
        uuidlib.UUID(bare).bytes,
        types.SimpleNamespace(bytes=list(uuidlib.UUID(bare).bytes)),
    ):
        assert devices.uuid_key(spelling) == bare, spelling
    for other in (None, "", "GPU-9e8d35e3", f"MIG-{UUIDS[1]}/1/0", b"short", 7):
        assert devices.uuid_key(other) is None, other


# -- matching torch's devices to NVML's GPUs ------------------------------------------------------


def test_devices_match_by_uuid_whatever_the_order() -> None:
    torch_side = [str(CUuuid(UUIDS[1])), str(CUuuid(UUIDS[0]))]
    assert match_devices(torch_side, TWO_MIG, "1,0", "PCI_BUS_ID") == [
        Match(0, 1, UUIDS[1], "uuid"),
        Match(1, 0, UUIDS[0], "uuid"),
    ]
    # the UUID wins over CUDA_VISIBLE_DEVICES and the order
    assert match_devices(torch_side[:1], TWO_MIG, None, "FASTEST_FIRST") == [
        Match(0, 1, UUIDS[1], "uuid")
    ]


def test_a_mig_device_matches_the_gpu_it_is_a_slice_of() -> None:
    (match,) = match_devices([MIG_UUIDS[1].removeprefix("MIG-")], TWO_MIG, MIG_UUIDS[1])
    assert match == Match(0, 1, UUIDS[1], "uuid")  # the whole GPU's UUID: what NVML samples
    # a torch that reports the parent GPU's UUID for the slice matches the same GPU
    assert match_devices([UUIDS[1]], TWO_MIG, MIG_UUIDS[1])[0].index == 1


def test_a_device_no_gpu_has_stays_unmatched_with_the_reason() -> None:
    stranger = "3b1f2c4d-0000-4000-8000-00000000abcd"
    (match,) = match_devices([stranger], TWO_MIG, "1", "PCI_BUS_ID")
    assert match.index is None and match.by == ""
    assert match.reason.startswith(f"UUID {stranger} is none of the GPUs NVML read (0 GPU-5d1a")
    unread = [{"index": 0, "unread": {"uuid": "Insufficient Permissions"}}, TWO_MIG[1]]
    (match,) = match_devices([stranger], unread, None, "PCI_BUS_ID")
    assert "NVML did not read GPU 0's UUID: Insufficient Permissions" in match.reason
    no_migs = [TWO_MIG[0], {"index": 1, "uuid": UUIDS[1], "mig_mode": True}]
    (match,) = match_devices([MIG_UUIDS[0]], no_migs, MIG_UUIDS[0], "PCI_BUS_ID")
    assert match.index is None and "NVML did not read GPU 1's MIG devices" in match.reason


def test_two_devices_never_share_a_gpu() -> None:
    matches = match_devices([UUIDS[1], MIG_UUIDS[0]], TWO_MIG, None, "PCI_BUS_ID")
    assert matches[0] == Match(0, 1, UUIDS[1], "uuid")
    assert matches[1].index is None
    assert matches[1].reason == "NVML's GPU 1 is torch's device 0 already"


@pytest.mark.parametrize(
    ("visible", "order", "want"),
    [
        (None, "PCI_BUS_ID", [0, 1]),  # every GPU, in NVML's (PCI bus) order
        ("1", "PCI_BUS_ID", [1]),
        ("1,0", "PCI_BUS_ID", [1, 0]),
        (UUIDS[1], None, [1]),  # UUIDs do not depend on the order
        (MIG_UUIDS[0], None, [1]),
        (None, None, [None, None]),  # CUDA's default order is fastest first: unknown
        ("1", "FASTEST_FIRST", [None, None]),
        ("", "PCI_BUS_ID", [None, None]),
    ],
)
def test_a_torch_without_uuids_falls_back_to_the_position(
    visible: str | None, order: str | None, want: list[int | None]
) -> None:
    matches = match_devices([None, None], TWO_MIG, visible, order)
    got = [m.index for m in matches]
    assert got == (want + [None] * 2)[:2]
    for m in matches:
        assert (m.by == "order") is (m.index is not None)
        assert (m.reason == "") is (m.index is not None)
        if m.index is None:
            assert m.reason.startswith("torch gave no device UUID")


def test_without_nvml_gpus_devices_keep_torch_numbers() -> None:
    assert match_devices(["x", None], []) == [
        Match(0, 0, None, "torch"),
        Match(1, 1, None, "torch"),
    ]


# -- merging into the snapshot ----------------------------------------------------------------


def test_merge_puts_readings_on_the_gpu_with_the_uuid() -> None:
    nvml_gpus = [dict(g) for g in TWO_MIG]
    measured = [
        # torch device 0 is GPU 1 (CUDA_VISIBLE_DEVICES=1); the probe says index 1 too
        {
            "torch_index": 0,
            "torch_uuid": str(CUuuid(UUIDS[1])),
            "index": 1,
            "gemm_bf16_tflops": 790.0,
        },
        # a reading of a device the probe could not match: on no GPU
        {"torch_index": 1, "torch_uuid": "3b1f2c4d-0000-4000-8000-00000000abcd", "unmatched": "?"},
        # numbered only as torch numbers it, while NVML did read GPUs: on no GPU
        {"torch_index": 2, "index": 0, "matched_by": "torch", "copy_tbps": 3.0},
    ]
    gpu0, gpu1 = snapshot.merge_gpus(nvml_gpus, measured)
    assert gpu1["gemm_bf16_tflops"] == 790.0 and gpu1["torch_index"] == 0
    assert "gemm_bf16_tflops" not in gpu0 and "copy_tbps" not in gpu0
    # the UUID wins over an index the probe got wrong
    wrong = [{"torch_index": 0, "torch_uuid": UUIDS[0], "index": 1, "copy_tbps": 3.1}]
    gpu0, gpu1 = snapshot.merge_gpus(nvml_gpus, wrong)
    assert gpu0["copy_tbps"] == 3.1 and "copy_tbps" not in gpu1


def test_merge_of_readings_from_before_uuids_goes_by_index() -> None:
    """A perf reading without torch_uuid (an older snapshot, or a torch without device
    UUIDs) is put on the GPU of its `index`, as before."""
    gpu0, gpu1 = snapshot.merge_gpus(
        [dict(g) for g in TWO_MIG], [{"index": 1, "name": H100, "gemm_bf16_tflops": 700.0}]
    )
    assert gpu1["gemm_bf16_tflops"] == 700.0 and "gemm_bf16_tflops" not in gpu0
    # NVML read nothing: torch's numbers stand
    (only,) = snapshot.merge_gpus([], [{"index": 0, "matched_by": "torch", "copy_tbps": 3.0}])
    assert only == {"index": 0, "matched_by": "torch", "copy_tbps": 3.0}


# -- the perf probe end to end, CUDA_VISIBLE_DEVICES=1 ------------------------------------------


def fake_torch(uuids: list[Any]) -> types.ModuleType:
    """torch as the perf probe's orchestration sees it (the measurements are replaced)."""
    torch = types.ModuleType("torch")

    def properties(index: int) -> Any:
        props = types.SimpleNamespace(name=H100, major=9, minor=0, total_memory=81559 << 20)
        if uuids[index] is not None:
            props.uuid = uuids[index]
        return props

    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: True,
        device_count=lambda: len(uuids),
        get_device_properties=properties,
    )
    return torch


def measure(torch: Any, index: int) -> dict[str, Any]:
    return {
        "index": index,
        "name": H100,
        "memory_total_mib": 81559,
        "gemm_bf16_tflops": 791.0,
        "gemm_dtype": "bfloat16",
        "copy_tbps": 2.9,
    }


def memtest(torch: Any, index: int) -> dict[str, Any]:
    return {"memtest": {"bytes": 60 << 30, "errors": 0, "seconds": 4.2}}


def host(gbps: float) -> Any:
    """copies.measure_host as a GPU at `gbps` both ways answers it."""
    return lambda torch, index, *near_and_kept: {
        "h2d_gbps": gbps,
        "d2h_gbps": gbps,
        "host_copy_settled": True,
    }


@pytest.fixture
def one_of_two(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """An HGX host whose container has GPUs 0 and 1, and CUDA_VISIBLE_DEVICES=1: GPU 0
    idles at PCIe Gen1, GPU 1 runs the probe at Gen5. Returns the order h2d ran in."""
    Host(mig_gpu=None, idle=(0,)).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setattr(perf, "measure_gpu", measure)
    monkeypatch.setattr(perf, "measure_memory", memtest)
    h2d: list[tuple[str, int]] = []

    def measure_host(torch: Any, index: int, *near_and_kept: Any) -> dict[str, Any]:
        h2d.append(("h2d", index))
        return host(55.3)(torch, index)

    monkeypatch.setattr(copies, "measure_host", measure_host)
    monkeypatch.setattr(copies, "measure_p2p", lambda torch: [])
    return h2d


def live_run(monkeypatch: pytest.MonkeyPatch, torch_uuids: list[Any]) -> tuple[Any, Any]:
    """The parent's host reading, the perf probe (as the child runs it), the snapshot."""
    host = snapshot.read_host(None)
    host["container"]["device_nodes"] = ["/dev/nvidia0", "/dev/nvidia1"]
    monkeypatch.setitem(sys.modules, "torch", fake_torch(torch_uuids))
    result = perf.check_perf()
    stack = passed(torch="2.9.0", torch_cuda="12.8", device="cuda", gpus=len(torch_uuids))
    snap = snapshot.assemble(host, {"stack": stack, "perf": result})
    snap["selected"] = ["gpus", "health", "perf"]
    return result, json.loads(json.dumps(snap))


def test_cuda_visible_devices_1_measures_and_samples_gpu_1_only(
    one_of_two: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    result, snap = live_run(monkeypatch, [CUuuid(UUIDS[1])])
    assert isinstance(result, CheckResult) and result.status.value == "passed"
    assert snap["container"]["cuda_visible_devices"] == "1"
    assert snap["container"]["cuda_device_order"] == "PCI_BUS_ID"
    (reading,) = result.measurements["gpus"]
    assert reading["index"] == 1 and reading["torch_index"] == 0
    assert reading["matched_by"] == "uuid" and reading["torch_uuid"] == UUIDS[1][4:]
    assert one_of_two == [("h2d", 0)]  # torch's device 0, which is GPU 1
    gpu0, gpu1 = snap["gpus"]
    # every figure and every sample is GPU 1's; GPU 0 keeps its idle NVML reading only
    assert gpu1["gemm_bf16_tflops"] == 791.0 and gpu1["h2d_gbps"] == 55.3
    assert gpu1["pcie_gen_under_load"] == 5 and gpu1["clock_event_reasons"] == ["sw_power_cap"]
    assert gpu0["pcie_gen"] == 1
    for key in ("gemm_bf16_tflops", "h2d_gbps", "pcie_gen_under_load", "clock_event_reasons"):
        assert key not in gpu0, key
    # and the verdict: the healthy idle GPU 0 is not failed for its idle link
    results = judge.judge(snap)
    assert results["health"].status.value == "passed"
    assert ("pcie-gen", 0) in {
        (f.rule, f.gpu) for f in health.health_findings(typed(snap))[0] if f.level == Status.SKIPPED
    }
    assert not [f for f in health.health_findings(typed(snap))[0] if f.level == Status.FAILED]


def test_a_torch_without_uuids_matches_by_cuda_visible_devices(
    one_of_two: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    result, snap = live_run(monkeypatch, [None])
    (reading,) = result.measurements["gpus"]
    assert reading["index"] == 1 and reading["matched_by"] == "order"
    assert "torch_uuid" not in reading
    assert snap["gpus"][1]["gemm_bf16_tflops"] == 791.0
    assert snap["gpus"][1]["pcie_gen_under_load"] == 5


def test_a_device_nvml_does_not_know_keeps_its_readings_apart(
    one_of_two: list[tuple[str, int]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stranger = "GPU-3b1f2c4d-0000-4000-8000-00000000abcd"
    result, snap = live_run(monkeypatch, [CUuuid(stranger)])
    (reading,) = result.measurements["gpus"]
    assert "index" not in reading and reading["gemm_bf16_tflops"] == 791.0
    assert reading["unmatched"].startswith(f"UUID {stranger[4:]} is none of the GPUs NVML read")
    assert one_of_two == [("h2d", 0)]
    for gpu in snap["gpus"]:  # on no GPU, and no GPU sampled
        assert "gemm_bf16_tflops" not in gpu and "pcie_gen_under_load" not in gpu
    path = tmp_path / "host.json"
    path.write_text(json.dumps(snap))
    assert main(["--judge", str(path)]) == 0
    capsys.readouterr()
    gpus = judge.judge(snap)["gpus"]
    (said,) = [f for f in gpus.measurements["findings"] if f["rule"] == "gpu-match"]
    assert said["message"].startswith("torch device 0 (UUID 3b1f2c4d-0000-4000-8000-")
    assert "is no GPU NVML read, so its perf readings are on none: UUID" in said["message"]
    assert "not judged: torch device 0" in gpus.reason


def test_a_mig_device_is_measured_on_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(mig_gpu=1).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUIDS[0])
    monkeypatch.setattr(perf, "measure_gpu", measure)
    monkeypatch.setattr(perf, "measure_memory", memtest)
    monkeypatch.setattr(copies, "measure_host", host(20.0))
    result, snap = live_run(monkeypatch, [CUuuid(MIG_UUIDS[0])])
    (reading,) = result.measurements["gpus"]
    assert reading["index"] == 1 and reading["matched_by"] == "uuid"
    assert snap["gpus"][1]["mig_uuids"] == MIG_UUIDS
    assert snap["gpus"][1]["gemm_bf16_tflops"] == 791.0
    assert snap["gpus"][1]["pcie_gen_under_load"] == 5  # the whole GPU, sampled by its UUID


def test_peer_pairs_are_named_by_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES=1,0: torch's pair 0->1 is NVML's 1->0."""
    Host(mig_gpu=None).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setattr(perf, "measure_gpu", measure)
    monkeypatch.setattr(perf, "measure_memory", memtest)
    monkeypatch.setattr(copies, "measure_host", host(50.0))
    pairs = [{"src": 0, "dst": 1, "gbps": 370.0}, {"src": 1, "dst": 0, "gbps": 371.0}]
    monkeypatch.setattr(copies, "measure_p2p", lambda torch: pairs)
    _, snap = live_run(monkeypatch, [CUuuid(UUIDS[1]), CUuuid(UUIDS[0])])
    assert snap["p2p"] == [
        {"src": 1, "dst": 0, "gbps": 370.0, "torch_src": 0, "torch_dst": 1},
        {"src": 0, "dst": 1, "gbps": 371.0, "torch_src": 1, "torch_dst": 0},
    ]
    assert [g["torch_index"] for g in snap["gpus"]] == [1, 0]


def test_the_copies_run_one_gpu_at_a_time_between_the_load_and_the_memory_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 52: a copy timed in the wake of the memory test's free reads half the link, so
    every copy comes before it, each GPU alone."""
    Host(mig_gpu=None).install(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    events: list[str] = []
    hosts: list[tuple[int, str | None]] = []
    busy = {"host": 0, "max": 0}

    def gpu(torch: Any, index: int) -> dict[str, Any]:
        events.append(f"gemm {index}")
        return measure(torch, index)

    def measure_host(torch: Any, index: int, near: str | None, kept: list[Any]) -> dict[str, Any]:
        hosts.append((index, near))
        busy["host"] += 1
        busy["max"] = max(busy["max"], busy["host"])
        events.append(f"host {index}")
        busy["host"] -= 1
        if index == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return host(50.0)(torch, index)

    def memory(torch: Any, index: int) -> dict[str, Any]:
        events.append(f"memtest {index}")
        return memtest(torch, index)

    monkeypatch.setattr(perf, "measure_gpu", gpu)
    monkeypatch.setattr(perf, "measure_memory", memory)
    monkeypatch.setattr(copies, "measure_host", measure_host)
    monkeypatch.setattr(copies, "measure_p2p", lambda torch: events.append("p2p") or [])
    result, snap = live_run(monkeypatch, [CUuuid(UUIDS[0]), CUuuid(UUIDS[1])])
    assert sorted(events[:2]) == ["gemm 0", "gemm 1"]
    assert events[2:5] == ["host 0", "host 1", "p2p"] and busy["max"] == 1
    # each GPU's copies placed near its own CPUs, as NVML gives them
    assert hosts == [(0, "0-55,112-167"), (1, "56-111,168-223")]
    # the memory test last, on the GPU whose copies worked only
    assert events[5:] == ["memtest 0"]
    # a copy that fails is that GPU's measuring error, the probe goes on
    assert result.status.value == "failed"
    assert result.reason == (
        "GPU 1 (torch device 1): host copies: RuntimeError: CUDA error: an illegal "
        "memory access was encountered"
    )
    first, second = snap["gpus"]
    assert first["h2d_gbps"] == 50.0 and first["d2h_gbps"] == 50.0
    assert first["memtest"]["errors"] == 0 and first["host_copy_settled"] is True
    assert "h2d_gbps" not in second and "memtest" not in second
    assert snap["host_copies"] == copies.HOST_CONDITIONS


def test_old_snapshots_without_uuids_still_judge(tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "snapshots" / "h100-8x.json"
    snap = json.loads(data.read_text())
    for gpu in snap["gpus"]:
        gpu.pop("uuid", None)
    snap["container"].pop("cuda_visible_devices", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(snap))
    assert main(["--judge", str(path)]) == 0


# -- the gpus verdict and CUDA_VISIBLE_DEVICES ------------------------------------------------


def counted(visible: str | None, order: str | None = "PCI_BUS_ID") -> dict[str, int]:
    snap = {
        "torch": {"cuda_available": True, "device_count": 2},
        "nvml": {"available": True, "device_count": 2},
        "container": {
            "device_nodes": ["/dev/nvidia0", "/dev/nvidia1"],
            "cuda_visible_devices": visible,
            "cuda_device_order": order,
        },
        "gpus": [dict(g) for g in TWO_MIG[:1]] + [{"index": 1, "uuid": UUIDS[1]}],
    }
    return health.gpu_counts(typed(snap))[0]


def test_cuda_visible_devices_naming_every_gpu_keeps_torch_in_the_count() -> None:
    assert "torch" in counted(None)
    assert "torch" in counted("1,0")
    assert "torch" in counted(f"{UUIDS[1]},{UUIDS[0]}", None)
    assert "torch" not in counted("1")
    assert "torch" not in counted("1,0", None)  # indices in CUDA's own order: unknown
    assert "torch" not in counted(MIG_UUIDS[0])
    assert "torch" not in counted("")


def test_nvml_reads_the_uuids_the_matching_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    Host().install(monkeypatch)
    known, why = nvml.read_identities()
    assert why == ""
    assert known == [
        {"index": 0, "uuid": UUIDS[0], "mig_mode": False, "cpu_affinity": "0-55,112-167"},
        {
            "index": 1,
            "uuid": UUIDS[1],
            "mig_mode": True,
            "mig_uuids": MIG_UUIDS,
            "cpu_affinity": "56-111,168-223",
        },
    ]
