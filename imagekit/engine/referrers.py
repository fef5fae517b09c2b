"""What refers to a pushed image in its registry, written and read in one place beside the
image's own reads (image_registry.py): artifacts attached with oras (the SBOM, through the
referrers API or the `sha256-<digest>` tag schema) and statements signed with cosign (the
self-check attestation). supply/ decides what to attach and judges what comes back."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from imagekit.engine import tools
from imagekit.errors import ImagekitError


def attach(pushed: str, data: bytes, file: str, media_type: str, what: str) -> str:
    """Attach `data`, as `file` of type `media_type`, to `pushed` (name@sha256:...); the
    artifact's reference (`pushed` where oras printed none). `what` names it in an error."""
    with tempfile.TemporaryDirectory(prefix="imagekit-artifact-") as tmp:
        Path(tmp, file).write_bytes(data)
        args = ["attach", *tools.oras_http(pushed), "--artifact-type", media_type]
        args += ["--format", "json"]
        result = tools.run(tools.ORAS, [*args, pushed, f"{file}:{media_type}"], "--push", cwd=tmp)
    if result.returncode != 0:
        raise ImagekitError(*tools.failed(tools.ORAS, f"attaching {what} to {pushed}", result))
    try:
        return str(json.loads(result.stdout)["reference"])
    except (ValueError, KeyError, TypeError):
        return pushed


def referrers(reference: str, media_type: str, needed_for: str) -> list[dict[str, Any]]:
    """The artifacts of type `media_type` that refer to `reference`, as oras lists them."""
    args = ["discover", *tools.oras_http(reference), "--format", "json"]
    args += ["--artifact-type", media_type]
    result = tools.run(tools.ORAS, [*args, reference], needed_for)
    if result.returncode != 0:
        raise ImagekitError(
            *tools.failed(tools.ORAS, f"listing what refers to {reference}", result)
        )
    try:
        found = json.loads(result.stdout).get("referrers") or []
    except (ValueError, AttributeError):
        raise ImagekitError(f"oras discover {reference} printed no JSON") from None
    return [r for r in found if isinstance(r, dict) and r.get("artifactType") == media_type]


def pull_file(artifact: str, file: str, needed_for: str) -> bytes | None:
    """`file` of the artifact `artifact` (name@sha256:...); None where it has no such file."""
    with tempfile.TemporaryDirectory(prefix="imagekit-artifact-") as tmp:
        args = ["pull", *tools.oras_http(artifact), "-o", tmp, artifact]
        result = tools.run(tools.ORAS, args, needed_for)
        if result.returncode != 0:
            raise ImagekitError(*tools.failed(tools.ORAS, f"reading {artifact}", result))
        path = Path(tmp, file)
        return path.read_bytes() if path.is_file() else None


def attest(image: str, predicate: str, predicate_type: str, key: str) -> None:
    """Sign `predicate` (JSON text) about `image` (name@sha256:...) with `key` (a cosign key
    file, env://VAR, a KMS URI) and push the statement to the image's registry."""
    with tempfile.TemporaryDirectory(prefix="imagekit-attest-") as tmp:
        path = Path(tmp) / "predicate.json"
        path.write_text(predicate)
        # Offline signing with a key: no transparency log, no Sigstore signing config (both
        # need the internet); the signature alone is what verification checks.
        args = ["attest", "--key", key, "--type", predicate_type, "--predicate", str(path)]
        args += ["--tlog-upload=false", "--use-signing-config=false", "--yes", image]
        result = tools.run(tools.COSIGN, args, "--attest")
    if result.returncode != 0:
        raise ImagekitError(*tools.failed(tools.COSIGN, f"attesting {image} failed", result))


def verified(image: str, key: str, predicate_type: str, refusal: str) -> tuple[str, list[str]]:
    """(cosign's output, []) where every statement about `image` of `predicate_type` is
    signed by `key`; ("", the lines saying why not, `refusal` first) otherwise."""
    args = ["verify-attestation", "--key", key, "--type", predicate_type]
    result = tools.run(tools.COSIGN, [*args, "--insecure-ignore-tlog=true", image], "verify")
    if result.returncode != 0:
        return "", tools.failed(tools.COSIGN, refusal, result)
    return result.stdout, []
