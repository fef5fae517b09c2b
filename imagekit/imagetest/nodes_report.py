"""What the user sees of a multi-node run: its report as a table, and each failed node's
telling log line."""

from __future__ import annotations

from imagekit.contract.multinode import AllReduce, Rank
from imagekit.contract.records import given
from imagekit.imagetest.nodes_verdict import NodesRun, NodeState


def nodes_table(image: str, run: NodesRun) -> list[str]:
    lines = [f"multi-node self-check of {image}: {run.status.upper()}"]
    for label, value in rows(run):
        lines.append(f"  {label:<17} {value}")
    if not run.passed:
        lines.append(f"  {'reason':<17} {run.reason}")
        for node in run.node_states:
            lines.append(node_line(node))
    return lines


def rows(run: NodesRun) -> list[tuple[str, str]]:
    check = run.report()
    out = [("run", f"{run.run_id} (network {run.network}, {run.subnet})")]
    if check.world_size:
        procs = check.procs_per_node if given(check.procs_per_node) else "?"
        out.append(
            (
                "nodes x procs",
                f"{run.nodes} x {procs} = world size "
                f"{check.world_size} ({shown(check.backend)}, {shown(check.device)})",
            )
        )
    if run.ranks:
        out.append(("hosts", hosts_line(run.ranks)))
    if run.join_s is not None:
        out.append(("joined in", f"{run.join_s:g}s after the first container started"))
    if given(check.grads_identical):
        same = "yes" if check.grads_identical else "NO"
        out.append(("grads identical", f"{same} (max difference {check.max_grad_difference:g})"))
    out += allreduce_row(check.allreduce or AllReduce())
    if given(check.transport):
        out.append(("transport", f"{check.transport or 'not read'} (what NCCL or gloo used)"))
    return out


def shown(value: object) -> str:
    """A value as the table shows it: None where the report left it out."""
    return str(value) if given(value) else "None"


def allreduce_row(ar: AllReduce) -> list[tuple[str, str]]:
    if given(ar.busbw_GBps):
        return [
            (
                "all-reduce",
                f"{ar.megabytes} MB x {ar.iterations}: algbw {ar.algbw_GBps:g} GB/s, "
                f"busbw {ar.busbw_GBps:g} GB/s",
            )
        ]
    return [("all-reduce", ar.note)] if ar.note else []


def hosts_line(ranks: list[Rank]) -> str:
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(shown(r.host), []).append(r.rank)
    parts = [
        f"{h} (rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))})"
        for h, rs in by_host.items()
    ]
    return ", ".join(parts)


def node_line(node: NodeState) -> str:
    code = node.exit_code
    state = "still running" if code is None else f"exit {code}"
    joined = "joined" if node.joined else "not joined"
    return f"  {node.host:<17} {state}, {joined}; {telling_line(node.log_tail)[:160]}"


def telling_line(log: str) -> str:
    """The line of a node's log worth a glance: its last error, else its last line that
    is not torchrun's ==== / ---- decoration."""
    lines = [line.strip() for line in log.split("\n") if line.strip(" =-")]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    if errors:
        return f"last error: {errors[-1]}"
    return f"log ends: {lines[-1]}" if lines else "no output"
