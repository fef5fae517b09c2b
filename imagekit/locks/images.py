"""`images.lock`: base image references pinned to digests by `imagekit lock`.

The renderer writes `FROM ref@sha256:...` for every base found here, so a rebuild months
later starts from the same bytes even after the tag moved (NVIDIA also deletes old tags).

    {"images": {"<ref>": "sha256:<digest>"},
     "platforms": {"<ref>": {"linux/amd64": "sha256:<digest>", "linux/arm64": "sha256:..."}}}

`images` pins each base tag to its registry digest: an image index's for a base of several
platforms. `platforms`, for the bases of cells built for another platform than linux/amd64
alone, records the image manifest of each platform (of PLATFORMS) in that index, so a cell
that needs a platform its locked base lacks is refused before a build, naming the fix.
Written only when there is one; a file without it (before there were platforms) reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.contract.refs import parse
from imagekit.errors import SpecError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.ref_checks import DIGEST, check_image_ref
from imagekit.paths import read_checked, write_atomic
from imagekit.platforms import PLATFORMS
from imagekit.resources import builtin

NAME = "images.lock"


@dataclass(frozen=True)
class Lock:
    pins: dict[str, str] = field(default_factory=dict)
    # base ref -> {platform: its image manifest's digest in the pinned index}
    platforms: dict[str, dict[str, str]] = field(default_factory=dict)


def default_path(env_paths: Sequence[Path]) -> Path:
    """images.lock beside the first matrix file or in the first matrix folder (a built-in
    catalog's `builtin:NAME` as its packaged file)."""
    first = builtin(env_paths[0]) if env_paths else Path("envs")
    folder = first if first.is_dir() else first.parent
    return folder / NAME


def read(path: Path) -> Lock:
    data = read_checked(path, "images.lock")
    if data is None:
        return Lock()
    try:
        found = json.loads(data.decode("utf-8"))
        pins = _pins(found)
        platforms = _platforms(found, pins)
    except RecursionError:
        why = "nested too deeply to be a lock file"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = str(exc)[:200]
    else:
        return Lock(pins=pins, platforms=platforms)
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


def _platforms(data: dict[str, object], pins: dict[str, str]) -> dict[str, dict[str, str]]:
    """`{"platforms": {ref: {platform: digest}}}`, checked (absent: {}); each ref one of
    `images`' (its digests are those of that pin's index); ValueError saying what is wrong."""
    found = data.get("platforms", {})
    if not isinstance(found, dict):
        raise ValueError('"platforms" must be {"<image>": {"linux/amd64": "sha256:<64 hex>"}}')
    checked = {}
    for ref, digests in found.items():
        if ref not in pins:
            raise ValueError(f'"platforms" has {ref[:120]!r}, which "images" does not pin')
        if not isinstance(digests, dict) or not digests:
            raise ValueError(f'"platforms" of {ref}: expected {{"linux/amd64": "sha256:..."}}')
        for platform, digest in digests.items():
            if platform not in PLATFORMS:
                raise ValueError(
                    f'"platforms" of {ref}: {platform[:60]!r} is not a platform imagekit '
                    f"builds ({', '.join(PLATFORMS)})"
                )
            if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
                raise ValueError(
                    f'"platforms" of {ref}: {platform} must be sha256: and 64 hex digits'
                )
        checked[ref] = {p: digests[p] for p in PLATFORMS if p in digests}
    return checked


def write(path: Path, lock: Lock) -> bool:
    data: dict[str, object] = {"images": dict(sorted(lock.pins.items()))}
    if lock.platforms:  # a lock of amd64 cells alone stays as it always was
        data["platforms"] = {
            ref: {p: digests[p] for p in PLATFORMS if p in digests}
            for ref, digests in sorted(lock.platforms.items())
        }
    return write_atomic(path, json.dumps(data, indent=2) + "\n")


def base_refs(cell: Cell) -> list[str]:
    """The cell's base images as images.lock names them: without the pinned digest."""
    refs = [cell.runtime_image, cell.builder_image]
    return [str(parse(ref).without_digest()) for ref in refs if ref]


def lacking(lock: Lock, cells: Iterable[Cell]) -> list[str]:
    """Each base whose locked index lacks a platform a cell is built for, with the cells and
    the fix. A base images.lock records no platforms of is not judged (a lock written
    before platforms were recorded: BuildKit says it when it pulls)."""
    needs: dict[tuple[str, str], list[str]] = {}
    for cell in cells:
        for ref in base_refs(cell):
            for platform in cell.platforms:
                if ref in lock.platforms and platform not in lock.platforms[ref]:
                    needs.setdefault((ref, platform), []).append(cell.id)
    return [
        missing_platform(ref, platform, lock.pins.get(ref, ""), lock.platforms[ref], ids)
        for (ref, platform), ids in sorted(needs.items())
    ]


def missing_platform(
    ref: str, platform: str, digest: str, has: Iterable[str], cells: Sequence[str]
) -> str:
    """One base's missing platform: what it has, who needs it, and the fix."""
    return (
        f"base {ref} (index {digest}) has no {platform} image, only {', '.join(has) or 'none'}; "
        f"{', '.join(dict.fromkeys(cells))} {'is' if len(set(cells)) == 1 else 'are'} built "
        f"for {platform}. Fix: a base whose index has {platform} under that tag (for a Debian "
        f"base, `sudo imagekit base bootstrap --platform {','.join(PLATFORMS)} --tag {ref}`, "
        f"pushed to its registry), or a `base:` naming one, or drop {platform} from the "
        "cells' `platform`; then `imagekit lock`"
    )


def refuse_lacking(lock: Lock, cells: Iterable[Cell]) -> None:
    """Before a build or stage: a cell's platform its locked base cannot give (exit 2)."""
    problems = lacking(lock, cells)
    if problems:
        raise UsageError(f"{NAME}: a base lacks a platform its cells are built for:", *problems)
