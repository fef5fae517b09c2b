"""Supply chain, without an engine: the attestation's predicate and what verification accepts
(pure functions, table-tested), provenance and the SBOM on push with the fake engine, and the
clear refusals where cosign or oras is missing. tests/real/test_supply_chain.py does it all
for real against the local registry."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import plan
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import QuietDisplay
from imagekit.builder.inputs import Inputs
from imagekit.engine import tools
from imagekit.engine.docker_images import file_from_tar
from imagekit.engine.fake import FakeEngine
from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells
from imagekit.supply import attestation, sbom

DIGEST = "sha256:" + "a" * 64
IMAGE = f"127.0.0.1:5000/team/train@{DIGEST}"
NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc)
H100 = "NVIDIA H100 80GB HBM3"


def report(*statuses: str) -> dict[str, Any]:
    checks = [
        {"name": f"c{i}", "status": s, "reason": "no GPU" if s == "skipped" else ""}
        for i, s in enumerate(statuses)
    ]
    labels = {"io.imagekit.cell": "cpu-torch2.13.0-py3.11-debian12-slim"}
    return {"context": {"labels": labels, "required": ["gpu"]}, "checks": checks}


def snapshot(gpus: list[str], driver: str | None = "570.86.15") -> bytes:
    snap = {
        "format": 1,
        "taken_at": "2026-11-26T11:59:00Z",
        "python": "3.11.2",
        "driver": driver,
        "torch": {"version": "2.7.1+cu126", "cuda": "12.6"},
        "gpus": [{"index": i, "name": name} for i, name in enumerate(gpus)],
    }
    return json.dumps(snap).encode()


def test_the_predicate_carries_the_verdict_the_gpus_and_the_snapshot_digest() -> None:
    snap = snapshot([H100, H100])
    pred = attestation.predicate(IMAGE, report("passed", "skipped"), snap, NOW)
    assert pred["verdict"] == "passed"
    assert pred["image"] == {
        "name": "127.0.0.1:5000/team/train",
        "digest": DIGEST,
        "labels": {"io.imagekit.cell": "cpu-torch2.13.0-py3.11-debian12-slim"},
    }
    assert pred["gpu"] == {"models": [H100], "count": 2}
    assert (pred["driver"], pred["cuda"], pred["torch"]) == ("570.86.15", "12.6", "2.7.1+cu126")
    assert pred["checks"][1] == {"name": "c1", "status": "skipped", "reason": "no GPU"}
    assert pred["required"] == ["gpu"] and pred["attested_at"] == "2026-11-26T12:00:00Z"
    import hashlib

    assert pred["host_snapshot"]["digest"] == "sha256:" + hashlib.sha256(snap).hexdigest()


def test_a_cpu_run_names_no_gpu_model() -> None:
    pred = attestation.predicate(IMAGE, report("passed"), snapshot([], driver=None), NOW)
    assert pred["gpu"] == {"models": [], "count": 0} and pred["driver"] is None


@pytest.mark.parametrize(
    "statuses", [("passed", "failed"), ("passed", "timed-out"), (), ("crashed",)]
)
def test_a_failed_run_is_never_attested(statuses: tuple[str, ...]) -> None:
    with pytest.raises(attestation.NotAttestable, match="not attested"):
        attestation.predicate(IMAGE, report(*statuses), snapshot([]), NOW)


def statement(
    digest: str = DIGEST, kind: str = attestation.PREDICATE_TYPE, **changes: Any
) -> dict[str, Any]:
    pred = attestation.predicate(IMAGE, report("passed"), snapshot([H100]), NOW)
    pred.update(changes)
    return {
        "_type": "https://in-toto.io/Statement/v0.1",
        "subject": [{"name": "127.0.0.1:5000/team/train", "digest": {"sha256": digest[7:]}}],
        "predicateType": kind,
        "predicate": pred,
    }


@pytest.mark.parametrize(
    ("found", "gpu_model", "accepted"),
    [
        ([statement()], "", 1),
        ([statement()], H100, 1),
        ([statement()], "NVIDIA A100-SXM4-80GB", 0),  # attested, but on another GPU model
        ([statement(digest="sha256:" + "b" * 64)], "", 0),  # another image's
        ([statement(kind="https://slsa.dev/provenance/v1")], "", 0),  # not imagekit's
        ([statement(verdict="failed")], "", 0),
        ([statement(checks=[{"name": "ddp", "status": "failed"}])], "", 0),
        ([statement(checks=[])], "", 0),
        ([{**statement(), "_type": "something-else"}], "", 0),
        ([statement(), statement(digest="sha256:" + "c" * 64)], "", 1),
        # a subject not in in-toto's shape names no digest (never a crash)
        ([{**statement(), "subject": [{"name": "x", "digest": DIGEST}]}], "", 0),
        ([{**statement(), "subject": [{"digest": {"sha256": 7}}, "x"]}], "", 0),
        ([{**statement(), "subject": {"digest": {"sha256": DIGEST[7:]}}}], "", 0),
    ],
)
def test_only_a_passing_run_of_exactly_this_digest_verifies(
    found: list[dict[str, Any]], gpu_model: str, accepted: int
) -> None:
    assert len(attestation.verdicts(found, DIGEST, gpu_model)) == accepted


def test_statements_are_read_from_cosigns_envelopes() -> None:
    payload = base64.b64encode(json.dumps(statement()).encode()).decode()
    envelope = {"payloadType": "application/vnd.in-toto+json", "payload": payload}
    output = "\n".join([json.dumps(envelope), "not json", json.dumps({"payload": "!!"})])
    assert attestation.statements(output) == [statement()]


def test_a_verdict_reads_as_lines() -> None:
    lines = attestation.VerifiedRun(DIGEST, statement()["predicate"]).lines()
    assert lines[0].startswith("attested 2026-11-26T12:00:00Z by imagekit")
    assert f"1 GPU(s): {H100}" in lines[0] and "CUDA 12.6" in lines[1]


@pytest.mark.parametrize(
    ("reference", "plain"),
    [
        ("127.0.0.1:5000/x:1", True),
        ("localhost:5000/x:1", True),
        ("[::1]:5000/x:1", True),
        ("ghcr.io/acme/x:1", False),
        ("registry.example.com:5000/x@" + DIGEST, False),
        ("debian:12", False),
    ],
)
def test_loopback_registries_are_plain_http(reference: str, plain: bool) -> None:
    assert tools.plain_http(reference) is plain


def test_a_missing_tool_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("IMAGEKIT_COSIGN", raising=False)
    with pytest.raises(UsageError, match="apt-get install cosign") as info:
        tools.find(tools.COSIGN, "--attest")
    assert info.value.exit_code == 2
    monkeypatch.setenv("IMAGEKIT_ORAS", "/nowhere/oras")
    with pytest.raises(UsageError, match=r"which is not at \$IMAGEKIT_ORAS='/nowhere/oras'"):
        tools.find(tools.ORAS, "--push")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from imagekit.cli import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def test_verify_without_cosign_is_exit_2_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("IMAGEKIT_COSIGN", raising=False)
    code, out, err = cli(capsys, "verify", "127.0.0.1:5000/x:1", "--key", "cosign.pub")
    assert code == 2 and out == ""
    assert "verify needs cosign" in err and "apt-get install cosign" in err
    assert "Traceback" not in err


ONE_CELL = """
extra_tags: ["{id}-latest"]
defaults: {installer: uv, size_budget: 20GB}
matrix:
  - {cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}
