"""What the user sees of a multi-node run: its report as a table, and each failed node's
telling log line."""

from __future__ import annotations

from typing import Any

from imagekit.contract.checks import PASSED


def nodes_table(image: str, report: dict[str, Any]) -> list[str]:
    lines = [f"multi-node self-check of {image}: {report['status'].upper()}"]
    for label, value in rows(report):
        lines.append(f"  {label:<17} {value}")
    if report["status"] != PASSED:
        lines.append(f"  {'reason':<17} {report['reason']}")
        for node in report["node_states"]:
            lines.append(node_line(node))
    return lines


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
    lines = [line.strip() for line in log.split("\n") if line.strip(" =-")]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    if errors:
        return f"last error: {errors[-1]}"
    return f"log ends: {lines[-1]}" if lines else "no output"
