"""What a multi-node run came to, judged from how its containers ended and what its ranks
wrote: the report (also on failure) and one line for the first thing that went wrong.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.contract.checks import FAILED, PASSED
from imagekit.contract.transports import transport_problem
from imagekit.engine.interface import ContainerState
from imagekit.imagetest.nodes_plan import Plan


@dataclass
class Watched:
    states: dict[str, ContainerState | None]
    timed_out: bool
    seconds: float


@dataclass
class NodeOutcome:
    host: str
    container: str
    state: ContainerState | None
    joined: bool
    log: str


def is_failure(state: ContainerState | None) -> bool:
    return state is None or (not state.running and state.exit_code != 0)


def judge_transport(report: dict[str, Any]) -> dict[str, Any]:
    """A passing run of a multi-node-ib image fails where NCCL moved the data over anything
    but InfiniBand (the check in the image judges too; this covers what it did not see)."""
    if report["status"] != PASSED or report.get("backend") != "nccl":
        return report
    multi_node = len(report.get("hosts") or []) > 1
    problem = transport_problem(report.get("profile"), report.get("transport"), multi_node)
    return {**report, "status": FAILED, "reason": problem} if problem else report


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
        "status": FAILED if reason else PASSED,
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
    if check.get("status") == FAILED:  # rank 0 judged, then its node exited 1
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
