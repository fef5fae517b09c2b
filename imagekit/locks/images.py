"""`images.lock`: base image references pinned to digests by `imagekit lock`.

The renderer writes `FROM ref@sha256:...` for every base found here, so a rebuild months
later starts from the same bytes even after the tag moved (NVIDIA also deletes old tags).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.errors import SpecError
from imagekit.matrix.ref_checks import DIGEST, check_image_ref
from imagekit.paths import read_checked, write_atomic

NAME = "images.lock"


@dataclass(frozen=True)
class Lock:
    pins: dict[str, str] = field(default_factory=dict)


def default_path(env_paths: Sequence[Path]) -> Path:
    first = env_paths[0] if env_paths else Path("envs")
    folder = first if first.is_dir() else first.parent
    return folder / NAME


def read(path: Path) -> Lock:
    data = read_checked(path, "images.lock")
    if data is None:
        return Lock()
    try:
        pins = _pins(json.loads(data.decode("utf-8")))
    except RecursionError:
        why = "nested too deeply to be a lock file"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = str(exc)[:200]
    else:
        return Lock(pins=pins)
    raise SpecError(
        [f"{path}: not a valid lock file ({why}); delete it and run `imagekit lock`"]
    ) from None


def _pins(data: object) -> dict[str, str]:
    """`{"images": {ref: digest}}`, checked; ValueError saying what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("images"), dict):
        raise ValueError('expected {"images": {"<image>": "sha256:<64 hex>"}}')
    for ref, digest in data["images"].items():
        check_image_ref(ref)
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ValueError(f"the pin of {ref} must be sha256: and 64 hex digits")
    return dict(data["images"])


def write(path: Path, lock: Lock) -> bool:
    text = json.dumps({"images": dict(sorted(lock.pins.items()))}, indent=2) + "\n"
    return write_atomic(path, text)
