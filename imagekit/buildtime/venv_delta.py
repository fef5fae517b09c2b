"""What one install step changed in a venv, as a tree the runtime stage can copy on top.

Runs inside the build (stdlib only, any Python >= 3.8) in the `packages` stage:

    python venv_delta.py [--since NS] BASE NEW OUT

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


# File times come from the kernel's coarse clock, which can lag `date` by a few ms.
CLOCK_MARGIN_NS = 1_000_000_000


class _Delta:
    """One walk of NEW. An entry whose inode changed before the step started (ctime: no
    tool can set it back) is unchanged, with no look at BASE; only the rest are compared.
    Only a directory changed in the step can have lost entries, so only those are listed
    in BASE. Without `since`, everything is compared: slower, same result."""

    def __init__(self, base: Path, new: Path, root: Path, since_ns: int | None) -> None:
        self.base, self.new, self.root = base, new, root
        self.since = None if since_ns is None else since_ns - CLOCK_MARGIN_NS
        self.copied = 0
        self.removed: list[Path] = []

    def _touched(self, st: os.stat_result) -> bool:
        return self.since is None or st.st_ctime_ns >= self.since

    def walk(self, rel_dir: Path) -> None:
        with os.scandir(self.new / rel_dir) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = rel_dir / entry.name
            st = entry.stat(follow_symlinks=False)
            if not self._touched(st):
                base_st = None  # not looked at: unchanged whatever BASE has
            elif (base_st := _lstat(self.base / rel)) is None and stat.S_ISDIR(st.st_mode):
                _ensure_parents(self.new, rel, self.root)
                self._copy_new_tree(rel, st)  # a new package: nothing in BASE to compare
                continue
            elif not _same(self.base / rel, base_st, self.new / rel, st):
                _ensure_parents(self.new, rel, self.root)
                _copy_entry(self.new / rel, self.root / rel, st)
                self.copied += 1
            if stat.S_ISDIR(st.st_mode):
                self.walk(rel)
        if self._touched((self.new / rel_dir).lstat()):
            self._note_removed(rel_dir, {e.name: e for e in entries})

    def _copy_new_tree(self, rel: Path, st: os.stat_result) -> None:
        """A directory BASE lacks, and everything under it: copied without comparisons."""
        _copy_entry(self.new / rel, self.root / rel, st)
        self.copied += 1
        if stat.S_ISDIR(st.st_mode):
            with os.scandir(self.new / rel) as it:
                for entry in it:
                    self._copy_new_tree(rel / entry.name, entry.stat(follow_symlinks=False))

    def _note_removed(self, rel_dir: Path, present: dict[str, os.DirEntry[str]]) -> None:
        """Names BASE has in this directory that NEW lacks or has as another type; a removed
        directory is listed once, not with its contents."""
        base_dir = self.base / rel_dir
        base_st = _lstat(base_dir)
        if base_st is None or not stat.S_ISDIR(base_st.st_mode):
            return
        for name in sorted(os.listdir(base_dir)):
            entry = present.get(name)
            old_kind = _kind((base_dir / name).lstat())
            if entry is None or _kind(entry.stat(follow_symlinks=False)) != old_kind:
                self.removed.append(self.new / rel_dir / name)


def write_delta(base: Path, new: Path, out: Path, since_ns: int | None = None) -> tuple[int, int]:
    """Write OUT/root and OUT/removed; return (entries copied, paths removed). `since_ns`:
    when the install step started (`date +%s%N`), which lets the walk skip BASE for
    everything older."""
    root = out / "root" / new.relative_to(new.anchor)
    root.mkdir(parents=True)
    delta = _Delta(base, new, root, since_ns)
    delta.walk(Path())
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        rel = Path(dirpath).relative_to(root)
        shutil.copystat(new / rel, dirpath, follow_symlinks=False)  # after their contents
    (out / "removed").write_bytes(b"".join(os.fsencode(p) + b"\0" for p in delta.removed))
    return delta.copied, len(delta.removed)


def main(argv: list[str]) -> int:
    since = None
    if argv[:1] == ["--since"] and len(argv) > 1:
        since = int(argv[1]) if argv[1].isdigit() else None  # not GNU date: compare all
        argv = argv[2:]
    if len(argv) != 3:
        print("usage: venv_delta.py [--since NS] BASE NEW OUT", file=sys.stderr)
        return 2
    base, new, out = (Path(a) for a in argv)
    copied, removed = write_delta(base, new.absolute(), out, since)
    print(f"venv delta: {copied} entries added or changed, {removed} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
