"""The host snapshot and the judge: what a live run assembles, and that a recorded snapshot is
judged to the same table and exit code (python -m imagekit.selfcheck --judge FILE)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from imagekit.contract import check_table as registry
from imagekit.contract.checks import CheckResult, Status
from imagekit.engine.fake import FakeEngine
from imagekit.engine.interface import ImageInfo, RunOptions, RunResult
from imagekit.imagetest.one_container import SelfCheckOptions, run_selfcheck
from imagekit.selfcheck.probes import ddp
from imagekit.selfcheck.readers import snapshot
from imagekit.selfcheck.run import judge, processes
from imagekit.selfcheck.run.main import main
from imagekit.selfcheck.run.report import checks_table
from imagekit.selfcheck.verdicts.rules import DdpRun

from .conftest import typed
from .test_selfcheck_health import EXPECTED

SNAPSHOTS = Path(__file__).parent / "data" / "snapshots"


def result(status: str, reason: str = "", seconds: float = 1.0, **m: Any) -> CheckResult:
    return CheckResult(Status(status), reason, m, seconds=seconds)


def cpu_host() -> dict[str, Any]:
    """What the parent reads in a CPU container: no device nodes, no NVML."""
    return {
        "format": 1,
        "expected_gpus": None,
        "container": {"device_nodes": [], "visible_devices": None, "gpus_requested": False},
        "cpu": {"model": "AMD EPYC 7B13", "flags": ["sse4_2", "avx2", "fma"]},
        "driver": None,
        "nvml": {"available": False, "reason": "libnvidia-ml.so.1 not found"},
        "gpus": [],
        "profile": "single-node",
        "labels": {"io.imagekit.cuda": "cpu", "io.imagekit.features": "onnx"},
        "require": [],
        "selected": ["stack", "gpus", "health", "ddp", "onnx", "perf", "links"],
    }


def cpu_results() -> dict[str, CheckResult]:
    return {
        "stack": result("passed", torch="2.13.0+cpu", torch_cuda=None, device="cpu"),
        "ddp": result("passed", backend="gloo", world_size=2, device="cpu"),
        "onnx": result("passed", provider_ran="CPUExecutionProvider", device="cpu"),
        "perf": result(
            "skipped", "no GPU: GEMM, bandwidth and memory are measured on GPUs only", 2.5
        ),
    }


def test_expected_gpus_from_the_environment() -> None:
    assert snapshot.expected_from_env({"IMAGEKIT_GPUS": "8"}) == 8
    assert snapshot.expected_from_env({"IMAGEKIT_GPUS": "eight"}) is None
    assert snapshot.expected_from_env({"IMAGEKIT_GPUS": "all"}) is None
    assert snapshot.expected_from_env({}) is None


def test_assemble_merges_nvml_and_the_perf_probe_by_index() -> None:
    host = cpu_host()
    host["gpus"] = [
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "ecc_volatile_uncorrected": 0},
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "ecc_volatile_uncorrected": 0},
    ]
    measured = [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "gemm_bf16_tflops": 798.2, "copy_tbps": 3.0},
        {"index": 1, "name": "other name", "gemm_bf16_tflops": 790.0, "h2d_gbps": 55.1},
        {"index": 2, "name": "NVIDIA H100 80GB HBM3", "gemm_bf16_tflops": 801.0},
    ]
    results = {
        "stack": result("passed", torch="2.7.1+cu126", torch_cuda="12.6", device="cuda", gpus=3),
        "perf": result("passed", device="cuda", gpus=measured, p2p=[{"src": 0, "dst": 1}]),
        "ddp": result(
            "passed",
            backend="gloo+nccl",
            nccl_world_size=3,
            allreduce_busbw_GBps=355.0,
            allreduce_message_bytes=1 << 30,
            allreduce_sweep=[
                {"bytes": 8 << 20, "busbw_GBps": 120.4},
                {"bytes": 1 << 30, "busbw_GBps": 355.0},
            ],
            allreduce_checked=True,
            nccl_transport="P2P/NVLink",
        ),
    }
    snap = snapshot.assemble(host, results)
    assert [g["index"] for g in snap["gpus"]] == [0, 1, 2]
    # NVML's name wins; the probe's figures join it; a GPU only torch saw is still there
    assert snap["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "ecc_volatile_uncorrected": 0,
        "gemm_bf16_tflops": 790.0,
        "h2d_gbps": 55.1,
    }
    assert snap["gpus"][2]["name"] == "NVIDIA H100 80GB HBM3"
    assert snap["torch"] == {
        "version": "2.7.1+cu126",
        "cuda": "12.6",
        "cuda_available": True,
        "device_count": 3,
    }
    assert snap["nccl"] == {
        "world_size": 3,
        "busbw_gbps": 355.0,
        "message_bytes": 1 << 30,
        "sweep": [
            {"bytes": 8 << 20, "busbw_gbps": 120.4},
            {"bytes": 1 << 30, "busbw_gbps": 355.0},
        ],
        "checked": True,
        "transport": "P2P/NVLink",
        "nodes": 1,
    }
    assert snap["p2p"] == [{"src": 0, "dst": 1}]
    assert set(snap["checks"]) == {"stack", "perf", "ddp"}


def test_a_cpu_host_is_judged_without_a_false_red() -> None:
    snap = snapshot.assemble(cpu_host(), cpu_results())
    results = judge.judge(snap)
    assert list(results) == ["stack", "gpus", "health", "ddp", "onnx", "perf", "links"]
    assert {n: r.status for n, r in results.items()} == {
        "stack": "passed",
        "gpus": "skipped",
        "health": "skipped",
        "ddp": "passed",
        "onnx": "passed",
        "perf": "skipped",
        "links": "skipped",
    }
    assert results["perf"].reason.startswith("no GPU")
    assert judge.exit_code(results) == 0


def test_a_crashed_perf_probe_stays_failed() -> None:
    snap = snapshot.assemble(cpu_host(), cpu_results())
    snap["checks"]["perf"] = result("failed", "crashed: killed by signal SIGSEGV (11)").to_json()
    results = judge.judge(snap)
    assert results["perf"].status == "failed"
    assert "SIGSEGV" in results["perf"].reason


def test_a_gpu_the_perf_probe_could_not_measure_fails_the_perf_verdict() -> None:
    """One GPU raised in the probe, the other measured healthy: perf fails naming the first,
    also when the snapshot is judged again offline."""
    h100 = json.loads((SNAPSHOTS / "h100-1x.json").read_text())["gpus"][0]
    host = cpu_host()
    host["gpus"] = [{**h100, "index": 0}, {**h100, "index": 1}]
    measured = [
        {k: h100[k] for k in ("gemm_bf16_tflops", "gemm_dtype", "copy_tbps")} | {"index": 0},
        {"index": 1, "perf_error": "RuntimeError: CUDA error: an illegal memory access"},
    ]
    results = cpu_results()
    results["perf"] = result("failed", "GPU 1: RuntimeError", device="cuda", gpus=measured)
    snap = snapshot.assemble(host, results)
    assert snap["gpus"][1]["perf_error"].startswith("RuntimeError")
    perf = judge.judge(snap)["perf"]
    assert perf.status == "failed"
    assert "GPU 1: measuring failed: RuntimeError: CUDA error" in perf.reason
    assert "GPU 0" not in perf.reason


def test_the_image_promises_are_applied_to_a_recorded_snapshot() -> None:
    snap = snapshot.assemble(cpu_host(), cpu_results())
    snap["checks"]["onnx"] = result("skipped", "onnxruntime is not installed").to_json()
    results = judge.judge(snap)
    # the image's label promises onnx: a skip of it is a failure, judged offline too
    assert results["onnx"].status == "failed"
    assert results["onnx"].reason.startswith("required (onnx)")


def test_judge_prints_the_live_table_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = snapshot.assemble(cpu_host(), cpu_results())
    snap["checks"]["ddp"] = result("failed", "gradients differ across ranks by 0.5").to_json()
    path = tmp_path / "host.json"
    snapshot.write(snap, path)
    expected = checks_table(judge.judge(copy.deepcopy(snap)))
    assert main(["--judge", str(path), "--json", str(tmp_path / "r.json")]) == 1
    assert capsys.readouterr().out.rstrip("\n") == expected
    report = json.loads((tmp_path / "r.json").read_text())
    assert [c["name"] for c in report["checks"] if c["status"] == "failed"] == ["ddp"]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[1, 2]", "a JSON object"),
        ('{"format": 2}', "field format is 2"),
        ('{"format": 1, "gpus": "x"}', "gpus: 'x' is not a list"),
        ("{not json", "cannot read a host snapshot"),
    ],
)
def test_an_unreadable_snapshot_exits_2_naming_the_field(
    tmp_path: Path, text: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert main(["--judge", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and field in err


def test_a_live_snapshot_its_record_refuses_fails_the_run_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reader that wrote a reading of the wrong type is imagekit's bug: nothing is judged,
    the image is not proven (exit 1), and the message names the key."""
    from imagekit.selfcheck.run import main as main_module

    bad = {"format": 1, "gpus": [{"index": "x"}]}  # the first reading, before any check runs
    monkeypatch.setattr(main_module.snapshot, "read_host", lambda expect, require: bad)
    assert main([]) == 1
    err = capsys.readouterr().err
    assert "gpus[0].index" in err and "bug in imagekit's readers" in err


