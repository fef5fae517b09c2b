"""Layer scans kept on this machine by their blob's digest (docs/build-report.md, "The layer
scan cache").

The platform proof of a pushed image reads every layer back from the registry: 2.9 GB and
11.5 s for the README cell, on every push, even when only the source layer changed (the rest
were read on the push before). A blob's digest is the sha256 of its bytes, and the scan is a
function of those bytes alone (and of what a scan keeps: HEAD, TEXT_NAMES), so a scan read
once holds for every image that has the layer. A cache must never fail a build: what cannot
be read or written here is read from the registry, as without it.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import time
import zlib
from pathlib import Path
from typing import Any

from imagekit.engine.image_files import HEAD, TEXT_NAMES, Entry, LayerScan
from imagekit.paths import write_atomic

FORMAT = 1
ENV = "IMAGEKIT_CACHE_DIR"
KEEP_SECONDS = 30 * 24 * 3600  # a scan not read for 30 days is removed on the next store
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


def cache_root() -> Path:
    """$IMAGEKIT_CACHE_DIR, else $XDG_CACHE_HOME/imagekit, else ~/.cache/imagekit."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "imagekit"


def scan_path(digest: str) -> Path | None:
    """Where the scan of the blob `digest` is kept; None for a digest that is not sha256."""
    match = _DIGEST.match(digest)
    if match is None:
        return None
    return cache_root() / "layer-scans" / "sha256" / f"{match.group(1)}.json.gz"


def load(digest: str) -> LayerScan | None:
    """The kept scan of the blob `digest`; None where there is none, or it is unreadable or
    of another format (read from the registry then, and kept anew)."""
    path = scan_path(digest)
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
        scan = from_json(data, digest)
        os.utime(path)  # read: kept another KEEP_SECONDS
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, IndexError):
        return None
    return scan


def store(digest: str, scan: LayerScan) -> None:
    """Keep `scan` for the blob `digest`, and remove the scans not read for KEEP_SECONDS."""
    path = scan_path(digest)
    if path is None:
        return
    try:
        write_atomic(path, gzip.compress(json.dumps(to_json(scan, digest)).encode(), 6))
        prune(path.parent, time.time() - KEEP_SECONDS)
    except OSError:
        return


def prune(folder: Path, before: float) -> None:
    for old in folder.glob("*.json.gz"):
        try:
            if old.stat().st_mtime < before:
                old.unlink()
        except OSError:
            continue


def to_json(scan: LayerScan, digest: str) -> dict[str, Any]:
    entries = [
        [e.path, e.kind, e.target, e.size, base64.b64encode(e.head).decode(), e.text]
        for e in scan.entries.values()
    ]
    return {
        "format": FORMAT,
        "digest": digest,
        "head_bytes": HEAD,
        "text_names": list(TEXT_NAMES),
        "entries": entries,
        "deleted": sorted(scan.deleted),
        "opaque": sorted(scan.opaque),
    }


def from_json(data: dict[str, Any], digest: str) -> LayerScan:
    """A kept scan, if it is of this blob and was kept as this version scans (else
    ValueError: a scan that kept fewer bytes or other texts would prove less)."""
    same = (data["format"], data["digest"], data["head_bytes"], data["text_names"])
    if same != (FORMAT, digest, HEAD, list(TEXT_NAMES)):
        raise ValueError("kept by another version")
    entries: dict[str, Entry] = {}
    for path, kind, target, size, head, text in data["entries"]:
        entries[path] = Entry(path, kind, target, int(size), base64.b64decode(head), text)
    return LayerScan(entries, set(data["deleted"]), set(data["opaque"]))
