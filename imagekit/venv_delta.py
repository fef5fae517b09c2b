"""What one install step changed in a venv, as a tree the runtime stage can copy on top.

Runs inside the build (stdlib only, any Python >= 3.8) in the `packages` stage:

    python venv_delta.py BASE NEW OUT

BASE is the venv before your pip packages (bind-mounted from the builder stage), NEW the
same venv after them, at its real path. It writes

    OUT/root/<NEW>/...   every file, link and directory that was added or changed
    OUT/removed          NUL-separated paths under NEW that BASE has and NEW lacks (or has
                         as another type): the runtime deletes them before copying OUT/root

so the runtime stage copies the base venv (torch) in one layer and only this delta in the
next. Adding a dependency then re-copies, re-exports and re-pushes the delta, not torch.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):  # the latter: a parent is now a file
        return None


def _same(base: Path, base_st: os.stat_result | None, new: Path, new_st: os.stat_result) -> bool:
    """Unchanged: same type and mode, and for files the same size and mtime (an installer
    that rewrites a file gives it a new mtime), for links the same target."""
    if base_st is None or _kind(base_st) != _kind(new_st) or base_st.st_mode != new_st.st_mode:
        return False
    if stat.S_ISLNK(new_st.st_mode):
        return os.readlink(base) == os.readlink(new)
    if stat.S_ISDIR(new_st.st_mode):
        return True
    return (base_st.st_size, base_st.st_mtime_ns) == (new_st.st_size, new_st.st_mtime_ns)


def removed_paths(base: Path, new: Path) -> list[Path]:
    """Paths (under `new`) that `base` has and `new` lacks or has as another type; a removed
    directory is listed once, not with its contents."""
    removed = []
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base)
        for name in sorted(filenames):
            base_st = (Path(dirpath) / name).lstat()
            new_st = _lstat(new / rel / name)
            if new_st is None or _kind(new_st) != _kind(base_st):
                removed.append(new / rel / name)
        kept = []
        for name in sorted(dirnames):
            base_st = (Path(dirpath) / name).lstat()
            new_st = _lstat(new / rel / name)
            if new_st is None or _kind(new_st) != _kind(base_st):
                removed.append(new / rel / name)
            elif _kind(base_st) == "dir":
                kept.append(name)
        dirnames[:] = kept  # not into what is gone, nor into links to directories
    return removed


def _copy_entry(src: Path, dest: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(exist_ok=True)
    else:
        try:
            os.link(src, dest)  # the same file, no second copy in the layer
        except OSError:
            shutil.copy2(src, dest)


def _ensure_parents(new: Path, rel: Path, root: Path) -> None:
    """Create the delta's parent directories with the new venv's modes, so copying the
    delta over the base leaves every directory as the install step left it."""
    for part in reversed(rel.parents):
        target = root / part
        if not target.exists():
            target.mkdir()
            shutil.copystat(new / part, target, follow_symlinks=False)


def write_delta(base: Path, new: Path, out: Path) -> tuple[int, int]:
    """Write OUT/root and OUT/removed; return (entries copied, paths removed)."""
    root = out / "root" / new.relative_to(new.anchor)
    root.mkdir(parents=True)
    copied = 0
    for dirpath, dirnames, filenames in os.walk(new):
        rel_dir = Path(dirpath).relative_to(new)
        for name in sorted(dirnames) + sorted(filenames):
            rel = rel_dir / name
            new_st = (new / rel).lstat()
            if _same(base / rel, _lstat(base / rel), new / rel, new_st):
                continue
            _ensure_parents(new, rel, root)
            _copy_entry(new / rel, root / rel, new_st)
            copied += 1
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        rel = Path(dirpath).relative_to(root)
        shutil.copystat(new / rel, dirpath, follow_symlinks=False)  # after their contents
    removed = removed_paths(base, new)
    (out / "removed").write_bytes(b"".join(os.fsencode(p) + b"\0" for p in removed))
    return copied, len(removed)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: venv_delta.py BASE NEW OUT", file=sys.stderr)
        return 2
    base, new, out = (Path(a) for a in argv)
    copied, removed = write_delta(base, new.absolute(), out)
    print(f"venv delta: {copied} entries added or changed, {removed} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
