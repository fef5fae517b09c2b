"""The GPU probes' own code, run on CPU tensors before any GPU is lent: the perf probe's GEMM,
device copy and memory pattern test (a corrupted element counted), the copy timing behind
the peer and host-to-device readings, and the ddp check's all-reduce message size and bus
bandwidth over gloo with two ranks. torch is required (scripts/dev-setup.sh installs the CPU
build): a missing torch fails here rather than skipping these."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from imagekit.contract.host_snapshot import Gpu
from imagekit.selfcheck.probes import copies, ddp, perf
from imagekit.selfcheck.probes.results import bus_bandwidth
from imagekit.selfcheck.verdicts.perf_verdict import perf_findings

from .conftest import typed

CPU = torch.device("cpu")
KIB = 1024


@pytest.fixture(autouse=True)
def short_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU timings of tiny work may never settle: bound settled_time's batches."""
    monkeypatch.setattr(perf, "WARMUP_BUDGET_S", 0.3)


def once(seconds: float, calls: list[Any]) -> Callable[..., float]:
    """A settled_time that runs the measured call once, keeps what it returned and reports
    `seconds`: the arithmetic around a real computation, exactly."""

    def settled(fn: Callable[[], Any], sync: Callable[[], None], repeat: int) -> float:
        sync()
        calls.append(fn())
        sync()
        return seconds

    return settled


# -- perf: GEMM and device copy ------------------------------------------------------------------


