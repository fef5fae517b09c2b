"""Grace hosts judged over recorded snapshots (tests/data/snapshots/gh200.json and
gb200-nvl72.json, built from the public reports their `_source` cites) and table-tested
changes of them: the host-to-device copy against NVLink-C2C, each rank's threads against the
CPUs near its GPU, and what profile multi-node-nvlink needs (NCCL, IMEX, the fabric)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.contract.checks import Status
from imagekit.contract.host_snapshot import Gpu
from imagekit.contract.transports import transport_problem
from imagekit.matrix.profiles import PROFILE_ENV, PROFILE_SHM, RDMA_PROFILES, image_env
from imagekit.runtime.threads import threads_for
from imagekit.selfcheck.verdicts import grace, health, links

from .conftest import typed

SNAPSHOTS = Path(__file__).parent / "data" / "snapshots"


def load(name: str) -> dict[str, Any]:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


def stack(snapshot: dict[str, Any]) -> dict[str, Any]:
    return snapshot["checks"]["stack"]["measurements"]  # type: ignore[no-any-return]


def failed(snapshot: dict[str, Any]) -> set[tuple[str, int | None]]:
    findings = links.check_links(typed(snapshot)).measurements["findings"]
    return {(f["rule"], f["gpu"]) for f in findings if f["level"] == "failed"}


def levels(snapshot: dict[str, Any], rule: str) -> list[str]:
    findings = links.check_links(typed(snapshot)).measurements["findings"]
    return [f["level"] for f in findings if f["rule"] == rule]


@pytest.mark.parametrize("name", ["gh200", "gb200-nvl72"])
def test_the_recorded_grace_hosts_pass_every_hardware_verdict(name: str) -> None:
    snapshot = load(name)
    assert links.check_links(typed(snapshot)).status == Status.PASSED
    assert health.check_health(typed(snapshot)).status == Status.PASSED
    assert health.check_gpus(typed(snapshot)).status == Status.PASSED


def test_gh200_copy_is_judged_against_c2c_and_the_layout_is_reported() -> None:
    result = links.check_links(typed(load("gh200")))
    assert result.measurements["figures"] == (
        "GPU 0: host-to-device 346.0 GB/s over NVLink-C2C, 450 GB/s"
    )
    assert result.measurements["grace"] == "GPU 0: NVLink-C2C, CPUs 0-71, memory NUMA node 1"
    # no PCIe rule on a GPU whose host link NVML read as C2C
    assert "PCIe" not in health.check_health(typed(load("gh200"))).reason


@pytest.mark.parametrize(
    ("gbps", "fails"),
    [
        (346.0, False),  # nvbandwidth#23's healthy GH200
        (226.0, False),  # just above half of 450
        (63.0, True),  # a PCIe Gen5 x16 rate: not the C2C link
        (150.0, True),  # memory pinned on the far side, or a degraded link
    ],
)
def test_gh200_host_to_device_floor(gbps: float, fails: bool) -> None:
    snapshot = load("gh200")
    snapshot["gpus"][0]["h2d_gbps"] = gbps
    assert (("h2d-bandwidth", 0) in failed(snapshot)) is fails


@pytest.mark.parametrize(
    ("omp", "ranks", "want"),
    [
        ("36", 4, []),  # imagekit's default: 144 CPUs / 4 ranks, 36 near each GPU
        ("72", 4, ["warned"] * 4),  # two ranks per Grace, 72 threads each: half spill over
        ("144", 1, ["skipped"]),  # one process for 4 GPUs: not judged per GPU
        ("lots", 4, ["skipped"]),
    ],
)
def test_threads_per_rank_against_the_cpus_near_each_gpu(
    omp: str, ranks: int, want: list[str]
) -> None:
    snapshot = load("gb200-nvl72")
    stack(snapshot).update(omp_num_threads=omp, local_ranks=ranks)
    assert levels(snapshot, "omp-near") == want


def test_the_warning_names_the_grace_the_threads_spill_from() -> None:
    snapshot = load("gb200-nvl72")
    stack(snapshot)["omp_num_threads"] = "72"
    warning = links.check_links(typed(snapshot)).measurements["warning"]
    assert "GPU 2: OMP_NUM_THREADS=72 per rank, but 36 CPUs near this GPU" in warning
    assert "share of 72-143" in warning


def test_gh200_one_rank_may_use_every_grace_core() -> None:
    assert levels(load("gh200"), "omp-near") == []


@pytest.mark.parametrize(
    ("cpus", "quota", "ranks", "threads"),
    [
        (72, None, 1, 72),  # GH200: one rank, every Grace core (no SMT on Neoverse V2)
        (144, None, 4, 36),  # GB200 tray: two Graces, four ranks, 36 each = 72 / 2 per Grace
        (144, 32.0, 4, 8),  # a pod limited to 32 CPUs
        (64, None, 1, 64),  # the Lambda GH200 VM's 64 vCPUs
    ],
)
def test_imagekits_thread_default_on_grace(
    cpus: int, quota: float | None, ranks: int, threads: int
) -> None:
    assert threads_for(cpus, quota, ranks) == threads


def mutate(path: str, value: Any) -> dict[str, Any]:
    """gb200-nvl72 with one reading changed ("a.b.c" walks dicts; a number a list)."""
    snapshot = load("gb200-nvl72")
    *parents, last = path.split(".")
    node: Any = snapshot
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[int(last) if last.isdigit() else last] = value
    return snapshot


@pytest.mark.parametrize(
    ("path", "value", "want"),
    [
        ("checks.stack.measurements.nccl", "2.23.4", {("mnnvl-nccl", None)}),
        ("checks.stack.measurements.nccl", "2.25.2", set()),
        ("checks.stack.measurements.nccl_env.NCCL_CUMEM_ENABLE", "0", {("mnnvl-env", None)}),
        ("checks.stack.measurements.nccl_env.NCCL_MNNVL_ENABLE", "0", {("mnnvl-env", None)}),
        ("checks.stack.measurements.nccl_env.NCCL_MNNVL_ENABLE", "2", set()),  # auto
        ("container.imex_channels", [], {("mnnvl-imex", None)}),
        ("gpus.2.fabric", {"state": "in_progress", "status": "success"}, {("mnnvl-fabric", 2)}),
        (
            "gpus.1.fabric",
            {"state": "completed", "status": "NVML_ERROR_INSUFFICIENT_RESOURCES"},
            {("mnnvl-fabric", 1)},
        ),
        ("gpus.0.fabric", {"state": "not_supported"}, {("mnnvl-fabric", 0)}),
        ("nccl.transport", "IB+NVLS", {("nccl-transport", None)}),  # fell back to the network
        ("nccl.transport", "MNNVL+IB+NVLS", set()),  # a job over two racks
        ("nccl.transport", "Socket+MNNVL", {("nccl-transport", None)}),
    ],
)
def test_multi_node_nvlink_needs(path: str, value: Any, want: set[tuple[str, int | None]]) -> None:
    assert failed(mutate(path, value)) == want


def test_unread_mnnvl_readings_are_skips_never_passes() -> None:
    snapshot = load("gb200-nvl72")
    del snapshot["container"]["imex_channels"]
    snapshot["checks"] = {}
    for gpu in snapshot["gpus"]:
        del gpu["fabric"]
    rules = {f["rule"] for f in links.check_links(typed(snapshot)).measurements["findings"]}
    assert {"mnnvl-nccl", "mnnvl-env", "mnnvl-imex", "mnnvl-fabric"} <= rules
    assert failed(snapshot) == set()


def test_other_profiles_are_not_asked_for_mnnvl() -> None:
    snapshot = mutate("container.imex_channels", [])
    snapshot["profile"] = "multi-node-ib"
    snapshot["nccl"]["transport"] = "IB+NVLS"
    assert failed(snapshot) == set()


def test_the_imex_failure_says_how_to_give_the_container_a_channel() -> None:
    snapshot = mutate("container.imex_channels", [])
    reason = links.check_links(typed(snapshot)).reason
    assert "no IMEX channel in the container" in reason
    assert "NVIDIA_IMEX_CHANNELS=0" in reason and "ComputeDomain" in reason


@pytest.mark.parametrize(
    ("reading", "multi_node", "problem"),
    [
        ("MNNVL+NVLS", True, ""),
        ("IB+MNNVL", True, ""),
        ("IB+NVLS", True, "not MNNVL"),
        (None, True, "no transport, not MNNVL"),
        ("Socket+MNNVL", True, "needs InfiniBand/RDMA"),
        ("NVLS", False, ""),  # one node: nothing promised between nodes
    ],
)
def test_transport_promise_of_multi_node_nvlink(
    reading: str | None, multi_node: bool, problem: str
) -> None:
    said = transport_problem("multi-node-nvlink", reading, multi_node)
    assert (problem in said) if problem else said == ""


def test_the_profile_bakes_what_nvl72_needs() -> None:
    env = image_env("multi-node-nvlink", cuda=True, tf32=True, require_cuda=None)
    assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"
    assert env["NVIDIA_IMEX_CHANNELS"] == "0" and env["NCCL_NET_GDR_C2C"] == "1"
    assert env["NCCL_IB_DISABLE"] == "0"
    assert "multi-node-nvlink" in RDMA_PROFILES and PROFILE_SHM["multi-node-nvlink"] == "64Gi"
    assert "NCCL_MNNVL_ENABLE" not in image_env("multi-node-nvlink", False, True, None)
    assert set(PROFILE_ENV) == set(PROFILE_SHM)


@pytest.mark.parametrize(
    ("cpulist", "count"),
    [("0-71", 72), ("0-35,72-107", 72), ("5", 1), ("", 0), ("0-3,8", 5)],
)
def test_cpu_count(cpulist: str, count: int) -> None:
    assert grace.cpu_count(cpulist) == count


def test_a_malformed_affinity_is_left_out() -> None:
    gpus = [{"index": 0, "cpu_affinity": "71-0"}, {"index": 1, "cpu_affinity": "0-71"}]
    assert grace.cpus_per_rank([typed(g, Gpu) for g in gpus]) == {1: ("0-71", 72)}


def test_old_snapshots_judge_as_before() -> None:
    snapshot = copy.deepcopy(load("h100-8x"))
    assert links.check_links(typed(snapshot)).measurements.get("grace") is None
    assert {
        f["rule"] for f in links.check_links(typed(snapshot)).measurements["findings"]
    }.isdisjoint({"omp-near", "mnnvl-nccl", "mnnvl-env", "mnnvl-imex", "mnnvl-fabric"})
