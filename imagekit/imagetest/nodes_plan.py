"""`imagekit test IMAGE --nodes N`, planned: the options, and everything the run will do as
data (no engine calls): the run id, its network and subnet candidates, one container per node
with its name, labels, GPUs, report folder and `torchrun` command.

One container per node on a user-defined network of its own (an explicit subnet, so it
never takes Docker's default pool), each running `torchrun` with c10d rendezvous on node0,
the image's own environment (its profile's NCCL settings are baked in as ENV), GPUs split
between the nodes when the engine has the NVIDIA runtime (NCCL), gloo on the CPU otherwise.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.contract.labels import NODE, PROFILE, RUN, RUN_OWNER
from imagekit.engine.interface import RunOptions
from imagekit.errors import UsageError
from imagekit.imagetest.image import selfcheck_env

RUN_LABEL = RUN
OWNER_LABEL = RUN_OWNER  # host:pid of the imagekit process that made it
NODE_LABEL = NODE
PROFILE_LABEL = PROFILE
PORT = 29400
REPORTS = "/imagekit-reports"
STARTUP_S = 60  # container start and torch's import, before the rendezvous can begin
SUBNET_TRIES = 16


@dataclass(frozen=True)
class NodesOptions:
    nodes: int
    procs_per_node: int = 1
    gpus: str = "auto"  # auto | all | none
    shm_size: str = "8g"
    join_timeout: float = 120.0  # every node must reach the rendezvous within this
    timeout: float = 120.0  # the check itself, once joined; also each collective's limit
    megabytes: int = 64  # all-reduce buffer for the bandwidth figure
    subnet: str | None = None  # default: a free /24 (or larger) from 10.200.0.0/13
    env: dict[str, str] = field(default_factory=dict)
    json_path: Path | None = None


@dataclass(frozen=True)
class Node:
    index: int
    host: str  # node0, node1, ...: hostname and network alias
    container: str  # imagekit-mn-<run>-node0: the engine's name
    command: tuple[str, ...]
    options: RunOptions
    report_dir: Path


@dataclass(frozen=True)
class Plan:
    run_id: str
    network: str
    endpoint: str
    nodes: tuple[Node, ...]
    join_timeout_s: float
    limit_s: float  # from the first start to the last exit


def check_options(options: NodesOptions) -> None:
    if options.nodes < 1:
        raise UsageError(f"--nodes {options.nodes}: give 1 or more nodes (containers), e.g. 2")
    if options.procs_per_node < 1:
        raise UsageError(
            f"--procs-per-node {options.procs_per_node}: give 1 or more processes per node "
            "(on GPUs, one per GPU each node gets)"
        )
    for name, value in (("--join-timeout", options.join_timeout), ("--timeout", options.timeout)):
        if value <= 0:
            raise UsageError(f"{name} {value:g}: give a number of seconds above 0, e.g. 120")


def new_run_id() -> str:
    return secrets.token_hex(4)


def subnets(run_id: str, nodes: int) -> Iterator[str]:
    """Candidate subnets in 10.200.0.0/13, far from Docker's default pools (172.17-31/16,
    192.168/16), starting at a place the run id picks so parallel runs rarely collide."""
    size = 24 if nodes <= 250 else 20 if nodes <= 4000 else 16
    step = 2 ** (24 - size) if size <= 24 else 1
    blocks = 2048 // step  # /24 blocks in the /13, counted in steps of this size
    start = int(run_id, 16) % blocks
    for i in range(SUBNET_TRIES):
        block = ((start + i) % blocks) * step
        yield f"10.{200 + block // 256}.{block % 256}.0/{size}"


def torchrun_command(plan_id: str, endpoint: str, options: NodesOptions) -> tuple[str, ...]:
    return (
        "torchrun",
        "--nnodes", str(options.nodes),
        "--nproc-per-node", str(options.procs_per_node),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", plan_id,
        "--rdzv-conf", f"join_timeout={options.join_timeout:g}",
        "--max-restarts", "0",  # a node that fails fails the check; no silent second try
        "-m", "imagekit.selfcheck.nodes_check",
        "--report-dir", REPORTS,
        "--timeout", f"{options.timeout:g}",
        "--megabytes", str(options.megabytes),
    )  # fmt: skip


def make_report_dirs(run: Plan) -> None:
    """Each node's report folder, writable by the image's non-root user."""
    for node in run.nodes:
        node.report_dir.mkdir()
        os.chmod(node.report_dir, 0o777)


def plan(
    image_labels: dict[str, str], options: NodesOptions, gpus: bool, run_id: str, tmp: Path
) -> Plan:
    """Everything the run will do, as data (no engine calls): names, commands, options."""
    network = f"imagekit-mn-{run_id}"
    endpoint = f"node0:{PORT}"
    command = torchrun_command(f"imagekit-{run_id}", endpoint, options)
    labels = {RUN_LABEL: run_id, OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"}
    env = selfcheck_env(image_labels, gpus, options.env)
    nodes = []
    for i in range(options.nodes):
        host = f"node{i}"
        p = options.procs_per_node
        run_options = RunOptions(
            shm_size=options.shm_size,
            gpus=gpus,
            gpu_ids=tuple(str(i * p + j) for j in range(p)) if gpus else (),
            env=env,
            volumes={str(tmp / host): REPORTS},
            name=f"{network}-{host}",
            hostname=host,
            network=network,
            aliases=(host,),
            labels={**labels, NODE_LABEL: host},
        )
        nodes.append(Node(i, host, f"{network}-{host}", command, run_options, tmp / host))
    limit = STARTUP_S + options.join_timeout + options.timeout
    return Plan(run_id, network, endpoint, tuple(nodes), options.join_timeout, limit)