@pytest.mark.subprocess
def test_judge_runs_without_torch_or_a_gpu(tmp_path: Path) -> None:
    """The CLI judges in a fresh interpreter that has neither torch nor pynvml to lean on."""
    path = tmp_path / "host.json"
    snapshot.write(snapshot.assemble(cpu_host(), cpu_results()), path)
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['pynvml'] = None\n"
        "from imagekit.selfcheck.run.main import main\n"
        f"sys.exit(main(['--judge', {str(path)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "0 failed" in done.stdout


def test_checks_run_one_at_a_time_under_exclusive_compute_mode() -> None:
    host = cpu_host()
    host["gpus"] = [{"index": 0, "compute_mode": "EXCLUSIVE_PROCESS"}]
    jobs, why = processes.jobs_for(typed(host), 4)
    assert jobs == 1 and "EXCLUSIVE_PROCESS" in why
    host["gpus"] = [{"index": 0, "compute_mode": "DEFAULT", "processes": []}]
    assert processes.jobs_for(typed(host), 4) == (4, "")


def test_a_host_without_gpus_runs_only_the_flash_timing_alone() -> None:
    """amp, ddp and perf time GPU work only: on a CPU host they run beside the others."""
    host = cpu_host()
    assert not processes.gpu_possible(typed(host))
    assert [n for n in registry.ORDER if n in registry.BY_NAME and registry.alone(n, False)] == [
        "flash"
    ]
    for key, value in (("device_nodes", ["/dev/nvidia0"]), ("gpus_requested", True)):
        gpu = copy.deepcopy(host)
        gpu["container"][key] = value
        assert processes.gpu_possible(typed(gpu)), key
    assert processes.gpu_possible(typed(host | {"driver": "580.95.05"}))
    assert processes.gpu_possible(typed(host | {"gpus": [{"index": 0}]}))
    alone = {n for n in registry.BY_NAME if registry.alone(n, True)}
    assert alone == {"amp", "ddp", "flash", "perf"}


