"""The multi-node check's records: what each rank writes when it joins (rank-R.json), what
rank 0 writes when the run is done (multinode.json), and how the host reads both back.

The image judges the run (probes/nodes.py, the transport by contract/transports.py) and the
host takes that verdict as written. Every key is documented in docs/selfcheck.md ("What the
multi-node check writes"). Standard library only (it runs in the image).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from imagekit.contract.checks import FAILED, PASSED, RecordError, Status
from imagekit.contract.records import NOT_READ, Record, read

FORMAT = 1  # multinode.json's format; a report without `format` is from before it (read as 1)
REPORT = "multinode.json"  # rank 0's report, in each node's report folder
BACKENDS = ("nccl", "gloo")  # NCCL on GPUs, gloo on the CPU
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Rank(Record):
    """One process of the run as it joined: its rank file (rank-R.json) and an entry of
    the report's `ranks`."""

    WHERE: ClassVar[str] = "rank"

    rank: int
    node_rank: int = NOT_READ
    local_rank: int = NOT_READ
    host: str = NOT_READ
    address: str = NOT_READ
    pid: int = NOT_READ
    joined_at: float = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AllReduce(Record):
    """The timed all-reduce: its figures, or `note` where one rank moves no data."""

    megabytes: int = NOT_READ
    iterations: int = NOT_READ
    seconds: float = NOT_READ
    algbw_GBps: float = NOT_READ
    busbw_GBps: float = NOT_READ
    checked: bool = NOT_READ
    wrong: str = NOT_READ
    note: str = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodesReport(Record):
    """multinode.json: rank 0's verdict over the whole run, and what it measured."""

    status: str
    reason: str = NOT_READ
    format: int = NOT_READ
    backend: str = NOT_READ
    device: str = NOT_READ
    world_size: int = NOT_READ
    procs_per_node: int = NOT_READ
    ranks: list[Rank] = NOT_READ
    hosts: list[str] = NOT_READ
    init_s: float = NOT_READ
    joined_at: float = NOT_READ
    max_grad_difference: float = NOT_READ
    max_param_difference: float = NOT_READ
    grads_identical: bool = NOT_READ
    allreduce: AllReduce = NOT_READ
    transport: str | None = NOT_READ
    profile: str = NOT_READ
    torch: str = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    @classmethod
    def from_json(cls, data: object, where: str = REPORT) -> NodesReport:
        report: NodesReport = read(cls, data, where)
        for key, value, fits in (
            ("status", report.status, (PASSED, FAILED)),
            ("format", report.format, (NOT_READ, FORMAT)),
            ("backend", report.backend, (NOT_READ, *BACKENDS)),
            ("device", report.device, (NOT_READ, *DEVICES)),
        ):
            if value not in fits:
                shown = ", ".join(str(f) for f in fits if f is not NOT_READ)
                raise RecordError(f"{where}.{key}: {value!r} is not one of {shown}")
        return report
