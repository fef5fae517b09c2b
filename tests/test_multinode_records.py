"""The multi-node check's records (contract/multinode.py): what the image writes reads
back the same, bad input is refused naming the key, and docs/selfcheck.md documents every
key the records have (and no other)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from imagekit.contract.checks import RecordError
from imagekit.contract.multinode import AllReduce, NodesReport, Rank
from imagekit.contract.records import NOT_READ, keys

DOC = Path(__file__).resolve().parents[1] / "docs" / "selfcheck.md"
WRITTEN = {
    "status": "failed",
    "reason": "NCCL used Socket",
    "format": 1,
    "backend": "nccl",
    "device": "cuda",
    "world_size": 2,
    "procs_per_node": 1,
    "ranks": [
        {"rank": 0, "node_rank": 0, "local_rank": 0, "host": "n0", "address": "", "pid": 7},
        {"rank": 1, "node_rank": 1, "local_rank": 0, "host": "n1", "address": "", "pid": 8},
    ],
    "hosts": ["n0", "n1"],
    "init_s": 1.5,
    "joined_at": 1795432933.5,
    "max_grad_difference": 0.0,
    "max_param_difference": 0,
    "grads_identical": True,
    "allreduce": {"megabytes": 64, "iterations": 5, "seconds": 0.01, "algbw_GBps": 6.7,
                  "busbw_GBps": 6.7, "checked": True},
    "transport": "Socket",
    "profile": "multi-node-ib",
    "torch": "2.7.1+cu126",
}  # fmt: skip


def documented(heading: str) -> set[str]:
    """The keys in the first column of the table after `heading` (a line of its own)."""
    text = DOC.read_text().split(f"\n{heading}\n", 1)[1]
    table = text.split("\n\n", 1)[0].strip()
    cells = [line.split("|")[1] for line in table.splitlines()[2:]]
    return {key for cell in cells for key in re.findall(r"`([^`]+)`", cell)}


@pytest.mark.parametrize(
    ("heading", "record"),
    [
        ("`multinode.json`:", NodesReport),
        ("`allreduce`:", AllReduce),
        ("`rank-R.json` (and each entry of `ranks`):", Rank),
    ],
)
def test_the_docs_name_every_key_of_the_records(heading: str, record: type) -> None:
    assert documented(heading) == set(keys(record))


def test_what_the_image_writes_reads_back_the_same() -> None:
    report = NodesReport.from_json(WRITTEN)
    assert report.to_json() == WRITTEN
    assert report.ranks[1].host == "n1" and report.allreduce.busbw_GBps == 6.7
    assert not report.passed and report.allreduce.wrong is NOT_READ


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "skipped"}, "multinode.json.status: 'skipped' is not one of passed, failed"),
        ({"format": 2}, "multinode.json.format: 2 is not one of 1"),
        ({"backend": "mpi"}, "multinode.json.backend: 'mpi' is not one of nccl, gloo"),
        ({"world_size": "2"}, "multinode.json.world_size: '2' is not a whole number"),
        ({"transport": 3}, "multinode.json.transport: 3 is not a string or null"),
        ({"ranks": [{"host": "n0"}]}, "multinode.json.ranks[0].rank: missing"),
        ({"allreduce": {"busbw_GBps": "fast"}}, "allreduce.busbw_GBps: 'fast' is not a number"),
        ({"grads_identical": 1}, "multinode.json.grads_identical: 1 is not true or false"),
    ],
)
def test_bad_input_is_refused_naming_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError, match=re.escape(message)):
        NodesReport.from_json({**WRITTEN, **change})


def test_a_report_from_before_the_format_and_unknown_keys_read_as_written() -> None:
    old = {k: v for k, v in WRITTEN.items() if k != "format"} | {"later": {"x": 1}}
    report = NodesReport.from_json(old)
    assert report.format is NOT_READ and report.extra == {"later": {"x": 1}}
    assert report.to_json() == old
