"""docs/attestations.md cannot fall behind the code: every key the predicate holds is
documented, the example statement has the predicate's exact shape, and the admission policies
(examples no cluster runs here) parse as YAML and name the predicate type the code signs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.contract import check_table as registry
from imagekit.contract.checks import RESULT_STATUSES, Status
from imagekit.supply import attestation

DOC = Path(__file__).resolve().parent.parent / "docs" / "attestations.md"
IMAGE = "127.0.0.1:5000/x@sha256:" + "a" * 64
NOW = datetime(2026, 11, 26, 12, 0, 5, tzinfo=timezone.utc)
# Maps whose keys are data (label names), not fields of the predicate.
FREE_FORM = {"image.labels"}


def text() -> str:
    return DOC.read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text(), flags=re.M | re.S)


def built() -> dict[str, Any]:
    report = {
        "context": {
            "labels": {"io.imagekit.cell": "cpu-torch2.7.1-py3.11-debian12-slim"},
            "required": [],
        },
        "checks": [{"name": "stack", "status": "passed", "reason": ""}],
    }
    snapshot = {
        "format": 1,
        "taken_at": "2026-11-26T11:58:41+00:00",
        "python": "3.11.2",
        "driver": "570.86.15",
        "torch": {"version": "2.7.1+cu126", "cuda": "12.6"},
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}],
    }
    return attestation.predicate(IMAGE, report, json.dumps(snapshot).encode(), NOW)


def paths(value: Any, prefix: str = "") -> Iterator[str]:
    """Every key as the doc writes it: `a.b` for a nested object, `a[].b` inside a list."""
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            if path not in FREE_FORM:
                yield from paths(inner, path)
    elif isinstance(value, list):
        for item in value:
            yield from paths(item, f"{prefix}[]")


def shape(value: Any, prefix: str = "") -> set[str]:
    return set(paths(value, prefix))


def policies(kind: str) -> list[dict[str, Any]]:
    found = [
        doc
        for block in blocks("yaml")
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and doc.get("kind") == kind
    ]
    assert found, f"docs/attestations.md has no {kind} example"
    return found


def test_every_key_of_the_predicate_is_documented() -> None:
    doc = text()
    missing = sorted(p for p in set(paths(built())) if f"`{p}`" not in doc)
    assert not missing, f"docs/attestations.md does not document {missing}"


def test_the_predicate_type_is_documented() -> None:
    assert f"`{attestation.PREDICATE_TYPE}`" in text()


def test_every_check_name_is_documented() -> None:
    doc = text()
    assert [n for n in registry.ORDER if f"`{n}`" not in doc] == []


@pytest.mark.parametrize("status", [s for s in RESULT_STATUSES if s is not Status.FAILED])
def test_every_status_a_signed_check_can_have_is_documented(status: Status) -> None:
    assert f"`{status.value}`" in text()


def test_the_example_statement_has_the_predicates_shape() -> None:
    (example,) = [json.loads(b) for b in blocks("json")]
    assert example["_type"] in attestation.STATEMENT_TYPES
    assert example["predicateType"] == attestation.PREDICATE_TYPE
    assert shape(example["predicate"]) == shape(built())
    predicate = example["predicate"]
    assert predicate["verdict"] == "passed"
    assert all(c["status"] in ("passed", "skipped") for c in predicate["checks"])
    digest = predicate["image"]["digest"]
    assert [s["digest"]["sha256"] for s in example["subject"]] == [digest.removeprefix("sha256:")]
    # what imagekit verify accepts: the example is a statement it would keep
    (verdict,) = attestation.verdicts([example], digest, "NVIDIA H100 80GB HBM3")
    assert verdict.predicate == predicate


def test_the_kyverno_policy_checks_the_predicate_type_the_code_signs() -> None:
    (policy,) = policies("ClusterPolicy")
    assert policy["apiVersion"].startswith("kyverno.io/")
    entries = [v for rule in policy["spec"]["rules"] for v in rule["verifyImages"]]
    attestations = [a for entry in entries for a in entry["attestations"]]
    assert [a["type"] for a in attestations] == [attestation.PREDICATE_TYPE]
    keys = [e["keys"] for a in attestations for s in a["attestors"] for e in s["entries"]]
    assert [(k["rekor"]["ignoreTlog"], k["ctlog"]["ignoreSCT"]) for k in keys] == [(True, True)]
    assert "BEGIN PUBLIC KEY" in keys[0]["publicKeys"]
    conditions = [c for a in attestations for group in a["conditions"] for c in group["all"]]
    assert {(c["key"], c["operator"]) for c in conditions} == {
        ("{{ verdict }}", "Equals"),
        ("{{ gpu.models }}", "AnyIn"),
    }


def test_the_policy_controller_policy_checks_the_predicate_type_the_code_signs() -> None:
    (policy,) = policies("ClusterImagePolicy")
    assert policy["apiVersion"].startswith("policy.sigstore.dev/")
    authorities = policy["spec"]["authorities"]
    assert all("ctlog" not in a and "BEGIN PUBLIC KEY" in a["key"]["data"] for a in authorities)
    attestations = [a for authority in authorities for a in authority["attestations"]]
    assert [a["predicateType"] for a in attestations] == [attestation.PREDICATE_TYPE]
    for a in attestations:
        assert a["policy"]["type"] in ("cue", "rego")
        assert attestation.PREDICATE_TYPE in a["policy"]["data"]
        assert "gpu.models" in a["policy"]["data"]
