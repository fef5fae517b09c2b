"""What a multi-node run came to, judged from how its containers ended and what its ranks
wrote (rank 0's verdict taken as the image wrote it): the report (also on failure) and one
line for the first thing that went wrong.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from imagekit.contract.checks import RecordError, Status
from imagekit.contract.multinode import REPORT, NodesReport, Rank
from imagekit.contract.records import NOT_READ, given, or_none, write
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


@dataclass(frozen=True)
class NodeState:
    """How one node's container ended."""

    host: str
    container: str
    exit_code: int | None  # None: still running, or its container vanished
    joined: bool  # its ranks wrote their rank files
    log_tail: str  # its last 40 lines


@dataclass(frozen=True)
class NodesRun:
    """What `imagekit test --nodes` reports (`--json`): rank 0's report, where it wrote
    one, with how the run went; its JSON is the report's keys and the run's side by side."""

    status: str
    reason: str
    check: NodesReport | None
    ranks: list[Rank]  # from the rank files, without joined_at
    hosts: list[str]
    run_id: str
    network: str
    subnet: str
    nodes: int
    join_s: float | None
    seconds: float
    node_states: list[NodeState]
    profile: str = ""  # the image's profile as the host reads it, where rank 0 said none

    def report(self) -> NodesReport:
        """Rank 0's report, or an empty one where it wrote none."""
        return self.check or NodesReport(self.status)

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    def to_json(self) -> dict[str, Any]:
        check = self.check.to_json() if self.check else {}
        out: dict[str, Any] = {
            "ranks": [r.to_json() for r in self.ranks],
            "hosts": self.hosts,
            **{k: v for k, v in check.items() if k not in ("status", "reason")},
            "status": self.status,
            "reason": self.reason,
            "run_id": self.run_id,
            "network": self.network,
            "subnet": self.subnet,
            "nodes": self.nodes,
            "join_s": self.join_s,
            "seconds": self.seconds,
            "node_states": [write(n) for n in self.node_states],
        }
        out.setdefault("profile", self.profile)
        return out


NO_REPORT = "every node exited 0 but no rank 0 wrote a report (see the logs below)"


def is_failure(state: ContainerState | None) -> bool:
    return state is None or (not state.running and state.exit_code != 0)


def read_report(path: Path) -> NodesReport | None:
    """Rank 0's report in one node's folder; None where there is none. One that is not a
    report (a file half-written by another version, say) is refused naming the key."""
    data = read_json(path)
    return NodesReport.from_json(data, str(path)) if data else None


def read_ranks(dirs: list[Path]) -> list[Rank]:
    """The rank files: who took part, also when rank 0 never reported. A file that is no
    rank's (unreadable or malformed) is passed over, as a rank that never wrote one."""
    found = []
    for path in (p for d in dirs for p in d.glob("rank-*.json")):
        try:
            found.append(Rank.from_json(read_json(path) or None, path.name))
        except RecordError:
            continue
    return sorted(found, key=lambda r: r.rank)


def read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def build_report(
    run: Plan, subnet: str, began: float, watched: Watched, outcomes: list[NodeOutcome]
) -> NodesRun:
    dirs = [n.report_dir for n in run.nodes]
    try:
        check = next((r for d in dirs if (r := read_report(d / REPORT))), None)
        unread = ""
    except RecordError as exc:
        check, unread = None, f"rank 0's report is not one this imagekit reads: {exc}"
    ranks = read_ranks(dirs)
    joined = [r.joined_at for r in ranks if given(r.joined_at)]
    reason = failure(run, watched, outcomes, check)
    if unread and reason == NO_REPORT:
        reason = unread
    return NodesRun(
        status=Status.FAILED.value if reason else Status.PASSED.value,
        reason=reason,
        check=check,
        ranks=check.ranks
        if check and given(check.ranks)
        else [replace(r, joined_at=NOT_READ) for r in ranks],
        hosts=check.hosts
        if check and given(check.hosts)
        else sorted({str(or_none(r.host)) for r in ranks}),
        run_id=run.run_id,
        network=run.network,
        subnet=subnet,
        nodes=len(run.nodes),
        join_s=round(max(joined) - began, 2) if len(joined) else None,
        seconds=round(watched.seconds, 2),
        node_states=[node_summary(o) for o in outcomes],
    )


def node_summary(o: NodeOutcome) -> NodeState:
    return NodeState(
        host=o.host,
        container=o.container,
        exit_code=None if o.state is None else o.state.exit_code,
        joined=o.joined,
        log_tail="\n".join(o.log.splitlines()[-40:]),
    )


def failure(
    run: Plan, watched: Watched, outcomes: list[NodeOutcome], check: NodesReport | None
) -> str:
    """One line for the first thing that went wrong ("" when nothing did), naming nodes."""
    if watched.timed_out:
        return timeout_reason(run, outcomes)
    if check is not None and not check.passed:  # rank 0 judged, then its node exited 1
        return str(check.reason or "the check failed")
    failed = [o for o in outcomes if is_failure(o.state)]
    arrived = [o for o in failed if "RendezvousTimeoutError" in o.log]
    if failed and len(arrived) == len(failed):
        missing = [o.host for o in outcomes if o not in arrived]
        return rendezvous_reason(run, missing or [o.host for o in outcomes])
    if failed:
        first = min(failed, key=lambda o: (o.state.finished_at if o.state else 0) or 0)
        return died_reason(first)
    if check is None:
        return NO_REPORT
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
