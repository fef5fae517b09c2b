"""Every GPU decision of the self-check, table-tested with real device names, compute
capabilities, torch arch lists and driver versions: no GPU, no torch needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from imagekit.contract import check_table as registry
from imagekit.contract import driver
from imagekit.contract.archs import arch_verdict, parse_entry
from imagekit.contract.checks import CheckResult, Status, failed, passed
from imagekit.errors import UsageError
from imagekit.imagetest.image import wants_gpus
from imagekit.imagetest.stamp import validated_on
from imagekit.selfcheck.readers import container
from imagekit.selfcheck.verdicts import devices
from imagekit.selfcheck.verdicts.peaks import gemm_dtype, mig_reason, normalise, peak_for, stable
from imagekit.selfcheck.verdicts.rules import (
    CPU,
    CUDA,
    TRT,
    attention_close,
    compile_hint,
    ddp_runs,
    launched_by_torchrun,
    omp_problem,
    provider_errors,
    provider_verdict,
    providers_to_ask,
)

ROOT = Path(__file__).resolve().parents[1]

# -- architectures ------------------------------------------------------------------------

# torch.cuda.get_arch_list() of official Linux wheels. cu130 was read from torch
# 2.11.0+cu130 on an H100 (docs/selfcheck-devices.md); the others from the release builds'
# TORCH_CUDA_ARCH_LIST (.ci/manywheel/build_cuda.sh of each release branch).
ARCH_LISTS = {
    "cu118": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "cu126": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "cu128-2.7": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
    "cu128-2.8": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "cu130": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
}
GPUS = {  # compute capability per product (CUDA GPUs list)
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "A10": (8, 6),
    "L4": (8, 9),
    "L40S": (8, 9),
    "H100": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B200": (10, 0),
    "RTX 5090": (12, 0),
}
# (build, GPU) -> the entry that serves it, or None where the build cannot run there.
EXPECTED = {
    ("cu118", "V100"): "sm_70",
    ("cu118", "T4"): "sm_75",
    ("cu118", "A10"): "sm_86",
    ("cu118", "L4"): "sm_86",  # sm_89 runs sm_86 SASS (same major, newer minor)
    ("cu118", "L40S"): "sm_86",
    ("cu118", "H100"): "sm_90",
    ("cu118", "B200"): None,
    ("cu118", "RTX 5090"): None,
    ("cu126", "A100"): "sm_80",
    ("cu126", "L4"): "sm_86",
    ("cu126", "GH200"): "sm_90",
    ("cu126", "B200"): None,
    ("cu128-2.7", "V100"): None,  # compute_120 PTX cannot go down to 7.0
    ("cu128-2.7", "T4"): "sm_75",
    ("cu128-2.7", "L40S"): "sm_86",
    ("cu128-2.7", "H200"): "sm_90",
    ("cu128-2.7", "B200"): "sm_100",
    ("cu128-2.7", "RTX 5090"): "sm_120",
    ("cu128-2.8", "V100"): "sm_70",
    ("cu130", "V100"): None,
    ("cu130", "T4"): "sm_75",
    ("cu130", "A100"): "sm_80",
    ("cu130", "L4"): "sm_86",
    ("cu130", "H100"): "sm_90",
    ("cu130", "B200"): "sm_100",
    ("cu130", "RTX 5090"): "sm_120",
}


@pytest.mark.parametrize(("build", "gpu_name"), sorted(EXPECTED))
def test_arch_verdict_for_real_builds_and_gpus(build: str, gpu_name: str) -> None:
    verdict = arch_verdict(GPUS[gpu_name], ARCH_LISTS[build])
    want = EXPECTED[(build, gpu_name)]
    assert verdict.runs is (want is not None)
    assert verdict.via == (want or "")
    assert not verdict.jit
    if want is None:
        assert f"sm_{GPUS[gpu_name][0]}{GPUS[gpu_name][1]}" in verdict.reason


@pytest.mark.parametrize(
    ("capability", "arch_list", "via", "jit"),
    [
        ((9, 0), ["sm_80", "compute_80"], "compute_80", True),  # PTX JITs upwards
        ((9, 0), ["sm_80"], "", False),  # SASS never crosses a major
        ((9, 0), ["sm_90a"], "sm_90a", False),
        ((10, 0), ["sm_90a", "compute_90a"], "", False),  # arch-specific: exactly 9.0
        ((10, 3), ["sm_100f"], "sm_100f", False),  # family-specific: same major, newer minor
        ((10, 3), ["sm_100a"], "", False),
        ((12, 0), ["sm_90", "compute_120a"], "compute_120a", True),
        ((12, 1), ["compute_120a"], "", False),
        ((8, 9), ["sm_80", "sm_86", "sm_89"], "sm_89", False),  # the closest SASS wins
    ],
)
def test_arch_rules(capability: tuple[int, int], arch_list: list[str], via: str, jit: bool) -> None:
    verdict = arch_verdict(capability, arch_list)
    assert (verdict.via, verdict.jit, verdict.runs) == (via, jit, bool(via))


def test_arch_entries_parse_and_odd_ones_never_crash() -> None:
    entry = parse_entry("compute_120a")
    assert entry is not None and (entry.kind, entry.major, entry.minor) == ("compute", 12, 0)
    assert parse_entry("sm_89") is not None and parse_entry("sm_89").minor == 9  # type: ignore[union-attr]
    for odd in ("", "sm_", "sm_9", "gfx90a", "sm_90x", "compute"):
        assert parse_entry(odd) is None
    assert arch_verdict((9, 0), ["gfx90a", "sm_90"]).via == "sm_90"


# -- is a GPU expected, and why is there none? ----------------------------------------------


def host(**overrides: object) -> devices.Host:
    values: dict[str, object] = {
        "device_nodes": ("/dev/nvidia0",),
        "proc_driver": True,
        "driver": "550.54.14",
        "visible_devices": "all",
        "gpus_requested": False,
    }
    values.update(overrides)
    return devices.Host(**values)  # type: ignore[arg-type]


CUDA_LABELS = {"io.imagekit.cuda": "12.8", "io.imagekit.min-driver": "525.60.13"}


@pytest.mark.parametrize(
    ("the_host", "labels", "torch_cuda", "expected"),
    [
        (host(), CUDA_LABELS, "12.8", True),
        (host(), {"io.imagekit.cuda": "cpu"}, None, False),  # a CPU image may run anywhere
        (host(device_nodes=(), proc_driver=False), CUDA_LABELS, "12.8", False),  # CPU host
        (host(device_nodes=(), proc_driver=False, gpus_requested=True), CUDA_LABELS, "12.8", True),
        (host(), {}, "12.6", True),  # run natively: the torch build tells
        (host(), {}, None, False),
    ],
)
def test_gpu_expected(
    the_host: devices.Host, labels: dict[str, str], torch_cuda: str | None, expected: bool
) -> None:
    assert devices.gpu_expected(the_host, devices.is_cuda_image(labels, torch_cuda)) is expected


@pytest.mark.parametrize(
    ("the_host", "labels", "torch_cuda", "words"),
    [
        (host(driver="470.82.01"), CUDA_LABELS, "12.8", "driver 470.82.01 is older than 525.60.13"),
        (host(driver="535.104.05"), {}, "13.0", "older than 580.65.06, the minimum for CUDA 13.0"),
        (host(visible_devices="void"), CUDA_LABELS, "12.8", "NVIDIA_VISIBLE_DEVICES=void hides"),
        (
            host(device_nodes=(), proc_driver=False, gpus_requested=True),
            CUDA_LABELS,
            "12.8",
            "no working NVIDIA runtime",
        ),
        (host(), CUDA_LABELS, "12.8", "sees no GPU. torch said: no CUDA GPUs are available"),
    ],
)
def test_no_gpu_cause_names_the_likely_cause(
    the_host: devices.Host, labels: dict[str, str], torch_cuda: str, words: str
) -> None:
    need = driver.min_driver(labels, torch_cuda)
    assert words in devices.no_gpu_cause(the_host, need, torch_cuda, "no CUDA GPUs are available")


def test_driver_verdict_and_reader(tmp_path: Path) -> None:
    assert driver.driver_problem("580.159.04", "580.65.06", "13.0") is None
    assert driver.driver_problem("525.60.13", "525.60.13", "12.8") is None
    assert driver.driver_problem(None, "525.60.13", "12.8") is None
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(nixbld@)\nGCC version:  gcc version 15.3.0 (GCC)\n"
    )
    assert driver.read_driver(str(proc)) == "580.159.04"  # the driver, not gcc's 15.3.0
    assert driver.read_driver(str(tmp_path / "none")) is None


def test_read_container_sees_device_nodes_but_not_control_nodes(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    seen = container.read_container({"IMAGEKIT_GPUS": "all"}, dev=str(tmp_path))
    assert seen.device_nodes == (f"{tmp_path}/nvidia0", f"{tmp_path}/nvidia1")
    assert seen.gpus_requested


# -- peaks ----------------------------------------------------------------------------------

GIB = 2**30


@pytest.mark.parametrize(
    ("name", "memory_gib", "model", "tbps"),
    [
        ("NVIDIA H100 80GB HBM3", 79, "H100 SXM", 3.35),
        ("NVIDIA H100 PCIe", 79, "H100 PCIe", 2.0),
        ("NVIDIA H100 NVL", 93, "H100 NVL", 3.9),
        ("NVIDIA H200", 140, "H200 SXM", 4.8),
        ("NVIDIA H200 NVL", 140, "H200 NVL", 4.8),
        ("NVIDIA GH200 480GB", 95, "GH200 96GB", 4.0),
        ("NVIDIA GH200 144G HBM3e", 142, "GH200 144GB", 4.9),
        ("NVIDIA A100-SXM4-40GB", 39, "A100 SXM 40GB", 1.555),
        ("NVIDIA A100-SXM4-80GB", 79, "A100 SXM 80GB", 2.039),
        ("NVIDIA A100-PCIE-40GB", 39, "A100 PCIe 40GB", 1.555),
        ("NVIDIA A100 80GB PCIe", 79, "A100 PCIe 80GB", 1.935),
        ("NVIDIA B200", 179, "B200", 7.7),
        ("NVIDIA L40S", 44, "L40S", 0.864),
        ("NVIDIA L4", 22, "L4", 0.3),
        ("NVIDIA A10", 22, "A10", 0.6),
        ("Tesla T4", 15, "T4", 0.32),
        ("Tesla V100-SXM2-32GB", 31, "V100 SXM2", 0.9),
    ],
)
def test_peak_matches_the_whole_product_name(
    name: str, memory_gib: int, model: str, tbps: float
) -> None:
    peak = peak_for(name, memory_gib * GIB)
    assert peak is not None and (peak.model, peak.tbps) == (model, tbps)
    assert peak.source.startswith("https://")


@pytest.mark.parametrize(
    "name", ["NVIDIA T400", "NVIDIA L40", "NVIDIA A10G", "NVIDIA GeForce RTX 5090", "Future X1"]
)
def test_no_peak_for_other_products(name: str) -> None:
    assert peak_for(name, 24 * GIB) is None


def test_mig_slices_and_dtypes() -> None:
    assert mig_reason("NVIDIA A100-SXM4-40GB MIG 3g.20gb") is not None
    assert mig_reason("NVIDIA H100 80GB HBM3", "MIG-5c3b9e4a-1f2e-5d6c-8a7b-0e9f8d7c6b5a")
    assert mig_reason("NVIDIA H100 80GB HBM3", "0") is None
    assert normalise("NVIDIA A100-SXM4-40GB") == "A100 SXM4 40GB"
    assert gemm_dtype((7, 5)) == "float16" and gemm_dtype((9, 0)) == "bfloat16"
    assert peak_for("Tesla T4").dtype == "float16"  # type: ignore[union-attr]


def test_warm_up_waits_for_two_agreeing_timings() -> None:
    assert not stable([0.010])
    assert not stable([0.020, 0.012])  # still ramping up
    assert stable([0.020, 0.0101, 0.0100])


# -- onnxruntime providers ------------------------------------------------------------------


def test_provider_errors_keep_ort_s_words_without_colour_codes() -> None:
    # As ORT 1.31.1 logged it on an H100 without the tensorrt package (docs/selfcheck-devices.md).
    log = (
        "\x1b[1;31m2026-11-23 07:57:03.933919012 [E:onnxruntime:Default, provider_bridge_ort.cc"
        ":2430 operator()] Failed to load library libonnxruntime_providers_tensorrt.so with "
        "error: libnvinfer.so.10: cannot open shared object file\x1b[m\nprogress: fine\n"
    )
    said = provider_errors(log)
    assert "libnvinfer.so.10: cannot open shared object file" in said
    assert "\x1b" not in said and "progress" not in said


def test_providers_to_ask() -> None:
    assert providers_to_ask([TRT, CUDA, CPU], want_tensorrt=False) == [CUDA, CPU]
    assert providers_to_ask([TRT, CUDA, CPU], want_tensorrt=True) == [TRT, CUDA, CPU]
    assert providers_to_ask(["AzureExecutionProvider", CPU], want_tensorrt=True) == [CPU]


@pytest.mark.parametrize(
    ("gpu_here", "available", "session", "promised", "trt", "ok", "words"),
    [
        (False, [CPU], [CPU], True, False, True, "no GPU"),
        (True, [CPU], [CPU], False, False, True, "CPU-only build"),
        (True, [CPU], [CPU], True, False, False, "install onnxruntime-gpu"),
        (True, [CUDA, CPU], [CPU], True, False, False, "fell back to the CPU"),
        (True, [TRT, CUDA, CPU], [CUDA, CPU], True, True, False, "TensorRT was asked for"),
        (True, [TRT, CUDA, CPU], [TRT, CUDA, CPU], True, True, True, ""),
        (True, [CUDA, CPU], [CUDA, CPU], True, False, True, ""),
    ],
)
def test_provider_verdict(
    gpu_here: bool,
    available: list[str],
    session: list[str],
    promised: bool,
    trt: bool,
    ok: bool,
    words: str,
) -> None:
    log = "[E:onnxruntime:Default] Failed to load library libonnxruntime_providers_cuda.so"
    verdict = provider_verdict(gpu_here, available, session, promised, trt, provider_errors(log))
    assert verdict.ok is ok and words in verdict.reason
    if not ok and CUDA in available:
        assert "libonnxruntime_providers_cuda.so" in verdict.reason  # ORT's own words


# -- numerics, distributed, compile ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "math_error", "dtype", "ok"),
    [
        (0.0078, 0.0039, "bfloat16", True),
        (0.03, 0.02, "bfloat16", True),  # a long sequence: a fixed atol of 2e-2 would fail it
        (0.5, 0.004, "bfloat16", False),
        (8.3e-7, 9.5e-7, "float32", True),
        (1e-3, 9.5e-7, "float32", False),
        (float("nan"), 0.004, "bfloat16", False),
    ],
)
def test_attention_tolerance(error: float, math_error: float, dtype: str, ok: bool) -> None:
    assert attention_close(error, math_error, dtype)[0] is ok


def test_ddp_runs_nccl_on_every_gpu_host() -> None:
    assert [(r.backend, r.world_size) for r in ddp_runs(0)] == [("gloo", 2)]
    assert [(r.backend, r.world_size) for r in ddp_runs(1)] == [("gloo", 2), ("nccl", 1)]
    assert ddp_runs(8)[-1].world_size == 8


def test_only_torchrun_makes_the_check_join_a_process_group() -> None:
    scheduler = {"RANK": "3", "WORLD_SIZE": "16", "MASTER_ADDR": "node0"}
    assert not launched_by_torchrun(scheduler)
    assert launched_by_torchrun({**scheduler, "TORCHELASTIC_RUN_ID": "job-1"})


@pytest.mark.parametrize(
    ("omp", "ranks", "cpus", "problem"),
    [
        ("4", 2, 4.0, "OMP_NUM_THREADS=4 x 2 local ranks exceeds the 4 CPUs"),
        ("2", 2, 4.0, None),
        ("3", 1, 2.5, "exceeds the 2.5 CPUs"),
        ("8", 1, None, None),
        (None, 8, 2.0, None),
        ("many", 1, 2.0, "not a number"),
    ],
)
def test_omp_oversubscription(omp: str | None, ranks: int, cpus: float, problem: str) -> None:
    found = omp_problem(omp, ranks, cpus)
    assert (found is None) if problem is None else (problem in str(found))


def test_compile_hints() -> None:
    assert "compiler" in compile_hint(
        "torch._inductor.exc.InvalidCxxCompiler: No working C++ compiler found in cpp_builder"
    )
    assert "Python headers" in compile_hint("fatal error: Python.h: No such file or directory")
    assert compile_hint("RuntimeError: shapes do not match") == ""


# -- the host side: GPUs asked for, stamps, limits ------------------------------------------


def test_gpus_all_without_an_nvidia_runtime_is_an_error() -> None:
    with pytest.raises(UsageError, match="no NVIDIA runtime"):
        wants_gpus("all", engine_has_runtime=False)
    assert wants_gpus("all", True) and wants_gpus("auto", True)
    assert not wants_gpus("auto", False) and not wants_gpus("none", True)


def check(name: str, device: str | None, **m: object) -> CheckResult:
    return CheckResult(Status.PASSED, "", {"device": device, **m}, name)


def test_an_image_checked_on_the_cpu_is_never_stamped_as_gpu_validated() -> None:
    on_gpu = [check("stack", "cuda", gpu="NVIDIA H100 80GB HBM3"), check("amp", "cuda")]
    assert validated_on(on_gpu) == "NVIDIA H100 80GB HBM3"
    cpu_fallback = [check("stack", "cpu"), check("amp", "cpu"), check("onnx", "cpu")]
    assert validated_on(cpu_fallback) == "cpu"
    only_stack = [check("stack", "cuda", gpu="NVIDIA H100 80GB HBM3"), check("amp", "cpu")]
    assert validated_on(only_stack) == "cpu"


def test_registry_limits_replace_the_fixed_multiplier() -> None:
    assert {c.name for c in registry.CHECKS} | {v.name for v in registry.VERDICTS} == set(
        registry.ORDER
    )
    assert registry.total_limit(["stack", "perf"], None) == 60 + 180 + registry.STARTUP_S
    # A verdict runs nothing itself: its limit is that of the probes it needs.
    assert registry.total_limit(["links"], None) == 180 + 150 + registry.STARTUP_S
    assert registry.probes_for(["gpus", "health"]) == ["stack"]
    assert registry.total_limit(["stack", "perf"], 10) == 20 + registry.STARTUP_S
    # What times something runs alone: the all-reduce (ddp), GEMM and copies (perf).
    assert {c.name for c in registry.CHECKS if c.exclusive} == {"amp", "ddp", "flash", "perf"}


# -- the entrypoint: threads for torchrun launches ------------------------------------------


def _omp_under_entrypoint(tmp_path: Path, *command: str) -> str:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    for name in ("torchrun", "python3"):
        (fake / name).write_text('#!/bin/sh\necho "${OMP_NUM_THREADS:-unset}"\n')
        (fake / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
    env["PATH"] = f"{fake}:{env['PATH']}"
    entrypoint = ROOT / "templates" / "context" / "entrypoint.sh"
    out = subprocess.run(["sh", str(entrypoint), *command], env=env, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.mark.subprocess
def test_entrypoint_divides_threads_by_the_ranks_torchrun_will_start(tmp_path: Path) -> None:
    cpus = int(_omp_under_entrypoint(tmp_path, "sh", "-c", "echo $OMP_NUM_THREADS"))
    assert cpus >= 1
    two = _omp_under_entrypoint(tmp_path, "torchrun", "--nproc-per-node", "2", "train.py")
    assert two == str(max(1, cpus // 2))
    three = _omp_under_entrypoint(
        tmp_path, "python3", "-m", "torch.distributed.run", "--nproc_per_node=3", "t.py"
    )
    assert three == str(max(1, cpus // 3))
    # gpu/auto: the count is torchrun's to know, so it is left to torchrun (1 a rank)
    assert _omp_under_entrypoint(tmp_path, "torchrun", "--nproc-per-node", "gpu", "t.py") == "unset"
    assert _omp_under_entrypoint(tmp_path, "torchrun", "train.py") == str(cpus)


# -- ddp: ranks collected with a deadline -----------------------------------------------------


class FakeRank:
    def __init__(self, alive: bool, exitcode: int | None) -> None:
        self.alive, self.exitcode = alive, exitcode

    def is_alive(self) -> bool:
        return self.alive


def test_a_rank_that_dies_before_reporting_is_named_at_once() -> None:
    import queue
    import time

    from imagekit.selfcheck.probes.ddp import _collect

    reports: queue.Queue = queue.Queue()  # type: ignore[type-arg]
    reports.put((0, 0, passed()))
    ranks = {(0, 0): FakeRank(False, 0), (0, 1): FakeRank(False, 3)}
    started = time.monotonic()
    got = _collect(reports, ranks, deadline=time.monotonic() + 60)
    assert time.monotonic() - started < 5  # not the 60 s deadline
    assert got[(0, 1)].reason == "rank 1 died with exit code 3"
    assert got[(0, 0)].status is Status.PASSED


def test_a_rank_that_never_reports_fails_at_the_deadline() -> None:
    import queue

    from imagekit.selfcheck.probes.ddp import _collect

    got = _collect(queue.Queue(), {(0, 0): FakeRank(True, None)}, deadline=0.0)
    assert got[(0, 0)].failed and "did not report" in got[(0, 0)].reason


def test_the_rank_that_died_is_named_before_its_peers_echo() -> None:
    from imagekit.selfcheck.probes.ddp import merge_ranks

    echo = failed("rank 0: RuntimeError: Connection closed by peer")
    died = failed("rank 1 died with exit code 3")
    ok = passed()
    assert merge_ranks([echo, died]).reason.startswith("rank 1 died with exit code 3")
    assert merge_ranks([ok, ok]) is ok
    # gloo's own words for the echo (torch 2.13, seen in the launch's real Slurm test) say
    # "reporting": still only the echo.
    gloo = failed(
        "rank 0: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] "
        "Read error [127.0.0.1]:7607: Connection reset by peer. This is typically caused by a "
        "remote worker hanging or bugs in the application. Check the logs of the remote worker "
        "before reporting an error."
    )
    assert merge_ranks([gloo, died]).reason.startswith("rank 1 died with exit code 3")


def test_a_flash_attn_that_fails_to_import_fails_instead_of_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.selfcheck.probes.attention import _flash_attn_package, flash_attn_installed

    assert flash_attn_installed() is None  # not installed here: reported as absent
    broken = tmp_path / "flash_attn"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "raise ImportError('flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert flash_attn_installed() == "unknown"  # present, version unreadable
    found = _flash_attn_package(None, None, None, None, None, 0.0, "bfloat16")
    assert found["flash_attn_package"] == "unknown (import failed)"
    assert "does not import: ImportError" in found["flash_attn_error"]
    assert "undefined symbol" in found["flash_attn_error"]


def test_a_nan_or_infinite_difference_is_never_within_tolerance() -> None:
    from imagekit.selfcheck.verdicts.rules import differs

    assert differs(float("nan"), 1e-3) and differs(float("inf"), 1e-3)
    assert differs(2e-3, 1e-3) and not differs(1e-3, 1e-3) and not differs(0.0, 1e-6)


def test_the_nccl_sweep_and_its_check_reach_the_ddp_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the NCCL ranks measured (the curve, the checked sums) is the check's, under the
    names the snapshot reads; a wrong sum on a rank is the check's failure, naming it."""
    from imagekit.contract.checks import failed, passed
    from imagekit.selfcheck.probes import ddp
    from imagekit.selfcheck.verdicts.rules import DdpRun

    runs = [DdpRun("gloo", 2, "the sync logic"), DdpRun("nccl", 2, "every GPU")]
    sweep = [{"bytes": 8 << 20, "busbw_GBps": 90.0}, {"bytes": 1 << 30, "busbw_GBps": 300.0}]
    figures = {
        "backend": "nccl",
        "world_size": 2,
        "max_grad_difference": 0.0,
        "allreduce_busbw_GBps": 300.0,
        "allreduce_message_bytes": 1 << 30,
        "allreduce_sweep": sweep,
        "allreduce_checked": True,
    }
    gloo = passed(backend="gloo", world_size=2, max_grad_difference=0.0)
    monkeypatch.setattr(ddp, "ddp_runs", lambda gpus: runs)
    monkeypatch.setattr(ddp, "_run_all", lambda runs, how: [(runs[0], gloo), (runs[1], nccl)])
    nccl = passed(**figures)
    result = ddp.check_ddp()
    assert result.status.value == "passed"
    assert result.measurements["allreduce_sweep"] == sweep
    assert result.measurements["allreduce_checked"] is True
    assert result.measurements["allreduce_busbw_GBps"] == 300.0
    wrong = "rank 1: the all-reduce of 8 MiB gave 1 wrong of 2097152 elements"
    nccl = failed(wrong, **figures)
    result = ddp.check_ddp()
    assert result.status.value == "failed"
    assert result.reason == f"nccl (2 ranks): {wrong}"
