"""Every file and folder imagekit writes, and how it writes them (atomically).

One place, so that a path is spelled once and relative paths between them (the bake file's
Dockerfile, seen from a context) are computed, not hard-coded to a directory depth.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

DOCKERFILES = Path("dockerfiles")  # committed, rendered Dockerfiles
WORK = Path(".imagekit")  # imagekit's scratch space in the project
REPORTS = Path("reports")  # build reports


def committed_dockerfile(out_dir: Path, cell_id: str) -> Path:
    return out_dir / cell_id / "Dockerfile"


def contexts(work_dir: Path) -> Path:
    return work_dir / "context"


def context_dir(work_dir: Path, cell_id: str) -> Path:
    """The build context staged for a cell (imagekit/ helpers, wheelhouse/, source/)."""
    return contexts(work_dir) / cell_id


def work_dockerfile(work_dir: Path, cell_id: str) -> Path:
    """The Dockerfile a build really uses (rendered with the build's own options)."""
    return work_dir / "dockerfiles" / cell_id / "Dockerfile"


def report_file(report_dir: Path, cell_id: str) -> Path:
    return report_dir / cell_id / "build.json"


def relative(target: Path, start: Path) -> str:
    """`target` as seen from folder `start` (both relative to the same root), e.g. a bake
    file's dockerfile entry, which buildx resolves against the context."""
    return Path(os.path.relpath(target, start)).as_posix()


def write_atomic(path: Path, text: str) -> bool:
    """Write via a temp file and rename, so no reader ever sees half a file. True if changed.
    Compared as bytes: a file that differs only in line endings is rewritten."""
    if path.is_file() and path.read_bytes() == text.encode("utf-8"):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def temp_beside(path: Path, text: str) -> Path:
    """`text` in a new temp file in `path`'s folder (same filesystem: the rename is atomic)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
        os.chmod(tmp, 0o644)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)
