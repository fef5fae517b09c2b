"""`imagekit test IMAGE --nodes N`: the self-check's distributed part across N containers.

One container per node on a user-defined network of its own (an explicit subnet, so it
never takes Docker's default pool), each running `torchrun` with c10d rendezvous on node0,
the image's own environment (its profile's NCCL settings are baked in as ENV), GPUs split
between the nodes when the engine has the NVIDIA runtime (NCCL), gloo on the CPU otherwise.

The run is watched from here: the first node to fail ends it (a dead peer never sends a TCP
reset, so the others would wait in a collective), and so does the time limit. Containers
and the network carry the run's label and are removed in every case: success, failure,
Ctrl-C, SIGTERM; leftovers of a run whose imagekit process died are removed by the next.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.contract.labels import NODE, PROFILE, RUN, RUN_OWNER
from imagekit.engine.interface import ContainerState, Engine, RunOptions, SubnetTaken
from imagekit.errors import EngineError, SelfCheckFailed, UsageError
from imagekit.paths import write_atomic
from imagekit.selfcheck.links import transport_problem
from imagekit.selfcheck_host import checkable_image, selfcheck_env, wants_gpus

RUN_LABEL = RUN
OWNER_LABEL = RUN_OWNER  # host:pid of the imagekit process that made it
NODE_LABEL = NODE
PROFILE_LABEL = PROFILE
PORT = 29400
REPORTS = "/imagekit-reports"
STARTUP_S = 60  # container start and torch's import, before the rendezvous can begin
GRACE_S = 3  # after the first node fails, the others get this long to stop on their own
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
        "-m", "imagekit.selfcheck.multinode",
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


# -- signals ------------------------------------------------------------------------------
class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a CI cancel, a closed terminal): unwinds like Ctrl-C, so every
    `finally` on the way out runs and the containers go."""


def _raise(signum: int, frame: Any) -> None:
    raise Terminated(f"signal {signal.Signals(signum).name}")


@contextmanager
def signals_raise() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; the caller's own handling applies
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for sig in previous:
        signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """A second Ctrl-C while removing the containers would leave them behind: ignore it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- engine side ----------------------------------------------------------------------------
def remove_stale(engine: Engine, say: Callable[[str], None]) -> None:
    """Remove containers and networks of earlier runs whose imagekit process on this host is
    gone (killed with SIGKILL, a crashed machine): a running run's are left alone."""
    here = socket.gethostname()
    stale = [
        item
        for item in engine.labelled(OWNER_LABEL)
        if owner_gone(item.labels.get(OWNER_LABEL, ""), here)
    ]
    for item in sorted(stale, key=lambda i: i.kind):  # containers before their network
        say(f"removing {item.kind} {item.name}, left by run {item.labels.get(RUN_LABEL)}")
        if item.kind == "container":
            engine.remove(item.name)
        else:
            engine.remove_network(item.name)


