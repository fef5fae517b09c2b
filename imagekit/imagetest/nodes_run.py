"""`imagekit test IMAGE --nodes N`, run: the self-check's distributed part across N containers.

The run is watched from here: the first node to fail ends it (a dead peer never sends a TCP
reset, so the others would wait in a collective), and so does the time limit. Containers
and the network carry the run's label and are removed in every case: success, failure,
Ctrl-C, SIGTERM; leftovers of a run whose imagekit process died are removed by the next.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from imagekit import terminal
from imagekit.contract.checks import ENV_PROFILE
from imagekit.engine.interface import RunEngine, RunRegistryEngine, SubnetTaken
from imagekit.errors import EngineError, SelfCheckFailed, UsageError
from imagekit.imagetest.image import checkable_image, wants_gpus
from imagekit.imagetest.nodes_plan import (
    NODE_LABEL,
    OWNER_LABEL,
    PROFILE_LABEL,
    RUN_LABEL,
    Node,
    NodesOptions,
    Plan,
    check_options,
    make_report_dirs,
    new_run_id,
    plan,
    subnets,
)
from imagekit.imagetest.nodes_report import nodes_table
from imagekit.imagetest.nodes_verdict import (
    NodeOutcome,
    NodesRun,
    Watched,
    build_report,
    is_failure,
)
from imagekit.imagetest.signals import signals_held, signals_raise
from imagekit.paths import write_atomic

GRACE_S = 3  # after the first node fails, the others get this long to stop on their own


def remove_stale(engine: RunEngine, say: Callable[[str], None]) -> None:
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


def create_network(engine: RunEngine, run: Plan, options: NodesOptions) -> str:
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


def watch(
    engine: RunEngine,
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


def run_nodes(
    engine: RunRegistryEngine, image: str, options: NodesOptions, say: Callable[[str], None] = print
) -> NodesRun:
    """Run the multi-node check; returns its report (also on failure) after removing
    everything it made. Raises UsageError/EngineError before anything ran. The verdict is
    the image's own (rank 0 judged the transport); the host adds how the run went."""
    check_options(options)
    info = checkable_image(engine, image)
    gpus = wants_gpus(options.gpus, engine.has_gpu_runtime())
    remove_stale(engine, say)
    with tempfile.TemporaryDirectory(prefix="imagekit-nodes-") as tmp:
        run = plan(info.labels, options, gpus, new_run_id(), Path(tmp))
        make_report_dirs(run)
        report = execute(engine, image, run, options, say)
    return replace(report, profile=info.env.get(ENV_PROFILE) or info.labels.get(PROFILE_LABEL, ""))


def execute(
    engine: RunEngine, image: str, run: Plan, options: NodesOptions, say: Callable[[str], None]
) -> NodesRun:
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


def cleanup(engine: RunEngine, run: Plan, started: dict[str, str], network_made: bool) -> None:
    # By name as well as id: a start that failed half-way may have made the container.
    for node in run.nodes:
        engine.remove(started.get(node.host, node.container))
    if network_made:
        engine.remove_network(run.network)


def outcome(engine: RunEngine, node: Node, ids: dict[str, str], watched: Watched) -> NodeOutcome:
    cid = ids[node.host]
    return NodeOutcome(
        host=node.host,
        container=node.container,
        state=watched.states.get(node.host),
        joined=any(node.report_dir.glob("rank-*.json")),
        log=engine.logs(cid),
    )


def check_nodes(
    engine: RunRegistryEngine,
    image: str,
    options: NodesOptions,
    say: Callable[[str], None] = terminal.echo,
) -> list[str]:
    """Returns the table's lines; raises SelfCheckFailed (with the table and each node's log
    tail behind a gutter) on failure."""
    report = run_nodes(engine, image, options, say)
    if options.json_path:
        text = json.dumps(report.to_json(), indent=2, default=str) + "\n"
        write_atomic(options.json_path, text)
    table = nodes_table(image, report)
    if not report.passed:
        tails = [
            line
            for n in report.node_states
            for line in [f"--- {n.host} log ---", *terminal.foreign(n.log_tail)]
        ]
        raise SelfCheckFailed(
            f"multi-node self-check of {image}: {report.reason}", [*tails, *table]
        )
    return table
