"""The signed self-check attestation (docs/attestations.md): an in-toto statement whose
subject is the image's digest in its registry and whose predicate is the self-check's verdict
on this host. cosign signs it with a key and pushes it beside the image, as cosign does;
`imagekit verify` and `cosign verify-attestation --type PREDICATE_TYPE` check it.

The predicate is built from typed records: the self-check's own report, read as results
(contract/checks.py's CheckResult), and its host snapshot (contract/host_snapshot.py); pure
functions here, table-tested; a failed run is never attested (the caller attests after a pass only,
and `predicate` refuses a report with a failed check).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from imagekit import __version__
from imagekit.contract import refs
from imagekit.contract.checks import (
    RESULT_STATUSES,
    CheckResult,
    RecordError,
    Status,
    results_from_report,
)
from imagekit.contract.host_snapshot import HostSnapshot, Nvml, Torch
from imagekit.contract.records import or_none
from imagekit.engine import referrers
from imagekit.errors import ImagekitError

PREDICATE_TYPE = "https://imagekit.dev/attestations/self-check/v1"
STATEMENT_TYPES = ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")


class NotAttestable(ImagekitError):
    """The run cannot be attested (a failed check, no report): never signed."""


class NotVerified(ImagekitError):
    """No valid attestation of a passing run for this digest and key (exit 1)."""


def predicate(
    image: str, report: Mapping[str, Any], snapshot_bytes: bytes, now: datetime
) -> dict[str, Any]:
    """The verdict of one passing self-check run of `image` (name@sha256:...), from its
    report (selfcheck.json) and the host snapshot it judged (host.json, as written)."""
    try:
        results = results_from_report(report)
    except RecordError as exc:
        raise NotAttestable(f"the self-check of {image} is not attested: {exc}") from None
    checks = [_check(c) for c in results]
    bad = [c.name for c in results if c.failed]  # a skipped check said why
    if not checks or bad:
        why = f"checks {', '.join(bad)} did not pass" if bad else "the report lists no check"
        raise NotAttestable(f"the self-check of {image} is not attested: {why}")
    snap = _snapshot(image, snapshot_bytes)
    context = report.get("context") or {}  # the image's labels, what --require asked
    torch = snap.torch or Torch()
    gpus = snap.gpus or []
    ref = refs.parse(image)
    return {
        "verdict": Status.PASSED.value,
        "image": {"name": ref.name, "digest": ref.digest, "labels": context.get("labels") or {}},
        "checks": checks,
        "required": list(context.get("required") or []),
        "gpu": {"models": sorted({g.name for g in gpus if g.name}), "count": len(gpus)},
        "driver": or_none(snap.driver) or or_none((snap.nvml or Nvml()).driver),
        "cuda": or_none(torch.cuda),
        "torch": or_none(torch.version),
        "python": or_none(snap.python),
        "host_snapshot": {
            "digest": "sha256:" + hashlib.sha256(snapshot_bytes).hexdigest(),
            "taken_at": or_none(snap.taken_at),
        },
        "imagekit": __version__,
        "attested_at": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _snapshot(image: str, snapshot_bytes: bytes) -> HostSnapshot:
    """The host snapshot the run judged, as its record (contract/host_snapshot.py)."""
    try:
        return HostSnapshot.from_json(json.loads(snapshot_bytes))
    except (ValueError, RecordError) as exc:  # RecordError is a ValueError too
        raise NotAttestable(f"the self-check of {image} is not attested: {exc}") from None


def _check(result: CheckResult) -> dict[str, str]:
    return {"name": result.name, "status": result.status.value, "reason": result.reason}


def attest(image: str, pred: Mapping[str, Any], key: str) -> list[str]:
    """Sign the statement for `image` (name@sha256:...) with `key` (a cosign key file, or
    any key reference cosign takes: env://VAR, a KMS URI) and push it to the registry."""
    referrers.attest(image, json.dumps(pred, indent=2, sort_keys=True) + "\n", PREDICATE_TYPE, key)
    return [f"attested: {image} ({PREDICATE_TYPE})", f"verify: imagekit verify {image} --key PUB"]


@dataclass(frozen=True)
class VerifiedRun:
    """One verified attestation of a passing run."""

    digest: str
    predicate: dict[str, Any]

    def lines(self) -> list[str]:
        p = self.predicate
        gpu = p.get("gpu") or {}
        models = ", ".join(gpu.get("models") or []) or "no GPU (a CPU run)"
        snapshot = (p.get("host_snapshot") or {}).get("digest")
        checks = p.get("checks") or []
        passed = [c["name"] for c in checks if c.get("status") == Status.PASSED]
        skipped = [_skip(c) for c in checks if c.get("status") == Status.SKIPPED]
        return [
            f"attested {p.get('attested_at')} by imagekit {p.get('imagekit')}: passed on "
            f"{gpu.get('count', 0)} GPU(s): {models}",
            f"  driver {p.get('driver') or '-'}, CUDA {p.get('cuda') or '-'}, "
            f"torch {p.get('torch') or '-'}, host snapshot {snapshot}",
            f"  passed: {', '.join(passed) or '-'}",
            *([f"  skipped: {', '.join(skipped)}"] if skipped else []),
        ]


def _skip(check: dict[str, Any]) -> str:
    return f"{check['name']} ({check.get('reason') or 'skipped'})"


def statements(cosign_output: str) -> list[dict[str, Any]]:
    """The in-toto statements in `cosign verify-attestation`'s output: one DSSE envelope
    (JSON) per line, its payload the base64 of the statement."""
    found = []
    for line in cosign_output.splitlines():
        try:
            envelope = json.loads(line)
            found.append(json.loads(base64.b64decode(envelope["payload"], validate=True)))
        except (ValueError, KeyError, TypeError, binascii.Error):
            continue  # not an envelope (cosign prints its notes to stderr, but be safe)
    return [s for s in found if isinstance(s, dict)]


def verdicts(
    found: Sequence[Mapping[str, Any]], digest: str, gpu_model: str = ""
) -> list[VerifiedRun]:
    """The statements that attest a passing self-check of exactly `digest` (sha256:...), on a
    GPU named `gpu_model` where one is asked for. Anything else is no verdict."""
    good = []
    for statement in found:
        pred = statement.get("predicate")
        if (
            statement.get("_type") in STATEMENT_TYPES
            and statement.get("predicateType") == PREDICATE_TYPE
            and digest in subject_digests(statement.get("subject"))
            and isinstance(pred, dict)
            and _passing(pred)
            and (not gpu_model or gpu_model in ((pred.get("gpu") or {}).get("models") or []))
        ):
            good.append(VerifiedRun(digest, pred))
    return good


def subject_digests(subject: object) -> set[str]:
    """The digests (sha256:...) an in-toto statement's subject names; none where the subject
    is not the list of {name, digest: {sha256}} the format has."""
    if not isinstance(subject, list):
        return set()
    return {
        f"sha256:{s['digest']['sha256']}"
        for s in subject
        if isinstance(s, dict)
        and isinstance(s.get("digest"), dict)
        and isinstance(s["digest"].get("sha256"), str)
        and s["digest"]["sha256"]
    }


def _passing(pred: Mapping[str, Any]) -> bool:
    checks = pred.get("checks")
    return (
        pred.get("verdict") == Status.PASSED
        and isinstance(checks, list)
        and bool(checks)
        and all(isinstance(c, dict) and _not_failed(c.get("status")) for c in checks)
    )


def _not_failed(status: object) -> bool:
    """A check's status in a passing run: passed, or skipped (it said why)."""
    return status in RESULT_STATUSES and status != Status.FAILED


def verify(image: str, key: str, gpu_model: str = "") -> tuple[str, list[VerifiedRun]]:
    """(the digest IMAGE names in its registry, the verified verdicts for it). cosign reads
    the digest (a tag is resolved once, by cosign) and checks every signature against KEY
    and every statement's subject against that digest; NotVerified where none is left of a
    passing run (on `gpu_model` where one is asked for)."""
    what = f"{image} has no valid self-check attestation signed by {key}"
    output, refused = referrers.verified(image, key, PREDICATE_TYPE, what)
    if refused:
        raise NotVerified(*refused)
    found = statements(output)
    digest = refs.parse(image).digest or _one_subject(image, found)
    good = verdicts(found, digest, gpu_model)
    if not good:
        on = f" on {gpu_model}" if gpu_model else ""
        raise NotVerified(
            f"{image} ({digest}) has signed attestations, but none of a passing run{on}"
        )
    return digest, good


def _one_subject(image: str, found: Sequence[Mapping[str, Any]]) -> str:
    """The digest cosign verified the statements against: their one subject digest."""
    digests = set().union(*(subject_digests(statement.get("subject")) for statement in found))
    if len(digests) != 1:
        raise NotVerified(f"{image}: cosign's verified statements name {len(digests)} digests")
    return digests.pop()
