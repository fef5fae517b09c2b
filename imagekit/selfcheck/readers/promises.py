"""What the image promises: its labels, as `imagekit test` passed them or as baked into the
image at build time."""

from __future__ import annotations

import json
import os
from pathlib import Path

from imagekit.contract.checks import ENV_LABELS

LABELS_FILE = Path("/etc/imagekit/labels.json")


def labels() -> dict[str, str]:
    """What the image promises: $IMAGEKIT_LABELS (set by `imagekit test` from the image's
    real labels), else the copy baked into the image."""
    raw = os.environ.get(ENV_LABELS)
    if raw:
        return dict(json.loads(raw))
    if LABELS_FILE.is_file():
        return dict(json.loads(LABELS_FILE.read_text()))
    return {}
