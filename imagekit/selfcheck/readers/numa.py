"""The host's NUMA layout, for the host snapshot's `numa` key (each node's CPUs in the cpulist
form of verdicts/cpulist.py).

Standard library only. On a Grace host the layout is what decides where a rank's threads and
memory belong: a GH200 has one CPU node (its Grace) and its GPU's memory as a node of its own
without CPUs; a GB200 compute tray has two Graces, one node each. The readers take their
paths as arguments so the tests can give them a fake tree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

NODE_ROOT = Path("/sys/devices/system/node")
BALANCING = Path("/proc/sys/kernel/numa_balancing")
_NODE = re.compile(r"node(\d+)")
_MEM_TOTAL = re.compile(r"Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB")


def read_numa(root: Path = NODE_ROOT, balancing: Path = BALANCING) -> dict[str, Any]:
    """{"nodes": [{"node", "cpus", "memory_mib"}, ...] by node number, "balancing": the
    kernel's numa_balancing or None}. A kernel without NUMA has no node folder, and then
    nothing to balance between: {"nodes": [], "balancing": None}."""
    numbers = _node_numbers(root)
    if numbers is None:
        return {"nodes": [], "balancing": None}
    return {
        "nodes": [read_node(root / f"node{n}", n) for n in numbers],
        "balancing": read_balancing(balancing),
    }


def _node_numbers(root: Path) -> list[int] | None:
    try:
        names = os.listdir(root)
    except OSError:
        return None
    return sorted(int(m.group(1)) for m in map(_NODE.fullmatch, names) if m)


def read_node(folder: Path, number: int) -> dict[str, Any]:
    """One node: its CPUs ("" for a node of memory only, such as a GH200's GPU memory) and
    its memory in MiB; a file that cannot be read leaves its key out (not read)."""
    node: dict[str, Any] = {"node": number}
    cpus = _read_text(folder / "cpulist")
    if cpus is not None:
        node["cpus"] = cpus.strip()
    memory = _memory_mib(_read_text(folder / "meminfo"))
    if memory is not None:
        node["memory_mib"] = memory
    return node


def _memory_mib(meminfo: str | None) -> int | None:
    """MemTotal of a node's meminfo in MiB, rounded down: "Node 0 MemTotal:  501219328 kB"
    is 489472."""
    found = _MEM_TOTAL.search(meminfo or "")
    return int(found.group(1)) // 1024 if found else None


def read_balancing(path: Path = BALANCING) -> int | None:
    """/proc/sys/kernel/numa_balancing (0 off, 1 on, 2 and 3 memory tiering); None where it
    cannot be read."""
    text = _read_text(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