def test_gemm_runs_on_cpu_tensors_and_counts_2n3_flops(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0 < perf._gemm_tflops(torch, CPU, "bfloat16", n=64) < math.inf
    calls: list[Any] = []
    monkeypatch.setattr(perf, "settled_time", once(1e-3, calls))
    assert perf._gemm_tflops(torch, CPU, "bfloat16", n=64) == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    (product,) = calls
    assert product.shape == (64, 64) and product.dtype == torch.bfloat16


def test_device_copy_counts_read_plus_write_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0 < perf._copy_tbps(torch, CPU, nbytes=256 * KIB) < math.inf
    calls: list[Any] = []
    monkeypatch.setattr(perf, "settled_time", once(1e-4, calls))
    tbps = perf._copy_tbps(torch, CPU, nbytes=256 * KIB)
    assert tbps == pytest.approx(2 * 256 * KIB / 1e-4 / 1e12)
    assert calls[0].numel() == 256 * KIB  # the copy's destination, the size asked for


def test_settled_time_stops_at_its_budget() -> None:
    ticks: list[int] = []
    seconds = perf.settled_time(lambda: ticks.append(1), lambda: None, 10)
    assert seconds >= 0 and len(ticks) % 10 == 0 and ticks


# -- perf: the memory pattern test --------------------------------------------------------------


def test_memory_pattern_over_cpu_memory_finds_no_error() -> None:
    # 40 KiB "free" in 4 KiB chunks: 90% is 9 whole chunks, less 2 of scratch = 7.
    result = perf.memory_pattern(torch, CPU, free_bytes=40 * KIB, chunk_bytes=4 * KIB)
    assert (result["bytes"], result["errors"]) == (7 * 4 * KIB, 0)


def test_too_little_free_memory_tests_nothing_and_the_verdict_says_so() -> None:
    result = perf.memory_pattern(torch, CPU, free_bytes=3 * 4 * KIB, chunk_bytes=4 * KIB)
    assert (result["bytes"], result["errors"]) == (0, 0)
    # The GPU-sized rule: under ~3.3 GiB free there is no whole 1 GiB chunk to test.
    assert int(3.3 * 2**30 * perf.MEMTEST_FRACTION) // perf.CHUNK_BYTES - 2 < 1
    found, judged = perf_findings(
        typed({"index": 0, "memtest": result, "name": "NVIDIA H100 PCIe"}, Gpu)
    )
    assert [(f.level, f.rule) for f in found if f.rule == "memtest"] == [("skipped", "memtest")]
    assert judged == 0  # nor GEMM nor copy measured here: nothing judged, nothing passed


def test_every_address_gets_its_own_value() -> None:
    base = torch.arange(512, dtype=torch.int64)
    chunks = perf.write_pattern(base, 4)
    values = torch.cat(chunks)
    assert torch.unique(values).numel() == 4 * 512


@pytest.mark.parametrize(
    ("corrupt", "errors"),
    [
        (lambda chunks: None, 0),
        # One flipped bit: wrong when read back, and wrong again once every bit is flipped.
        (lambda chunks: chunks[1][5].bitwise_xor_(torch.tensor(1 << 17)), 2),
        (lambda chunks: chunks[0][0].bitwise_xor_(torch.tensor(-(2**63))), 2),  # the top bit
        # A wrong address line: chunk 2 holds chunk 1's values, every element wrong twice.
        (lambda chunks: chunks[2].copy_(chunks[1]), 2 * 512),
    ],
)
def test_a_corrupted_element_is_counted(corrupt: Callable[[list[Any]], Any], errors: int) -> None:
    base = torch.arange(512, dtype=torch.int64)
    chunks = perf.write_pattern(base, 3)
    corrupt(chunks)
    assert perf.check_pattern(chunks, base) == errors


# -- copies: the peer and host-to-device timing -------------------------------------------------


def test_copy_gbps_copies_and_times_cpu_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    src = torch.arange(64 * KIB, dtype=torch.int32).to(torch.uint8)
    dst = torch.zeros_like(src)
    assert isinstance(copies.clock_for(torch, src, dst), copies.HostClock)
    assert 0 < copies.copy_gbps(torch, src, dst, repeat=3) < math.inf
    assert torch.equal(dst, src)
    monkeypatch.setattr(copies.HostClock, "seconds", lambda self, fn: (fn(), 0.5)[1])
    assert copies.copy_gbps(torch, src, dst, repeat=3) == pytest.approx(64 * KIB * 3 / 0.5 / 1e9)


def batch_seconds(monkeypatch: pytest.MonkeyPatch, timings: list[float]) -> list[float]:
    """The host clock answers each timed batch with the next of `timings` (after running it);
    returns what is left."""
    left = list(timings)
    monkeypatch.setattr(copies.HostClock, "seconds", lambda self, fn: (fn(), left.pop(0))[1])
    return left


def test_host_copies_are_timed_until_two_batches_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first batch in the wake of something else (2 s) is not the figure; the faster of the
    first two that agree is."""
    src = torch.arange(64 * KIB, dtype=torch.int32).to(torch.uint8)
    dst = torch.zeros_like(src)
    left = batch_seconds(monkeypatch, [2.0, 1.0, 0.5, 0.49, 9.0])
    gbps, agreed = copies.settled_gbps(torch, src, dst, budget_s=60)
    assert agreed and gbps == pytest.approx(64 * KIB * copies.COPY_REPEAT / 0.49 / 1e9)
    assert left == [9.0] and torch.equal(dst, src)


def test_host_copies_that_never_agree_give_the_fastest_batch_and_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = torch.ones(64 * KIB, dtype=torch.uint8)
    dst = torch.zeros_like(src)
    left = batch_seconds(monkeypatch, [2.0, 1.0, 0.5])
    gbps, agreed = copies.settled_gbps(torch, src, dst, budget_s=0)  # two batches, no more
    assert not agreed and gbps == pytest.approx(64 * KIB * copies.COPY_REPEAT / 1.0 / 1e9)
    assert left == [0.5]


class FakeEvent:
    recorded = 0

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing

    def record(self) -> None:
        FakeEvent.recorded += 1

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return 250.0  # milliseconds, as CUDA events report


def test_the_event_clock_reads_milliseconds_as_seconds() -> None:
    cuda = type("cuda", (), {"Event": FakeEvent, "synchronize": staticmethod(lambda: None)})
    fake_torch = type("torch", (), {"cuda": cuda})
    ran: list[int] = []
    FakeEvent.recorded = 0
    assert copies.EventClock(fake_torch).seconds(lambda: ran.append(1)) == 0.25
    assert ran == [1] and FakeEvent.recorded == 2


def test_every_ordered_pair_with_peer_access_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = type(
        "cuda",
        (),
        {
            "device_count": staticmethod(lambda: 3),
            "can_device_access_peer": staticmethod(lambda a, b: (a, b) != (0, 2)),
        },
    )
    monkeypatch.setattr(copies, "peer_gbps", lambda torch, s, d, n: 100.0 * s + d + 0.04)
    pairs = copies.measure_p2p(type("torch", (), {"cuda": cuda}))
    assert [(p["src"], p["dst"], p["gbps"]) for p in pairs] == [
        (0, 1, 1.0),
        (1, 0, 100.0),
        (1, 2, 102.0),
        (2, 0, 200.0),
        (2, 1, 201.0),
    ]


# -- ddp: the all-reduce over gloo, two ranks ---------------------------------------------------


def two_ranks(tmp_path: Path, work: Callable[[int, Any], Any]) -> list[Any]:
    """work(rank, group) on two gloo ranks, one thread each, joined over a FileStore on the
    loopback; every collective bounded by the group's timeout, every thread by its join."""
    store_file = tmp_path / "store"
    out: list[Any] = [None, None]

    def run(rank: int) -> None:
        try:
            store = dist.FileStore(str(store_file), 2)
            options = dist.ProcessGroupGloo._Options()
            options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
            options._timeout = timedelta(seconds=30)
            out[rank] = work(rank, dist.ProcessGroupGloo(store, rank, 2, options))
        except Exception as exc:  # reported below, with the rank
            out[rank] = exc

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a gloo rank did not finish in 60 s"
    for rank, value in enumerate(out):
        assert not isinstance(value, Exception), f"rank {rank}: {value!r}"
    return out


def test_every_rank_reduces_the_message_the_least_free_rank_can_hold(tmp_path: Path) -> None:
    free = [79 * 2**30, 2 * 2**30]  # an idle H100 and one with little free
    sizes = two_ranks(
        tmp_path, lambda rank, group: ddp._message_bytes(torch, dist, 2, "cpu", free[rank], group)
    )
    assert sizes == [ddp.allreduce_bytes(2 * 2**30, 2)] * 2 == [256 * 2**20] * 2


def test_bus_bandwidth_of_a_real_all_reduce(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbytes = 256 * KIB
    measured = two_ranks(
        tmp_path, lambda rank, group: ddp._busbw(torch, dist, 2, "cpu", nbytes, group)
    )
    assert all(0 < busbw < math.inf for busbw in measured)

    # The arithmetic: nccl-tests' busbw is algbw x 2(n-1)/n, here for 0.01 s an all-reduce.
    real_timed = ddp.timed
    reduced: list[int] = []

    def timed(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
        real_timed(fn, repeat, sync)  # the all-reduces run for real
        reduced.append(repeat)
        return 0.01

    monkeypatch.setattr(ddp, "timed", timed)
    exact = two_ranks(
        tmp_path, lambda rank, group: ddp._busbw(torch, dist, 2, "cpu", nbytes, group)
    )
    assert exact == [pytest.approx(bus_bandwidth(nbytes / 0.01 / 1e9, 2))] * 2
    assert exact[0] == pytest.approx(nbytes / 0.01 / 1e9)  # 2(n-1)/n = 1 for two ranks
    assert reduced == [10, 10]


def test_the_all_reduce_sums_across_ranks(tmp_path: Path) -> None:
    def reduce(rank: int, group: Any) -> list[float]:
        tensor = torch.full((4,), float(rank + 1))
        dist.all_reduce(tensor, group=group)
        return tensor.tolist()

    assert two_ranks(tmp_path, reduce) == [[3.0] * 4, [3.0] * 4]


@pytest.mark.parametrize(
    ("message", "world", "sizes"),
    [
        (2**30, 8, [8 * 2**20, 32 * 2**20, 128 * 2**20, 512 * 2**20, 2**30]),
        (256 * 2**20, 2, [8 * 2**20, 32 * 2**20, 128 * 2**20, 256 * 2**20]),
        (64 * 2**20, 3, [8 * 2**20 - 8 * 2**20 % 12, 32 * 2**20 - 32 * 2**20 % 12, 64 * 2**20]),
    ],
)
def test_the_sweep_runs_nccl_tests_sizes_up_to_the_message(
    message: int, world: int, sizes: list[int]
) -> None:
    assert ddp.sweep_sizes(message, world) == sizes
    assert all(size % (4 * world) == 0 for size in sizes[:-1])


def test_the_sweep_times_and_checks_every_size_on_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ddp, "ALLREDUCE_SWEEP", (16 * KIB, 64 * KIB))
    out = two_ranks(
        tmp_path,
        lambda rank, group: ddp.allreduce_sweep(torch, dist, rank, 2, "cpu", 256 * KIB, group),
    )
    for points, wrong in out:
        assert [p["bytes"] for p in points] == [16 * KIB, 64 * KIB, 256 * KIB]
        assert all(0 <= p["busbw_GBps"] < math.inf for p in points)  # 0.0: gloo, tiny sizes
        assert wrong == ""


def test_a_wrong_sum_fails_naming_the_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl-tests -c: one element off on the last rank (fault injection after the real
    all-reduce) is found on that rank, named with the count and the first wrong element."""
    monkeypatch.setenv("IMAGEKIT_SELFCHECK_FAULT", "allreduce-wrong")
    out = two_ranks(
        tmp_path,
        lambda rank, group: ddp.checked_sum(torch, dist, rank, 2, "cpu", 64 * KIB, group),
    )
    # element 8192 is 8192 % 251 = 160 on every rank: 2 x 160 + 1 + 2 = 323, one more
    assert out == [
        "",
        "rank 1: the all-reduce of 0.0625 MiB gave 1 wrong of 16384 elements (first at 8192: "
        "324, expected 323)",
    ]


def test_a_wrong_sum_in_a_sweep_keeps_every_rank_in_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every size's checked all-reduce runs on every rank, whatever a rank found before: the
    rank that saw a wrong sum goes on, so nobody waits in a collective it skipped. The check
    compares in slices (here of 1000 elements), and still names the first wrong element."""
    from imagekit.selfcheck.probes import results

    monkeypatch.setenv("IMAGEKIT_SELFCHECK_FAULT", "allreduce-wrong")
    monkeypatch.setattr(ddp, "ALLREDUCE_SWEEP", (16 * KIB, 32 * KIB))
    monkeypatch.setattr(results, "CHECK_SLICE", 1000)
    out = two_ranks(
        tmp_path,
        lambda rank, group: ddp.allreduce_sweep(torch, dist, rank, 2, "cpu", 64 * KIB, group),
    )
    (points0, wrong0), (points1, wrong1) = out
    assert len(points0) == len(points1) == 3 and wrong0 == ""
    # the first size's: 4096 elements, the middle one off (2048 % 251 = 40: 2 x 40 + 3 = 83)
    assert wrong1 == (
        "rank 1: the all-reduce of 0.015625 MiB gave 1 wrong of 4096 elements (first at 2048: "
        "84, expected 83)"
    )


def test_the_wake_script_says_so_without_a_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/host-copy-wake.py (run by gpu-selfcheck.sh) imports, and where torch sees no
    GPU it exits 2 with the reason as JSON instead of a traceback."""
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "host-copy-wake.py"
    spec = importlib.util.spec_from_file_location("host_copy_wake", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    assert module.main() == 2
    assert json.loads(capsys.readouterr().out) == {"error": "torch sees no GPU"}


def test_the_soak_holds_the_gemm_and_reports_its_steady_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On CPU tensors: windows of GEMMs until the time is up; the steady rate is the median
    of the second half, never faster than the fastest window."""
    monkeypatch.setattr(perf, "SOAK_WINDOW_S", 0.02)
    soak = perf.gemm_soak(torch, CPU, "bfloat16", 0.3, n=64)
    assert soak["seconds"] >= 0.3 and soak["windows"] >= 2
    assert set(soak) == {"seconds", "windows", "tflops_first", "tflops_min", "tflops_steady"}


@pytest.mark.parametrize(
    ("rates", "first", "low", "steady"),
    [
        ([10.0, 10.0, 8.0, 6.0, 6.0, 6.0], 10.0, 6.0, 6.0),  # the power cap bites, then holds
        ([700.0, 690.0, 655.0, 676.0], 700.0, 655.0, 676.0),  # second half 655, 676: upper
        ([5.0], 5.0, 5.0, 5.0),
    ],
)
def test_a_soaks_steady_rate_is_the_median_of_its_second_half(
    rates: list[float], first: float, low: float, steady: float
) -> None:
    summary = perf.soak_summary(rates, 300.04)
    assert summary == {
        "seconds": 300.0,
        "windows": len(rates),
        "tflops_first": first,
        "tflops_min": low,
        "tflops_steady": steady,
    }


@pytest.mark.parametrize(("value", "seconds"), [("300", 300.0), ("", 0.0), ("-5", 0.0), ("x", 0.0)])
def test_the_soak_reaches_the_probe_through_its_variable(
    value: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(perf.ENV_SOAK, value)
    assert perf.soak_seconds() == seconds


def test_the_host_copy_binds_to_the_gpus_cpus_and_back() -> None:
    """The pinned buffer is allocated on the GPU's CPUs (its NUMA node's pages), then the
    thread's own CPUs come back; CPUs outside this process's set, or none, bind nothing."""
    allowed = os.sched_getaffinity(0)
    first = min(allowed)
    with copies.bound_to(f"{first},100000") as cpus:
        assert cpus == str(first) and os.sched_getaffinity(0) == {first}
    assert os.sched_getaffinity(0) == allowed
    for near in (None, "", "100000-100001", "7-3", "x"):
        with copies.bound_to(near) as cpus:
            assert cpus == "" and os.sched_getaffinity(0) == allowed


@pytest.mark.parametrize(
    ("text", "cpus"), [("0-2,5", {0, 1, 2, 5}), ("7", {7}), ("", set()), (" 1 , 3-4", {1, 3, 4})]
)
def test_cpulists_read_and_written(text: str, cpus: set[int]) -> None:
    from imagekit.selfcheck.verdicts import cpulist as numa

    assert numa.cpus_of(text) == cpus
    assert numa.cpus_of(numa.cpulist_of(cpus)) == cpus