def owner_gone(owner: str, here: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != here or not pid.isdigit():
        return False  # another machine's (or an odd label): not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def create_network(engine: Engine, run: Plan, options: NodesOptions) -> str:
    labels = dict(run.nodes[0].options.labels)
    labels.pop(NODE_LABEL, None)
    tried = []
    for subnet in [options.subnet] if options.subnet else subnets(run.run_id, options.nodes):
        try:
            engine.create_network(run.network, subnet, labels)
            return subnet
        except SubnetTaken:
            if options.subnet:
                raise UsageError(
                    f"--subnet {subnet}: overlaps a network this engine has; pick a free "
                    "private range (`docker network inspect` lists the ones in use)"
                ) from None
            tried.append(subnet)
    raise EngineError(
        f"no free subnet for the run's network: {', '.join(tried)} all overlap networks "
        "this engine has; give one with --subnet"
    )


@dataclass
class Watched:
    states: dict[str, ContainerState | None]
    timed_out: bool
    seconds: float


def watch(
    engine: Engine,
    ids: dict[str, str],
    limit_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Watched:
    """Poll until every node has exited, the first failure (plus a grace), or the limit."""
    started = clock()
    failed_at: float | None = None
    while True:
        states = {host: engine.state(cid) for host, cid in ids.items()}
        now = clock()
        if all(s is None or not s.running for s in states.values()):
            return Watched(states, False, now - started)
        if failed_at is None and any(is_failure(s) for s in states.values()):
            failed_at = now
        if failed_at is not None and now - failed_at >= GRACE_S:
            return Watched(states, False, now - started)
        if now - started >= limit_s:
            return Watched(states, True, now - started)
        sleep(0.5)


def is_failure(state: ContainerState | None) -> bool:
    return state is None or (not state.running and state.exit_code != 0)


# -- the run --------------------------------------------------------------------------------
@dataclass
class NodeOutcome:
    host: str
    container: str
    state: ContainerState | None
    joined: bool
    log: str


def run_nodes(
    engine: Engine, image: str, options: NodesOptions, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the multi-node check; returns its report (also on failure) after removing
    everything it made. Raises UsageError/EngineError before anything ran."""
    check_options(options)
    info = checkable_image(engine, image)
    gpus = wants_gpus(options.gpus, engine.has_gpu_runtime())
    remove_stale(engine, say)
    with tempfile.TemporaryDirectory(prefix="imagekit-nodes-") as tmp:
        run = plan(info.labels, options, gpus, new_run_id(), Path(tmp))
        make_report_dirs(run)
        report = execute(engine, image, run, options, say)
    report["profile"] = info.env.get("IMAGEKIT_PROFILE") or info.labels.get(PROFILE_LABEL, "")
    return judge_transport(report)


def judge_transport(report: dict[str, Any]) -> dict[str, Any]:
    """A passing run of a multi-node-ib image fails where NCCL moved the data over anything
    but InfiniBand (the check in the image judges too; this covers what it did not see)."""
    if report["status"] != "passed" or report.get("backend") != "nccl":
        return report
    problem = transport_problem(report.get("profile"), report.get("transport"))
    return {**report, "status": "failed", "reason": problem} if problem else report


def execute(
    engine: Engine, image: str, run: Plan, options: NodesOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    started: dict[str, str] = {}
    network_made = False
    try:
        with signals_raise():
            subnet = create_network(engine, run, options)
            network_made = True
            say(f"run {run.run_id}: {len(run.nodes)} nodes on network {run.network} ({subnet})")
            began = time.time()
            for node in run.nodes:
                started[node.host] = engine.start(image, node.command, node.options).id
            watched = watch(engine, started, run.limit_s)
            outcomes = [outcome(engine, node, started, watched) for node in run.nodes]
            return build_report(run, subnet, began, watched, outcomes)
    finally:
        with signals_held():
            cleanup(engine, run, started, network_made)


def cleanup(engine: Engine, run: Plan, started: dict[str, str], network_made: bool) -> None:
    # By name as well as id: a start that failed half-way may have made the container.
    for node in run.nodes:
        engine.remove(started.get(node.host, node.container))
    if network_made:
        engine.remove_network(run.network)


def outcome(engine: Engine, node: Node, ids: dict[str, str], watched: Watched) -> NodeOutcome:
    cid = ids[node.host]
    return NodeOutcome(
        host=node.host,
        container=node.container,
        state=watched.states.get(node.host),
        joined=any(node.report_dir.glob("rank-*.json")),
        log=engine.logs(cid),
    )


def read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def build_report(
    run: Plan, subnet: str, began: float, watched: Watched, outcomes: list[NodeOutcome]
) -> dict[str, Any]:
    dirs = [n.report_dir for n in run.nodes]
    check = next((r for d in dirs if (r := read_json(d / "multinode.json"))), {})
    # Written by each rank as it joined: who took part, also when rank 0 never reported.
    ranks = sorted(
        (r for d in dirs for p in d.glob("rank-*.json") if (r := read_json(p))),
        key=lambda r: int(r.get("rank", 0)),
    )
    joined = [r["joined_at"] for r in ranks if isinstance(r.get("joined_at"), (int, float))]
    reason = failure(run, watched, outcomes, check)
    return {
        "ranks": [{k: v for k, v in r.items() if k != "joined_at"} for r in ranks],
        "hosts": sorted({str(r.get("host")) for r in ranks}),
        **{k: v for k, v in check.items() if k not in ("status", "reason")},
        "status": "failed" if reason else "passed",
        "reason": reason,
        "run_id": run.run_id,
        "network": run.network,
        "subnet": subnet,
        "nodes": len(run.nodes),
        "join_s": round(max(joined) - began, 2) if len(joined) else None,
        "seconds": round(watched.seconds, 2),
        "node_states": [node_summary(o) for o in outcomes],
    }


def node_summary(o: NodeOutcome) -> dict[str, Any]:
    return {
        "host": o.host,
        "container": o.container,
        "exit_code": None if o.state is None else o.state.exit_code,
        "joined": o.joined,
        "log_tail": "\n".join(o.log.splitlines()[-40:]),
    }


def failure(run: Plan, watched: Watched, outcomes: list[NodeOutcome], check: dict[str, Any]) -> str:
    """One line for the first thing that went wrong ("" when nothing did), naming nodes."""
    if watched.timed_out:
        return timeout_reason(run, outcomes)
    if check.get("status") == "failed":  # rank 0 judged, then its node exited 1
        return str(check.get("reason") or "the check failed")
    failed = [o for o in outcomes if is_failure(o.state)]
    arrived = [o for o in failed if "RendezvousTimeoutError" in o.log]
    if failed and len(arrived) == len(failed):
        missing = [o.host for o in outcomes if o not in arrived]
        return rendezvous_reason(run, missing or [o.host for o in outcomes])
    if failed:
        first = min(failed, key=lambda o: (o.state.finished_at if o.state else 0) or 0)
        return died_reason(first)
    if not check:
        return "every node exited 0 but no rank 0 wrote a report (see the logs below)"
    return ""


def rendezvous_reason(run: Plan, missing: list[str]) -> str:
    return (
        f"the rendezvous at {run.endpoint} did not complete within {run.join_timeout_s:g}s "
        "(--join-timeout): "
        f"{', '.join(missing)} never arrived"
    )


def died_reason(o: NodeOutcome) -> str:
    when = "after its ranks joined" if o.joined else "before its ranks joined"
    if o.state is None:
        return f"{o.host} ({o.container}) vanished: its container was removed {when}"
    code = o.state.exit_code
    if o.state.oom_killed:
        what = f"ran out of memory (exit {code})"
    elif code is not None and code > 128:
        what = f"was killed by {signal_name(code - 128)} (exit {code})"
    else:
        what = f"failed with exit code {code}"
    cause = root_cause(o.log)
    return f"{o.host} ({o.container}) {what} {when}{cause}; the other nodes were stopped"


def root_cause(log: str) -> str:
    """torchrun's summary names the rank that failed first and its exit code."""
    _, found, block = log.rpartition("Root Cause")
    if not found:
        return ""
    fields = dict(
        (key.strip(), value.strip())
        for key, sep, value in (line.partition(":") for line in block.splitlines())
        if sep
    )
    if "rank" not in fields or "exitcode" not in fields:
        return ""
    rank = fields["rank"].split(" ")[0]
    code = fields["exitcode"].split(" ")[0]
    return f" (its rank {rank} exited with {code})"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def timeout_reason(run: Plan, outcomes: list[NodeOutcome]) -> str:
    waiting = [o.host for o in outcomes if not o.joined]
    if waiting and len(waiting) < len(outcomes):
        tail = f"; {', '.join(waiting)} never joined"
    elif waiting:
        tail = "; no node joined (the rendezvous never completed)"
    else:
        tail = "; every node had joined: a rank hung in a collective"
    return f"the multi-node check did not finish within {run.limit_s:g}s{tail}"


# -- what the user sees ---------------------------------------------------------------------
def table(image: str, report: dict[str, Any]) -> str:
    lines = [f"multi-node self-check of {image}: {report['status'].upper()}"]
    for label, value in rows(report):
        lines.append(f"  {label:<17} {value}")
    if report["status"] != "passed":
        lines.append(f"  {'reason':<17} {report['reason']}")
        for node in report["node_states"]:
            lines.append(node_line(node))
    return "\n".join(lines)


def rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    out = [("run", f"{report['run_id']} (network {report['network']}, {report['subnet']})")]
    if report.get("world_size"):
        out.append(
            (
                "nodes x procs",
                f"{report['nodes']} x {report.get('procs_per_node', '?')} = world size "
                f"{report['world_size']} ({report.get('backend')}, {report.get('device')})",
            )
        )
    if report.get("ranks"):
        out.append(("hosts", hosts_line(report["ranks"])))
    if report.get("join_s") is not None:
        out.append(("joined in", f"{report['join_s']:g}s after the first container started"))
    if "grads_identical" in report:
        same = "yes" if report["grads_identical"] else "NO"
        out.append(
            ("grads identical", f"{same} (max difference {report['max_grad_difference']:g})")
        )
    ar = report.get("allreduce") or {}
    if "busbw_GBps" in ar:
        out.append(
            (
                "all-reduce",
                f"{ar['megabytes']} MB x {ar['iterations']}: algbw {ar['algbw_GBps']:g} GB/s, "
                f"busbw {ar['busbw_GBps']:g} GB/s",
            )
        )
    elif ar.get("note"):
        out.append(("all-reduce", ar["note"]))
    if "transport" in report:
        out.append(("transport", f"{report['transport'] or 'not read'} (what NCCL or gloo used)"))
    return out


def hosts_line(ranks: list[dict[str, Any]]) -> str:
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(f"{r['host']}", []).append(int(r["rank"]))
    parts = [
        f"{h} (rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))})"
        for h, rs in by_host.items()
    ]
    return ", ".join(parts)


def node_line(node: dict[str, Any]) -> str:
    code = node["exit_code"]
    state = "still running" if code is None else f"exit {code}"
    joined = "joined" if node["joined"] else "not joined"
    return f"  {node['host']:<17} {state}, {joined}; {telling_line(node['log_tail'])[:160]}"


def telling_line(log: str) -> str:
    """The line of a node's log worth a glance: its last error, else its last line that
    is not torchrun's ==== / ---- decoration."""
    lines = [line.strip() for line in log.splitlines() if line.strip(" =-")]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    if errors:
        return f"last error: {errors[-1]}"
    return f"log ends: {lines[-1]}" if lines else "no output"


def check_nodes(
    engine: Engine, image: str, options: NodesOptions, say: Callable[[str], None] = print
) -> str:
    """Returns the table; raises SelfCheckFailed (with the table and log tails) on failure."""
    report = run_nodes(engine, image, options, say)
    if options.json_path:
        write_atomic(options.json_path, json.dumps(report, indent=2, default=str) + "\n")
    text = table(image, report)
    if report["status"] != "passed":
        tails = [f"--- {n['host']} log ---\n{n['log_tail']}" for n in report["node_states"]]
        raise SelfCheckFailed(
            f"multi-node self-check of {image}: {report['reason']}", "\n".join([*tails, text])
        )
    return text
