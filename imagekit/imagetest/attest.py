"""`imagekit test IMAGE --attest KEY`: the self-check runs on the image's digest in its
registry, pulled by that digest, and a pass is signed for exactly that digest
(supply/attestation.py). A failed run never reaches the signing.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from imagekit.contract import refs
from imagekit.engine import tools
from imagekit.engine.interface import RegistryEngine
from imagekit.errors import ImagekitError, UsageError
from imagekit.supply import attestation


def in_registry(engine: RegistryEngine, image: str) -> str:
    """IMAGE as name@sha256:... in its registry, pulled by that digest: the run then checks
    the very content the attestation names, whatever the local tag holds."""
    tools.find(tools.COSIGN, "--attest")  # before a run of many minutes, not after it
    ref = refs.parse(image)
    if not ref.registry:
        raise UsageError(
            f"--attest: {image} names no registry, and the attestation's subject is the image's "
            "digest in its registry: push it (`imagekit build --push`) and test it by the "
            "pushed name, e.g. registry.example.com/team/train:tag"
        )
    digest = ref.digest or _registry_digest(engine, image)
    pinned = str(ref.by_digest(digest))
    engine.pull(pinned)
    return pinned


def _registry_digest(engine: RegistryEngine, image: str) -> str:
    try:
        return engine.registry_digest(image)
    except (ImagekitError, OSError) as exc:  # the SDK's errors are requests' (OSError)
        raise UsageError(
            f"--attest: {image} could not be found in its registry ({type(exc).__name__}: "
            f"{exc}); push it first, and log in where the registry needs it"
        ) from None


def passing_run(image: str, report: bytes | None, snapshot: bytes | None, key: str) -> list[str]:
    """Sign the verdict of the run that just passed."""
    if report is None or snapshot is None:
        raise attestation.NotAttestable(
            f"the self-check of {image} passed but wrote no report or host snapshot to attest"
        )
    pred = attestation.predicate(image, json.loads(report), snapshot, datetime.now(timezone.utc))
    return attestation.attest(image, pred, key)
