"""Every file and folder imagekit writes, and how it writes them (atomically).

One place, so that a path is spelled once and relative paths between them (the bake file's
Dockerfile, seen from a context) are computed, not hard-coded to a directory depth.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from imagekit.errors import UsageError

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


# -- reading a checkout ----------------------------------------------------------------------
# Everything imagekit reads from a checkout (matrix files, images.lock, package locks,
# committed Dockerfiles, .dockerignore) goes through read_checked. On a pull request the
# checkout is the attacker's: a link to /proc/self/environ would print the runner's
# environment, a FIFO would hang the job, /dev/zero or a huge file would fill its memory.

KiB = 1 << 10
MiB = 1 << 20
LIMITS = {  # what each file may weigh; a real one is a small fraction of it
    "matrix file": MiB,
    "images.lock": MiB,
    "package lock": 4 * MiB,  # a few hundred pins, a few hashes each
    "Dockerfile": MiB,
    ".dockerignore": MiB,
    "requirements file": MiB,  # a team's requirements.txt or pyproject.toml
}


class UnsafeFile(UsageError):
    """A file of the checkout that imagekit refuses to read (exit 2); says why, never what
    the file holds."""


def repository_of(folder: Path) -> Path:
    """The repository `folder` is in: the nearest folder above it with .git (not following
    links); without git, the working directory when `folder` is inside it, else `folder`."""
    folder = Path(os.path.abspath(folder))
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    cwd = Path.cwd()
    return cwd if folder == cwd or cwd in folder.parents else folder


def read_checked(path: Path, what: str, root: Path | None = None) -> bytes | None:
    """The bytes of `path`, a file of the checkout; None when nothing is there. UnsafeFile
    when it is a link that leaves the repository (`root`, else repository_of its folder), not
    a regular file (a FIFO, a device, a folder) or larger than LIMITS[what]. Never blocks:
    the file is opened non-blocking and checked with fstat before a byte is read."""
    if not os.path.lexists(path):
        return None
    limit = LIMITS[what]
    shown = str(path)  # escaped where it is shown (imagekit/terminal.py)
    top = (root or repository_of(Path(os.path.abspath(path)).parent)).resolve()
    target = path.resolve()
    if target != top and top not in target.parents:
        raise UnsafeFile(
            f"{shown}: the {what} is a link that leads outside the repository {top}; imagekit "
            "reads only files inside it. Replace the link with the file itself"
        )
    try:
        data, size = read_regular(target, limit, follow_links=False)
    except NotRegular:
        raise UnsafeFile(
            f"{shown}: the {what} is not a regular file (a folder, a FIFO or a device); "
            "put the file itself there"
        ) from None
    except OSError as exc:
        raise UnsafeFile(f"{shown}: cannot read the {what}: {exc.strerror}") from None
    if size > limit:
        article = "an" if what[0] in "aeiou." else "a"
        raise UnsafeFile(
            f"{shown}: the {what} is {size} bytes; {article} {what} may be at most {limit} bytes"
        )
    if len(data) > limit:  # it grew while being read (a file of /proc has size 0)
        raise UnsafeFile(f"{shown}: the {what} is more than {limit} bytes")
    return data


class NotRegular(OSError):
    """A folder, a FIFO or a device where a file belongs."""


def read_regular(path: Path, limit: int, follow_links: bool = True) -> tuple[bytes, int]:
    """At most `limit` + 1 bytes of the regular file at `path`, and its size as fstat gives
    it, never blocking: opened non-blocking and checked with fstat before a byte is read, so
    a FIFO (which would hang the reader) or a device (/dev/zero) is NotRegular, never a wait.
    A file whose size is already over `limit` is not read (its bytes come back empty)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(0, "not a regular file (a FIFO, a device or a folder)")
        if info.st_size > limit:
            return b"", info.st_size
        data = os.read(fd, limit + 1)
        while len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
        return data, info.st_size
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str | bytes) -> bool:
    """Write via a temp file and rename, so no reader ever sees half a file. True if changed.
    Compared as bytes: a file that differs only in line endings is rewritten."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def write_all_or_none(
    files: Mapping[Path, str], check: Callable[[Mapping[Path, Path]], None] | None = None
) -> None:
    """Every file or none: each written to a temp file beside it (its folders made), `check`
    run over those temps (path -> temp), then all renamed into place. A failure before the
    renames (an OSError, or what `check` raises) leaves no temp file and none of the folders
    this made, and is raised as it came."""
    made = sorted({d for p in files for d in (p.parent, *p.parent.parents) if not d.exists()})
    temps: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            temps[path] = temp_beside(path, text)
        if check is not None:
            check(temps)
        for path, temp in temps.items():
            os.replace(temp, path)
        made = []
    finally:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
        for folder in reversed(made):  # deepest first, each only when empty
            with contextlib.suppress(OSError):
                folder.rmdir()


def temp_beside(path: Path, text: str | bytes) -> Path:
    """`text` (UTF-8 where it is a str) in a new temp file in `path`'s folder (same
    filesystem: the rename is atomic)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.chmod(tmp, 0o644)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)
