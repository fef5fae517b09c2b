"""The host snapshot as a typed record (contract/host_snapshot.py): every committed snapshot reads
and writes back unchanged, a key of the wrong type is refused naming its path (and
`--judge` exits 2 with it), and docs/host-snapshot.md documents every key the record has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from imagekit.contract.checks import RecordError
from imagekit.contract.host_snapshot import (
    Container,
    Cpu,
    Gpu,
    HostCopies,
    HostSnapshot,
    Nccl,
    Numa,
    Nvml,
    PeerCopy,
    Torch,
)
from imagekit.contract.records import NOT_READ, keys
from imagekit.selfcheck.run.main import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "host-snapshot.md"
COMMITTED = sorted(
    path
    for path in [*ROOT.glob("docs/gpu-runs/**/*.json"), *ROOT.glob("tests/data/**/*.json")]
    if "snapshot" in str(path.relative_to(ROOT))
)
# Records the top table documents key by key (`cpu.model`), not in one row.
DOTTED = {"container": Container, "cpu": Cpu, "torch": Torch, "nvml": Nvml}
# Records the top table documents in one row, their keys in its type column.
IN_ONE_ROW = {"numa": Numa, "p2p[]": PeerCopy, "host_copies": HostCopies, "nccl": Nccl}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_snapshot_round_trips(path: Path) -> None:
    data = json.loads(path.read_text())
    assert HostSnapshot.from_json(data).to_json() == data


def test_absent_is_not_read_and_null_is_null() -> None:
    snap = HostSnapshot.from_json({"format": 1, "container": {"imex_channels": None}})
    assert snap.container.imex_channels is None and snap.container.device_nodes is NOT_READ
    assert snap.gpus is NOT_READ and not snap.gpus
    assert snap.to_json() == {"format": 1, "container": {"imex_channels": None}}


def rows(heading: str) -> list[list[str]]:
    """The cells of the first table after `heading`."""
    text = DOC.read_text().split(f"\n{heading}\n", 1)[1]
    table = text[text.index("\n|") :].split("\n\n", 1)[0].strip()
    return [line.split(" | ") for line in table.splitlines()[2:]]


def names(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def test_the_docs_top_table_names_every_key_of_the_snapshot() -> None:
    found = {name for cells in rows("## Keys") for name in names(cells[0])}
    want = set()
    for key in keys(HostSnapshot):
        record = DOTTED.get(key)
        want |= {f"{key}.{k}" for k in keys(record)} if record else {key}
    assert found == (want - {"gpus", "p2p"}) | {"gpus[]", "p2p[]"}


@pytest.mark.parametrize("key", sorted(IN_ONE_ROW))
def test_the_docs_name_every_key_of_a_record_in_one_row(key: str) -> None:
    (cells,) = [c for c in rows("## Keys") if names(c[0]) == {key}]
    assert names(cells[1].split("}")[0]) == set(keys(IN_ONE_ROW[key]))


def test_the_docs_gpu_table_names_every_key_of_a_gpu() -> None:
    found = {name for cells in rows_of_gpus() for name in names(cells[0])}
    assert found == set(keys(Gpu))


def rows_of_gpus() -> list[list[str]]:
    text = DOC.read_text().split("\n## Keys\n", 1)[1]
    second = text.split("\n| key | meaning |\n", 1)[1]
    return [line.split(" | ") for line in second.split("\n\n", 1)[0].splitlines()[1:]]


BAD = [
    ({"gpus": [{"index": 0, "h2d_gbps": "fast"}]}, "gpus[0].h2d_gbps: 'fast' is not a number"),
    ({"container": {"device_nodes": "/dev/nvidia0"}}, "container.device_nodes: '/dev/nvidia0'"),
    ({"nccl": {"transport": 3}}, "nccl.transport: 3 is not"),
    ({"p2p": [{"gbps": []}]}, "p2p[0].gbps: [] is not a number or null"),
    ({"expected_gpus": "8"}, "expected_gpus: '8' is not a whole number or null"),
    ({"checks": {"ddp": {"status": "ok"}}}, "checks.ddp.status: 'ok' is not a result status"),
    # a hand-edited counter that is not a count: refused at load, naming the key
    ({"gpus": [{"xid_events": "79"}]}, "gpus[0].xid_events: '79' is not a list or null"),
    ({"gpus": [{"xid_events": [79, None]}]}, "gpus[0].xid_events[1]: None is not a whole"),
    ({"gpus": [{"ecc_sram_uncorrected": "1"}]}, "gpus[0].ecc_sram_uncorrected: '1' is not"),
    ({"gpus": [{"ecc_aggregate_uncorrected": True}]}, "gpus[0].ecc_aggregate_uncorrected: True"),
    ({"gpus": [{"pcie_replays_during_run": 3.5}]}, "gpus[0].pcie_replays_during_run: 3.5"),
    ({"gpus": [{"power_limit_w": "700"}]}, "gpus[0].power_limit_w: '700' is not a number"),
    ({"gpus": [{"temperature_max_c": [90]}]}, "gpus[0].temperature_max_c: [90] is not"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_a_key_of_the_wrong_type_is_refused_naming_its_path(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(RecordError, match=re.escape(message)):
        HostSnapshot.from_json({"format": 1, **change})


@pytest.mark.parametrize(("change", "message"), BAD[:1] + BAD[6:8])
def test_judge_exits_2_naming_the_key(
    tmp_path: Path, change: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hand-edited.json"
    path.write_text(json.dumps({"format": 1, **change}))
    assert main(["--judge", str(path)]) == 2
    assert message in capsys.readouterr().err