"""


def run(tmp_path: Path, engine: FakeEngine, **opts: Any) -> Any:
    cells = load_cells([_env(tmp_path)])
    options = BuildOptions(work_dir=tmp_path / ".imagekit", report_dir=tmp_path / "r", **opts)
    inputs = Inputs(ca_bundle=None, ca_source="none", index_url=None, wheelhouse=None)
    return Runner(engine, options, inputs, QuietDisplay()).run(plan(cells, options, inputs))


def _env(tmp_path: Path) -> Path:
    folder = tmp_path / "envs"
    folder.mkdir(exist_ok=True)
    (folder / "m.yaml").write_text(ONE_CELL.lstrip())
    return folder


@pytest.mark.parametrize(
    ("asked", "engine_can", "state", "via"),
    [
        (True, True, "attached", "push_compressed"),  # BuildKit pushes, with provenance
        (True, False, "unsupported", "push"),  # the classic store: the engine's push
        (False, True, "off", "push"),
    ],
)
def test_provenance_goes_with_the_push_where_the_engine_can_hold_it(
    tmp_path: Path, asked: bool, engine_can: bool, state: str, via: str
) -> None:
    engine = FakeEngine(provenance=engine_can)
    [report] = run(tmp_path, engine, push=True, provenance=asked)
    assert report.status == "built" and report.provenance == state
    pushes = [c for c in engine.calls if c[0] in ("push", "push_compressed")]
    assert {c[0] for c in pushes} == {via}
    assert all(("provenance" in c[1]) == (state == "attached") for c in pushes)
    saved = json.loads(next((tmp_path / "r").glob("*/build.json")).read_text())
    assert saved["provenance"] == state


def test_the_sbom_is_attached_to_each_pushed_digest_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attached: list[tuple[str, bytes]] = []

    def attach(ref: str, data: bytes) -> str:
        attached.append((ref, data))
        return ref.split("@")[0] + "@sha256:" + "9" * 64

    monkeypatch.setattr(sbom, "attach", attach)
    engine = FakeEngine(files={sbom.PATH: b'{"bomFormat": "CycloneDX"}\n'})
    [report] = run(tmp_path, engine, push=True, attach_sbom=True)
    assert report.status == "built" and len(report.pushed) >= 2
    assert [ref for ref, _ in attached] == list(dict.fromkeys(report.pushed))
    assert all(data == b'{"bomFormat": "CycloneDX"}\n' for _, data in attached)
    assert report.sbom and all(r.endswith("@sha256:" + "9" * 64) for r in report.sbom)


def test_an_image_without_its_sbom_fails_the_push_clearly(tmp_path: Path) -> None:
    [report] = run(tmp_path, FakeEngine(), push=True, attach_sbom=True, keep_going=True)
    assert report.status == "push-failed"
    assert "has no SBOM at /opt/imagekit/sbom.cdx.json" in report.error


def test_the_engine_reads_one_file_from_its_archive() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("sbom.cdx.json")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"{}\n"))
    assert file_from_tar(buffer.getvalue()) == b"{}\n"