def test_cpu_gloo_ranks_fork_and_cuda_ones_spawn() -> None:
    gloo, nccl = DdpRun("gloo", 2, "CPU"), DdpRun("nccl", 2, "GPUs")
    assert ddp.start_method([gloo], cuda=False) == "fork"
    assert ddp.start_method([gloo], cuda=True) == "spawn"
    assert ddp.start_method([gloo, nccl], cuda=False) == "spawn"


@pytest.mark.subprocess
@pytest.mark.parametrize("spawn", ["0", "1"])
def test_a_check_runs_forked_from_the_server_or_spawned(spawn: str) -> None:
    """The stack check (torch, threads, /dev/shm) through the fork server that imported
    torch once, and through a fresh interpreter; a limit kills either as a timeout."""
    code = (
        "import json, sys\n"
        "from imagekit.selfcheck.run import processes\n"
        "forked = processes.fork_server() is not None\n"
        "ok = processes.run_check('stack', 120)\n"
        "late = processes.run_check('stack', 0.0001)\n"  # no check ends within 0.1 ms
        "print(json.dumps([forked, ok.status.value, late.status.value, late.timed_out]))"
    )
    env = {**os.environ, processes.ENV_SPAWN: spawn}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    forked, ok, late, timed_out = json.loads(done.stdout.splitlines()[-1])
    assert forked == (spawn == "0")
    assert (ok, late, timed_out) == ("passed", "failed", True)


