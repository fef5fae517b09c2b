"""The files of a built image, read without running anything in it: a path's entry (a file's
first bytes, a link's target), the first native code file under a folder, a small text file.

Two readers: `TarIndex`, built from an image's layer tars (a pushed image's blobs, read back
from the registry, newest layer first, whiteouts applied), and the engine's own, which asks
the engine for one path at a time (engine/local_files.py's LocalFiles). What the files prove is
builder/platform_proof.py's, a pure function over either.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Protocol

HEAD = 64  # bytes of each file kept: an ELF header's machine field is at 18-19
TEXT_LIMIT = 64 * 1024  # a text file read whole only up to this size
# The small files the platform proof reads as text (torch's version and its wheel's tags);
# an index built from layers keeps these, by name, and no other file's contents.
TEXT_NAMES = ("WHEEL", "version.py")
ELF_MAGIC = b"\x7fELF"
ET_EXEC, ET_DYN = 2, 3  # ELF e_type: an executable, a shared library (or a PIE executable)
GPU_MACHINES = (190, 224)  # ELF e_machine of NVIDIA's CUDA and AMD's GPU code
MAX_LINKS = 40  # symlinks followed on one path before it counts as a loop (Linux's limit)
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class Entry:
    """One path in an image: kind "file", "link", "dir" or "other"; a link's `target` as
    written (relative to its folder, or absolute); a file's size and first HEAD bytes, and
    its whole text where it is one of TEXT_NAMES (or read as text) and small."""

    path: str
    kind: str
    target: str = ""
    size: int = 0
    head: bytes = b""
    text: str | None = None

    @property
    def elf(self) -> bool:
        return self.kind == "file" and self.head.startswith(ELF_MAGIC)

    @property
    def native(self) -> bool:
        """An ELF executable or shared library of a CPU: not an object file, not GPU code
        (a cubin is an ELF whose machine is the GPU's)."""
        if not self.elf or len(self.head) < 20:
            return False
        order = "little" if self.head[5] == 1 else "big"
        kind = int.from_bytes(self.head[16:18], order)
        machine = int.from_bytes(self.head[18:20], order)
        return kind in (ET_EXEC, ET_DYN) and machine not in GPU_MACHINES


class ImageFiles(Protocol):
    """What the platform proof reads: each path absolute, in the image's own root."""

    def entry(self, path: str) -> Entry | None:
        """The entry at `path` (folders on the way followed where they are links; the last
        component not: a link is returned as a link); None where there is none."""
        ...

    def first_native(self, folder: str) -> Entry | None:
        """The first native code file (Entry.native) under `folder`, in path order; None
        where there is none."""
        ...

    def text(self, path: str) -> str | None:
        """A small file's text (UTF-8, errors replaced); None where there is none."""
        ...


def resolve(files: ImageFiles, path: str) -> Entry | None:
    """The entry `path` names, its links followed; None where the chain ends in nothing or
    loops."""
    current = posixpath.normpath(path)
    for _ in range(MAX_LINKS):
        found = files.entry(current)
        if found is None or found.kind != "link":
            return found
        current = link_target(found.path, found.target)
    return None


def link_target(link: str, target: str) -> str:
    """Where a link at `link` points: `target` made absolute against the link's folder."""
    joined = target if target.startswith("/") else posixpath.join(posixpath.dirname(link), target)
    return posixpath.normpath("/" + joined.lstrip("/"))


def member_path(name: str) -> str:
    """A tar member's name as an absolute image path (`./usr/bin` -> `/usr/bin`)."""
    return posixpath.normpath("/" + name.removeprefix("./").lstrip("/"))


def read_member(
    archive: tarfile.TarFile, member: tarfile.TarInfo, path: str, text: bool | None = None
) -> Entry:
    """An entry from a tar member: its head, and its whole text where `text` asks (None:
    where TEXT_NAMES has its name) and it is small; the rest of its data is skipped by the
    tar reader."""
    if member.issym():
        return Entry(path, "link", target=member.linkname)
    if member.isdir():
        return Entry(path, "dir")
    if not member.isfile():  # hard links, devices, fifos: nothing the proof reads
        return Entry(path, "other", target=member.linkname if member.islnk() else "")
    handle = archive.extractfile(member)
    if handle is None:
        return Entry(path, "file", size=member.size)
    if text is None:
        text = posixpath.basename(path) in TEXT_NAMES
    whole = text and member.size <= TEXT_LIMIT
    data = handle.read(member.size if whole else HEAD)
    words = data.decode("utf-8", "replace") if whole else None
    return Entry(path, "file", size=member.size, head=data[:HEAD], text=words)


@dataclass
class LayerScan:
    """One layer's entries, and what it deletes from the layers under it: whiteouts
    (`.wh.NAME`) and opaque folders (`.wh..wh..opq`: nothing of the layers below in it)."""

    entries: dict[str, Entry]
    deleted: set[str]
    opaque: set[str]


def scan_layer(stream: IO[bytes]) -> LayerScan:
    """Every member of one layer's (uncompressed) tar, read as a stream: each file's head
    only, hard links resolved to what they link to within the layer."""
    scan = LayerScan({}, set(), set())
    # A multi-GB layer is mostly data passed over: read from its decompressor 1 MiB at a
    # time, and by tarfile in 64 KiB blocks (its stream keeps a buffer it slices once per
    # read, so a larger block costs more per small read than it saves; measured: scanning a
    # 0.88 GB layer took 1.16x its decompression alone, 3.5x with 1 MiB blocks)
    buffered = io.BufferedReader(stream, buffer_size=1 << 20)  # type: ignore[arg-type]
    with tarfile.open(fileobj=buffered, mode="r|", bufsize=1 << 16) as archive:
        for member in archive:
            path = member_path(member.name)
            folder, name = posixpath.split(path)
            if name == OPAQUE:
                scan.opaque.add(folder)
            elif name.startswith(WHITEOUT):
                scan.deleted.add(posixpath.join(folder, name[len(WHITEOUT) :]))
            else:
                entry = read_member(archive, member, path)
                if member.islnk():  # the same file as an earlier member of this layer
                    entry = _hard_link(scan.entries, member, path)
                scan.entries[path] = entry
    return scan


def _hard_link(entries: Mapping[str, Entry], member: tarfile.TarInfo, path: str) -> Entry:
    original = entries.get(member_path(member.linkname))
    if original is None or original.kind != "file":
        return Entry(path, "other", target=member.linkname)
    return Entry(path, "file", size=original.size, head=original.head, text=original.text)


class TarIndex:
    """An image's files from its layers' scans, newest layer first: a path is the newest
    layer's that has it, unless a newer layer deleted it or made a folder above it opaque."""

    def __init__(self, newest_first: Iterable[LayerScan]) -> None:
        self.entries: dict[str, Entry] = {}
        gone: set[str] = set()  # deleted, or under an opaque folder, for the layers below
        for layer in newest_first:
            for path, entry in layer.entries.items():
                if path not in self.entries and not _under_any(path, gone):
                    self.entries[path] = entry
            gone |= layer.deleted | {f"{folder}/" for folder in layer.opaque}
            # a file or link where a folder was hides what the layers below had in it
            gone |= {f"{path}/" for path, entry in layer.entries.items() if entry.kind != "dir"}
        self._sorted = sorted(self.entries)

    def entry(self, path: str) -> Entry | None:
        real = self._real_folder(posixpath.dirname(posixpath.normpath(path)))
        if real is None:
            return None
        return self.entries.get(posixpath.join(real, posixpath.basename(path)))

    def first_native(self, folder: str) -> Entry | None:
        real = self._real_folder(posixpath.normpath(folder))
        if real is None:
            return None
        prefix = real.rstrip("/") + "/"
        return next(
            (e for p in self._sorted if p.startswith(prefix) and (e := self.entries[p]).native),
            None,
        )

    def text(self, path: str) -> str | None:
        found = resolve(self, path)
        return found.text if found is not None and found.kind == "file" else None

    def _real_folder(self, folder: str) -> str | None:
        """`folder` with every link on its way followed (Debian's /bin -> usr/bin)."""
        real = "/"
        parts = [p for p in folder.split("/") if p]
        hops = 0
        while parts:
            candidate = posixpath.join(real, parts.pop(0))
            found = self.entries.get(candidate)
            if found is not None and found.kind == "link":
                hops += 1
                if hops > MAX_LINKS:
                    return None
                target = link_target(candidate, found.target)
                parts = [p for p in target.split("/") if p] + parts
                real = "/"
            else:
                real = candidate
        return real


def _under_any(path: str, gone: set[str]) -> bool:
    """Whether `path` was deleted by a newer layer: named itself, or under a deleted or
    opaque folder (those end in `/`)."""
    if not gone:
        return False
    if path in gone:
        return True
    parts = path.split("/")
    return any(
        "/".join(parts[:i]) in gone or "/".join(parts[:i]) + "/" in gone
        for i in range(2, len(parts))
    )
