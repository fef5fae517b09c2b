"""`imagekit test --nodes` planning, watching, reporting and cleanup, with the fake engine."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from imagekit.cli import main
from imagekit.engine.fake import FakeRegistry, FakeRunner
from imagekit.engine.interface import (
    ContainerState,
    ImageInfo,
    Labelled,
    RunOptions,
    Started,
    SubnetTaken,
)
from imagekit.errors import SelfCheckFailed, UsageError
from imagekit.imagetest import nodes_plan, nodes_report, nodes_run, nodes_verdict, signals
from imagekit.imagetest.nodes_plan import NodesOptions

IMAGE = "reg/train:1"
LABELS = {"io.imagekit.version": "0.1.0"}
RDZV_TIMEOUT = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out"


class NodesEngine(FakeRunner, FakeRegistry):
    """Containers 'run' the in-image check: each writes its rank file and rank 0 the report,
    unless told that a node dies, never arrives, or that starting it fails."""

    def __init__(
        self,
        outcome: str = "pass",
        taken: int = 0,
        profile: str = "multi-node-ethernet",
        report: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.outcome, self.taken, self.profile = outcome, taken, profile
        self.report = report or PASSED
        self.commands: dict[str, Sequence[str]] = {}

    def inspect(self, ref: str) -> ImageInfo | None:
        env = {"IMAGEKIT_PROFILE": self.profile}
        return ImageInfo(ref, 1, LABELS, env, "1000", (), ())

    def create_network(self, name: str, subnet: str, labels: dict[str, str]) -> None:
        if self.taken:
            self.taken -= 1
            self.calls.append(("taken", subnet))
            raise SubnetTaken(subnet)
        super().create_network(name, subnet, labels)

    def start(self, image: str, command: Sequence[str], options: RunOptions) -> Started:
        if self.outcome == "start-fails" and options.hostname == "node1":
            self.containers[str(options.name)] = options  # made, then failed to start
            raise nodes_run.EngineError("could not start node1: no such device")
        started = super().start(image, command, options)
        self.commands[str(options.hostname)] = command
        if self.outcome in ("pass", "dies"):  # the ranks joined
            rank = int(str(options.hostname)[4:])
            report = Path(next(iter(options.volumes)))
            joined = {"rank": rank, "host": options.hostname, "joined_at": 1.0}
            (report / f"rank-{rank}.json").write_text(json.dumps(joined))
            if rank == 0 and self.outcome == "pass":
                (report / "multinode.json").write_text(json.dumps(self.report))
        return started

    def state(self, container: str) -> ContainerState | None:
        if container not in self.containers:
            return None
        if self.outcome == "interrupt":
            raise KeyboardInterrupt
        if self.outcome == "dies" and container.endswith("node1"):
            return ContainerState(False, 137, finished_at=10.0)
        if self.outcome == "dies":
            return ContainerState(False, 1, finished_at=12.0)
        if self.outcome == "never":
            node0 = container.endswith("node0")
            return ContainerState(False, 1) if node0 else ContainerState(True)
        return ContainerState(False, 0)

    def logs(self, container: str) -> str:
        return RDZV_TIMEOUT if self.outcome == "never" and container.endswith("node0") else ""


PASSED = {
    "status": "passed",
    "reason": "",
    "backend": "gloo",
    "device": "cpu",
    "world_size": 2,
    "procs_per_node": 1,
    "ranks": [{"rank": 0, "host": "node0"}, {"rank": 1, "host": "node1"}],
    "hosts": ["node0", "node1"],
    "grads_identical": True,
    "max_grad_difference": 0.0,
    "allreduce": {"megabytes": 64, "iterations": 5, "algbw_GBps": 0.9, "busbw_GBps": 0.9},
    "transport": "gloo/TCP",
}
# Two 8-GPU nodes whose NCCL fell back to TCP sockets (no HCA in the containers).
OVER_SOCKETS = {**PASSED, "backend": "nccl", "device": "cuda", "transport": "Socket"}


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes_run, "GRACE_S", 0)
    monkeypatch.setattr(nodes_run.time, "sleep", lambda s: None)


def nothing_left(engine: FakeRunner) -> bool:
    return not engine.containers and not engine.networks


def test_plan_commands_names_and_labels(tmp_path: Path) -> None:
    options = NodesOptions(nodes=3, procs_per_node=2, join_timeout=90, env={"NCCL_DEBUG": "INFO"})
    run = nodes_plan.plan(LABELS, options, True, "0abc1234", tmp_path)
    assert run.network == "imagekit-mn-0abc1234" and run.endpoint == "node0:29400"
    node = run.nodes[2]
    assert node.container == "imagekit-mn-0abc1234-node2" and node.host == "node2"
    assert " ".join(node.command) == (
        "torchrun --nnodes 3 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "
        "node0:29400 --rdzv-id imagekit-0abc1234 --rdzv-conf join_timeout=90 --max-restarts 0 "
        "-m imagekit.selfcheck.nodes_check --report-dir /imagekit-reports --timeout 120 "
        "--megabytes 64"
    )
    o = node.options
    assert (o.hostname, o.network, o.aliases) == ("node2", run.network, ("node2",))
    assert o.gpus and o.gpu_ids == ("4", "5")  # each node its own GPUs: NCCL sees no twins
    assert o.memlock_unlimited and o.shm_size == "8g"
    assert o.env["NCCL_DEBUG"] == "INFO" and json.loads(o.env["IMAGEKIT_LABELS"]) == LABELS
    assert (
        o.labels[nodes_plan.RUN_LABEL] == "0abc1234" and o.labels[nodes_plan.NODE_LABEL] == "node2"
    )
    assert o.volumes == {str(tmp_path / "node2"): "/imagekit-reports"}
    assert run.limit_s == nodes_plan.STARTUP_S + 90 + 120


def test_subnets_are_private_distinct_and_sized_for_the_nodes() -> None:
    nets = [ipaddress.ip_network(s) for s in nodes_plan.subnets("ffffffff", 2)]
    assert len(set(nets)) == nodes_plan.SUBNET_TRIES
    assert all(n.subnet_of(ipaddress.ip_network("10.200.0.0/13")) for n in nets)
    big = ipaddress.ip_network(next(nodes_plan.subnets("0abc1234", 300)))
    assert big.num_addresses >= 300 + 2


def test_a_passing_run_reports_hosts_and_removes_everything(tmp_path: Path) -> None:
    engine = NodesEngine()
    text = "\n".join(
        nodes_run.check_nodes(
            engine, IMAGE, NodesOptions(nodes=2, json_path=tmp_path / "r.json"), say=lambda s: None
        )
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "passed" and report["hosts"] == ["node0", "node1"]
    assert report["profile"] == "multi-node-ethernet"
    assert "hosts             node0 (rank 0), node1 (rank 1)" in text
    assert "grads identical   yes (max difference 0)" in text
    assert "busbw 0.9 GB/s" in text
    assert nothing_left(engine)
    kinds = [kind for kind, _ in engine.calls]
    assert kinds.index("remove_network") > max(i for i, k in enumerate(kinds) if k == "remove")


def test_a_taken_subnet_is_retried(tmp_path: Path) -> None:
    engine = NodesEngine(taken=2)
    nodes_run.run_nodes(engine, IMAGE, NodesOptions(nodes=2), say=lambda s: None)
    assert [kind for kind, _ in engine.calls[:3]] == ["taken", "taken", "create_network"]
    with pytest.raises(UsageError, match="--subnet 10.9.0.0/24: overlaps"):
        options = NodesOptions(nodes=2, subnet="10.9.0.0/24")
        nodes_run.run_nodes(NodesEngine(taken=1), IMAGE, options, say=lambda s: None)


def test_a_node_that_dies_is_named_and_everything_is_removed() -> None:
    engine = NodesEngine("dies")
    with pytest.raises(SelfCheckFailed) as err:
        nodes_run.check_nodes(engine, IMAGE, NodesOptions(nodes=2), say=lambda s: None)
    assert "node1 (imagekit-mn-" in str(err.value)
    assert "was killed by SIGKILL (exit 137) after its ranks joined" in str(err.value)
    assert nothing_left(engine)


def test_a_node_that_never_arrives_is_named() -> None:
    engine = NodesEngine("never")
    report = nodes_run.run_nodes(engine, IMAGE, NodesOptions(nodes=2, join_timeout=30), print)
    assert report.reason == (
        "the rendezvous at node0:29400 did not complete within 30s (--join-timeout): "
        "node1 never arrived"
    )
    assert nothing_left(engine)


@pytest.mark.parametrize("outcome", ["start-fails", "interrupt"])
def test_a_failed_start_or_ctrl_c_still_removes_everything(outcome: str) -> None:
    engine = NodesEngine(outcome)
    error = KeyboardInterrupt if outcome == "interrupt" else nodes_run.EngineError
    with pytest.raises(error):
        nodes_run.run_nodes(engine, IMAGE, NodesOptions(nodes=3), say=lambda s: None)
    assert nothing_left(engine)


def test_sigterm_unwinds_like_ctrl_c_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(signals.Terminated), signals.signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_time_limit_ends_the_watch() -> None:
    engine = NodesEngine()
    engine.containers["c0"] = RunOptions()
    running = ContainerState(True)
    engine.state = lambda c: running  # type: ignore[method-assign]
    ticks = iter(range(1000))
    clock = lambda: float(next(ticks))  # noqa: E731
    watched = nodes_run.watch(engine, {"node0": "c0"}, 5, clock, sleep=lambda s: None)
    assert watched.timed_out and watched.seconds == 5


def test_leftovers_of_a_dead_imagekit_process_are_removed() -> None:
    engine = FakeRunner()
    here = nodes_run.socket.gethostname()
    dead = {nodes_plan.OWNER_LABEL: f"{here}:{2**22 + 7}", nodes_plan.RUN_LABEL: "dead"}
    alive = {nodes_plan.OWNER_LABEL: f"{here}:{os.getpid()}"}
    elsewhere = {nodes_plan.OWNER_LABEL: "other-host:1"}
    engine.containers = {
        n: RunOptions(labels=lb) for n, lb in (("a", dead), ("b", alive), ("c", elsewhere))
    }
    engine.networks = {"net-dead": dead, "net-alive": alive}
    said: list[str] = []
    nodes_run.remove_stale(engine, said.append)
    assert set(engine.containers) == {"b", "c"} and set(engine.networks) == {"net-alive"}
    assert said[0] == "removing container a, left by run dead"
    assert isinstance(engine.labelled(nodes_plan.OWNER_LABEL)[0], Labelled)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes 0: give 1 or more nodes"),
        (["--nodes", "2", "--procs-per-node", "0"], "--procs-per-node 0: give 1 or more"),
        (["--nodes", "2", "--join-timeout", "0"], "--join-timeout 0: give a number of seconds"),
        (["--nodes", "2", "--stamp"], "--stamp with --nodes"),
        (["--nodes", "2", "--soak", "60"], "--soak with --nodes"),
        (["--soak", "-1"], "Invalid value for '--soak': -1.0 is not in the range 0<=x<=3600"),
        (
            ["--nodes", "2", "--env", "NOEQUALS"],
            "Invalid value for '--env': 'NOEQUALS': write NAME=VALUE",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_option(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["test", IMAGE, *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_torchruns_root_cause_and_the_telling_line() -> None:
    log = "\n".join(
        [
            "Root Cause (first observed failure):",
            "[0]:",
            "  host      : node1",
            "  rank      : 1 (local_rank: 0)",
            "  exitcode  : 3 (pid: 15)",
            "=" * 20,
        ]
    )
    assert nodes_verdict.root_cause(log) == " (its rank 1 exited with 3)"
    assert nodes_report.telling_line(log) == "log ends: exitcode  : 3 (pid: 15)"
    assert nodes_report.telling_line("x\nRuntimeError: Connection reset\n----") == (
        "last error: RuntimeError: Connection reset"
    )


def test_in_image_figures_and_verdict() -> None:
    from imagekit.selfcheck.probes import nodes as nodes_check

    figures = nodes_check.bandwidth(64 * 2**20, 0.1, 4)
    assert figures["algbw_GBps"] == round(64 * 2**20 / 0.1 / 1e9, 3)
    assert figures["busbw_GBps"] == round(64 * 2**20 / 0.1 / 1e9 * 1.5, 3)  # 2(n-1)/n, n=4
    assert nodes_check.verdict(0.0, 0.0) == ("passed", "")
    assert (
        nodes_check.verdict(1e-3, 0.0)[1]
        == "gradients differ across ranks by 0.001 after a DDP step"
    )
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1"}
    assert nodes_check.rank_env(env) == {
        "rank": 3, "world_size": 4, "local_rank": 1, "local_world_size": 0, "group_rank": 1,
    }  # fmt: skip
    assert nodes_check.main([]) == 2  # not under torchrun: refuses, joins no process group


def test_docker_run_kwargs_for_a_node_and_dockers_times() -> None:
    from imagekit.engine.docker_containers import epoch, run_kwargs

    options = RunOptions(
        name="imagekit-mn-1-node1",
        hostname="node1",
        network="imagekit-mn-1",
        aliases=("node1",),
        labels={nodes_plan.RUN_LABEL: "1"},
        gpus=True,
        gpu_ids=("2", "3"),
    )
    kwargs = run_kwargs(options, "1.41")
    assert (kwargs["name"], kwargs["hostname"], kwargs["network"]) == (
        "imagekit-mn-1-node1", "node1", "imagekit-mn-1",
    )  # fmt: skip
    assert kwargs["networking_config"]["imagekit-mn-1"]["Aliases"] == ["node1"]
    assert kwargs["device_requests"][0]["DeviceIDs"] == ["2", "3"]
    assert kwargs["labels"] == {nodes_plan.RUN_LABEL: "1"}
    assert epoch("2026-11-23T11:22:13.500000000Z") == 1795432933.5
    assert epoch("0001-01-01T00:00:00Z") is None


def test_a_multi_node_ib_run_whose_nccl_used_sockets_fails(tmp_path: Path) -> None:
    """Rank 0 judged the transport (the one judgement); the host reports it as written."""
    from imagekit.selfcheck.probes import nodes as nodes_check

    hosts = {"node0", "node1"}
    reason = nodes_check.transport_verdict("nccl", "multi-node-ib", "Socket", hosts)
    judged = {**OVER_SOCKETS, "status": "failed", "reason": reason, "profile": "multi-node-ib"}
    engine = NodesEngine(profile="multi-node-ib", report=judged)
    options = NodesOptions(nodes=2, json_path=tmp_path / "r.json")
    with pytest.raises(SelfCheckFailed) as err:
        nodes_run.check_nodes(engine, IMAGE, options, say=lambda s: None)
    assert str(err.value).endswith(
        "NCCL used Socket, profile multi-node-ib needs InfiniBand/RDMA (check NCCL_IB_HCA, "
        "the RDMA device plugin, /dev/infiniband)"
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["status"], report["transport"]) == ("failed", "Socket")
    assert "  transport         Socket (what NCCL or gloo used)" in err.value.report
    assert nothing_left(engine)


@pytest.mark.parametrize(
    ("profile", "report"),
    [
        ("multi-node-ib", {**OVER_SOCKETS, "transport": "IB"}),
        ("multi-node-ethernet", OVER_SOCKETS),  # TCP is what that profile asks for
        ("multi-node-ib", PASSED),  # gloo on the CPU: no NCCL transport to judge
    ],
)
def test_the_transport_rule_keeps_what_the_profile_allows(
    profile: str, report: dict[str, Any]
) -> None:
    engine = NodesEngine(profile=profile, report=report)
    result = nodes_run.run_nodes(engine, IMAGE, NodesOptions(nodes=2), say=lambda s: None)
    assert result.status == "passed", result.reason
    assert result.to_json()["profile"] == profile


def test_in_image_transport_and_verdict(tmp_path: Path) -> None:
    from imagekit.selfcheck.probes import nodes as nodes_check

    log = tmp_path / "rank0.log"
    log.write_text("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
    assert nodes_check.transport_of("nccl", log) == "IB"
    assert nodes_check.transport_of("nccl", tmp_path / "missing.log") is None
    assert nodes_check.transport_of("gloo", None) == "gloo/TCP"
    assert nodes_check.verdict(0.0, 0.0, "NCCL used Socket, ...") == (
        "failed",
        "NCCL used Socket, ...",
    )
    assert nodes_check.verdict(1e-3, 0.0, "NCCL used Socket")[1].startswith("gradients differ")
    labels = {"io.imagekit.profile": "multi-node-ib"}
    assert nodes_check.image_profile({}, labels) == "multi-node-ib"
    assert nodes_check.image_profile({"IMAGEKIT_PROFILE": "single-node"}, labels) == "single-node"


@pytest.mark.parametrize(
    ("transport", "hosts", "status"),
    [
        ("IB", ["n1", "n2"], "passed"),
        ("IB+P2P", ["n1", "n2"], "passed"),  # the hop between nodes is IB
        ("Socket+IB", ["n1", "n2"], "failed"),  # judged by its weakest hop
        (None, ["n1", "n2"], "failed"),  # no transport read: no proof of RDMA
        ("P2P", ["n1", "n2"], "failed"),  # only what stays inside a node
        (None, ["n1"], "passed"),  # one node promises nothing between nodes
    ],
)
def test_the_image_judges_the_ib_promise_by_the_weakest_hop(
    transport: str | None, hosts: list[str], status: str
) -> None:
    from imagekit.selfcheck.probes import nodes as nodes_check

    problem = nodes_check.transport_verdict("nccl", "multi-node-ib", transport, set(hosts))
    assert nodes_check.verdict(0.0, 0.0, problem)[0] == status
    assert status == "passed" or "InfiniBand/RDMA" in problem
    assert nodes_check.transport_verdict("gloo", "multi-node-ib", transport, set(hosts)) == ""


class OneRankOfTwo:
    """torch.distributed as rank 1 of 2 sees it, the other rank played here: its all-reduce
    adds what rank 0 holds (the pattern plus 1), and its gathered finding is `other`."""

    def __init__(self, other: str) -> None:
        self.other = other

    def get_world_size(self) -> int:
        return 2

    def get_rank(self) -> int:
        return 1

    def all_reduce(self, tensor: Any, group: Any = None) -> None:
        tensor.mul_(2).sub_(1)  # rank 1 holds p + 2; p + 1 + p + 2 = 2(p + 2) - 1

    def all_gather_object(self, out: list[Any], mine: Any) -> None:
        out[:] = [self.other, mine]


@pytest.mark.parametrize(
    ("other", "fault", "wrong"),
    [
        ("", "", None),
        ("rank 0: the all-reduce of 1 MiB gave 2 wrong of 262144 elements", "", "rank 0: "),
        ("", "allreduce-wrong", "rank 1: the all-reduce of 1 MiB gave 1 wrong"),
    ],
)
def test_the_multinode_all_reduce_checks_its_sum_on_every_rank(
    other: str, fault: str, wrong: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong sum on any rank reaches rank 0's report (the one written), naming the rank."""
    import argparse

    import torch

    from imagekit.selfcheck.probes import nodes as nodes_check

    monkeypatch.setenv("IMAGEKIT_SELFCHECK_FAULT", fault)
    args = argparse.Namespace(megabytes=1, iterations=2)
    figures = nodes_check.time_allreduce(torch, OneRankOfTwo(other), "cpu", args)
    assert figures.checked is True
    if wrong is None:
        assert "wrong" not in figures.to_json()
    else:
        assert figures.wrong.startswith(wrong)