class GpuEngine(FakeEngine):
    """A fake engine with the NVIDIA runtime that records how the self-check was run."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunOptions] = []

    def has_gpu_runtime(self) -> bool:
        return True

    def inspect(self, ref: str) -> ImageInfo | None:
        return ImageInfo(ref, 1, {"io.imagekit.version": "0.1.0"}, {}, "1000:1000", (), ())

    def run(self, image: str, command: Sequence[str], options: RunOptions) -> RunResult:
        self.runs.append(options)
        return RunResult(exit_code=0, output="")


def test_imagekit_test_gpus_n_gives_n_gpus_and_expects_them() -> None:
    engine = GpuEngine()
    run_selfcheck(engine, "img:1", SelfCheckOptions(gpus="2"))
    options = engine.runs[0]
    assert options.gpus and options.gpu_ids == ("0", "1")
    assert options.env["IMAGEKIT_GPUS"] == "2"
    run_selfcheck(engine, "img:1", SelfCheckOptions(gpus="all"))
    assert engine.runs[1].gpu_ids == () and engine.runs[1].env["IMAGEKIT_GPUS"] == "all"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_hosts_judge_offline_through_the_cli(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every recorded real host, judged by the CLI with every verdict (gpus, health, perf,
    links): a healthy host exits 0 (no false red from any verdict), a broken one exits 1
    with gpus or health failed."""
    code = main(["--judge", str(SNAPSHOTS / f"{name}.json")])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:-1]}
    # a snapshot that recorded the stack check's result (the Grace hosts': threads, NCCL)
    # shows it first, as the live run did
    assert [r for r in rows if r != "stack"] == ["gpus", "health", "perf", "links"], out
    assert code == (1 if EXPECTED[name] else 0), out
    failed = {check for check, status in rows.items() if status == "FAILED"}
    assert failed == (
        {"gpus"} if name.endswith("missing-gpu") else {"health"} if EXPECTED[name] else set()
    ), out


GPU_RUNS = Path(__file__).resolve().parents[1] / "docs" / "gpu-runs"


@pytest.mark.parametrize(
    "run",
    ["2026-11-26-h200", "2026-11-26-h200/uuid-visible", "2026-11-26-h200-first", "2026-11-27-h200"],
)
def test_the_recorded_h200_runs_judged_again_fail_their_host_copy(
    run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed snapshots of the H200 runs (docs/selfcheck-gpu.md) timed the
    host-to-device copy right after the memory test's free: 27.5-28.3 GB/s, 0.44 of Gen5
    x16, where the same GPU copies 55.2 timed alone (issue 52). Judged again they fail
    `links` and nothing else, and say why; each run's `judged-issue52.txt` is that table, to
    the character. In the final runs every other row but health's (the NVLinks it cannot
    see, issue 52) is the table the run printed."""
    assert main(["--judge", str(GPU_RUNS / run / "snapshot.json")]) == 1
    table = capsys.readouterr().out
    assert table == (GPU_RUNS / run / "judged-issue52.txt").read_text()
    rows = {line.split()[0]: line for line in table.splitlines()[1:-1]}
    assert [name for name, row in rows.items() if " FAILED " in row] == ["links"]
    assert "host-to-device copy at 2" in rows["links"]
    assert "recorded no copy conditions" in rows["links"]
    if run in ("2026-11-26-h200", "2026-11-27-h200"):
        printed = (GPU_RUNS / run / "table.txt").read_text().splitlines()[1:-1]
        kept = [line for line in printed if not line.startswith(("links ", "health "))]
        assert kept == [r for n, r in rows.items() if n not in ("links", "health")]


def test_the_last_reading_counts_pcie_replays_during_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay counter is read before the checks and after them: the increase, over the
    seconds between, is what the pcie-replays rule judges (DCGM's rate)."""
    from datetime import datetime, timedelta, timezone

    from imagekit.selfcheck.readers import nvml

    start = datetime.now(timezone.utc) - timedelta(seconds=90)
    host = {
        "taken_at": start.isoformat(timespec="seconds"),
        "gpus": [{"index": 0, "pcie_replays": 10}, {"index": 1}],
    }
    after = [{"index": 0, "pcie_replays": 50}, {"index": 1, "pcie_replays": 3}]
    monkeypatch.setattr(nvml, "read_nvml", lambda: ({"available": True}, after))
    snap = snapshot.nvml_again(host)
    assert snap["gpus"][0]["pcie_replays_during_run"] == 40
    assert "pcie_replays_during_run" not in snap["gpus"][1]  # not read at the start
    assert 89 <= snap["run_seconds"] <= 95
    assert snapshot.nvml_again({**host, "taken_at": "never"})["run_seconds"] is None
