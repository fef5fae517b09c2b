"""`imagekit test --stamp`: a passing image tagged <tag>-validated, with labels saying when,
on what GPU and with which checks it passed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from imagekit.contract import labels as label
from imagekit.contract.checks import CheckResult
from imagekit.contract.refs import parse
from imagekit.errors import UsageError

VALIDATED_SUFFIX = "-validated"


def validated_on(checks: list[CheckResult]) -> str:
    """The GPU an image was proven on, or "cpu": a GPU name only when the stack check and at
    least one other check really ran on it (torch saw it, kernels ran there)."""
    stack = next((c for c in checks if c.name == "stack"), None)
    m = stack.measurements if stack else {}
    ran_on_gpu = [c for c in checks if c.measurements.get("device") == "cuda"]
    if m.get("device") == "cuda" and m.get("gpu") and len(ran_on_gpu) >= 2:
        return str(m["gpu"])
    return "cpu"


def stamp_labels(checks: list[CheckResult]) -> dict[str, str]:
    per_check = {
        c.name: {"status": c.status.value, "device": c.measurements.get("device")} for c in checks
    }
    return {
        label.VALIDATED: "true",
        label.VALIDATED_AT: datetime.now(timezone.utc).isoformat(timespec="seconds"),
        label.VALIDATED_ON: validated_on(checks),
        label.SELFCHECK: json.dumps(per_check, sort_keys=True),
    }


def validated_ref(image: str) -> str:
    if "@" in image:
        raise UsageError("--stamp needs a tagged image (repo:tag), not a digest reference")
    reference = parse(image)
    return str(reference.with_tag(f"{reference.tag or 'latest'}{VALIDATED_SUFFIX}"))
