"""`imagekit test --nodes`: real containers of the test image on a real network, torchrun c10d
rendezvous between them, gloo on the CPU. Every test ends with nothing of its run left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from devkit.realengine import docker, imagekit
from imagekit.engine.docker import DockerEngine
from imagekit.imagetest import nodes_plan, nodes_run

from .conftest import TAG

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def leftovers(run_id: str) -> list[str]:
    label = f"label={nodes_plan.RUN_LABEL}={run_id}"
    containers = docker("ps", "-aq", "--filter", label).stdout.split()
    networks = docker("network", "ls", "-q", "--filter", label).stdout.split()
    return containers + networks


# 2 x 2 too: with two ranks a node, torch's exit once aborted a rank after a passing check
# (the image's behaviour: on the default engine only).
@pytest.mark.parametrize(
    "procs", [pytest.param(1, id="2x1", marks=pytest.mark.compat), pytest.param(2, id="2x2")]
)
def test_two_containers_pass(project: Path, tmp_path: Path, procs: int) -> None:
    out = tmp_path / "nodes.json"
    args = ["test", TAG, "--nodes", "2", "--procs-per-node", str(procs), "--json", str(out)]
    result = imagekit(*args, cwd=project, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["status"] == "passed" and report["world_size"] == 2 * procs
    assert report["hosts"] == ["node0", "node1"]  # two distinct hosts took part
    assert report["backend"] == "gloo" and report["grads_identical"] is True
    # gloo has no log to read: it moves tensors over TCP, recorded as such (NCCL's runs
    # record what its INFO log says: IB, Socket, P2P, SHM or NVLS).
    assert report["transport"] == "gloo/TCP"
    assert "transport         gloo/TCP (what NCCL or gloo used)" in result.stdout
    assert report["max_grad_difference"] == 0
    assert report["allreduce"]["busbw_GBps"] > 0
    # every rank checked the all-reduce's sum element by element (nccl-tests -c)
    assert report["allreduce"]["checked"] is True and "wrong" not in report["allreduce"]
    assert "hosts             node0 (rank" in result.stdout
    assert leftovers(report["run_id"]) == []
    print(
        f"2x{procs} CPU: joined in {report['join_s']}s, whole run {report['seconds']}s, "
        f"all-reduce 64 MB algbw {report['allreduce']['algbw_GBps']} GB/s "
        f"busbw {report['allreduce']['busbw_GBps']} GB/s"
    )


def node_container(node: str) -> str:
    """The one running container of a --nodes run that is `node` (the test runs one run)."""
    label = f"label={nodes_plan.NODE_LABEL}={node}"
    found = docker("ps", "-q", "--filter", label).stdout.split()
    return found[0] if len(found) == 1 else ""


def wait_for(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_a_node_killed_after_joining_fails_fast_and_leaves_nothing(
    project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "nodes.json"
    # The last rank stalls after joining, so the run is surely mid-way when node1 is killed.
    args = ["test", TAG, "--nodes", "2", "--json", str(out), "--timeout", "300"]
    args += ["--env", "IMAGEKIT_SELFCHECK_FAULT=multinode-stall"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: "joined" in logs_of("node1"), 120), "node1 never joined"
        killed_at = time.monotonic()
        docker("kill", node_container("node1"))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # closes the pipes
    took = time.monotonic() - killed_at
    assert proc.returncode == 8, stdout + stderr
    report = json.loads(out.read_text())
    assert "node1 (imagekit-mn-" in report["reason"]
    assert "was killed by SIGKILL (exit 137) after its ranks joined" in report["reason"]
    assert stderr.strip().splitlines()[-1].startswith("imagekit: error: multi-node self-check")
    assert took < 30  # not the 300 s collective timeout: the host saw the node die
    assert leftovers(report["run_id"]) == []
    print(f"node1 killed: reported and cleaned up {took:.1f}s later")


def logs_of(node: str) -> str:
    container = node_container(node)
    if not container:
        return ""
    result = docker("logs", container, check=False)
    return result.stdout + result.stderr


def test_a_node_that_never_arrives_fails_at_the_join_timeout(project: Path, tmp_path: Path) -> None:
    options = nodes_plan.NodesOptions(nodes=2, join_timeout=10, timeout=60)
    engine = DockerEngine()
    run = nodes_plan.plan({}, options, False, nodes_plan.new_run_id(), tmp_path)
    nodes_plan.make_report_dirs(run)
    # node1's container starts but its torchrun never does: a node stuck before rendezvous.
    absent = replace(run.nodes[1], command=("sleep", "600"))
    run = replace(run, nodes=(run.nodes[0], absent))
    started = time.monotonic()
    report = nodes_run.execute(engine, TAG, run, options, print)
    took = time.monotonic() - started
    assert report.status == "failed"
    assert report.reason == (
        "the rendezvous at node0:29400 did not complete within 10s (--join-timeout): "
        "node1 never arrived"
    ), report.reason
    assert took < 10 + 60  # the join timeout plus start-up, not the whole run's limit
    assert leftovers(run.run_id) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_mid_run_removes_everything(project: Path, sig: int) -> None:
    args = ["test", TAG, "--nodes", "2", "--env", "IMAGEKIT_SELFCHECK_FAULT=multinode-stall"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: "joined" in logs_of("node1"), 120), "node1 never joined"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # closes the pipes
    assert proc.returncode == 130, stderr
    assert "imagekit: interrupted" in stderr
    run_id = stderr.split("run ", 1)[1].split(":", 1)[0]
    assert leftovers(run_id) == []
