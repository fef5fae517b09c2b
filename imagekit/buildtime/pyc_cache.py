"""Compile a venv's missing bytecode, reusing what an earlier build compiled.

Runs inside the build (stdlib only, Python >= 3.8) right after the pip packages step, which
installs without compiling:

    python pyc_cache.py [--since NS] VENV [CACHE_DIR]

Every .py file under VENV without a current `__pycache__/*.pyc` gets one. With `--since`
(when the install step started, `date +%s%N`), only files whose inode changed since then
are looked at: the venv the step started from (torch) was compiled already, and opening
each of its thousands of .pyc files costs more than writing the new ones. The compiled code
depends only on the interpreter, the file's path (code objects record it) and its source,
so CACHE_DIR (a BuildKit cache mount) keeps it under a hash of those three. A rebuild that
reinstalls the same packages then writes each .pyc from the cache instead of compiling it
again, which is most of an install step's time when the wheels are cached too. Without
CACHE_DIR it compiles, in parallel. The .pyc files are ordinary timestamp-checked ones
(PEP 552), stamped with the source's mtime and size as it is installed, so the non-root
runtime uses them and never needs to write any.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TAG = sys.implementation.cache_tag  # e.g. cpython-311


def pyc_path(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def header(source: Path) -> bytes:
    """A timestamp .pyc header: magic, flags 0, the source's mtime and size (PEP 552)."""
    st = source.stat()
    return b"".join(
        (
            importlib.util.MAGIC_NUMBER,
            (0).to_bytes(4, "little"),
            (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little"),
            (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"),
        )
    )


def is_current(source: Path) -> bool:
    """A .pyc stamped with the source's mtime and size, or a hash-based one (PEP 552: an
    installer run with SOURCE_DATE_EPOCH writes those; Python checks them itself)."""
    try:
        with open(pyc_path(source), "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    if head[:4] != importlib.util.MAGIC_NUMBER or len(head) < 16:
        return False
    hash_based = int.from_bytes(head[4:8], "little") & 1
    return bool(hash_based) or head == header(source)


def cache_key(source: Path, text: bytes) -> str:
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + TAG.encode())
    digest.update(os.fsencode(source) + b"\0" + text)
    return digest.hexdigest()


def code_bytes(source: Path, text: bytes) -> bytes | None:
    """The marshalled code object, as py_compile makes it; None if it does not compile (pip
    skips those too: test data written for another Python version, for example)."""
    try:
        code = compile(text, str(source), "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return marshal.dumps(code)


def _write(path: Path, data: bytes) -> None:
    """Write via a unique temp name and rename: parallel builds may share the cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def compile_one(source: Path, cache: Path | None) -> str:
    """Write the .pyc of one file; return "hit", "compiled" or "skipped"."""
    text = source.read_bytes()
    key = cache_key(source, text)
    cached = cache / key[:2] / key if cache else None
    if cached is not None and cached.is_file():
        body: bytes | None = cached.read_bytes() or None  # empty: known not to compile
        outcome = "hit"
    else:
        body = code_bytes(source, text)
        if cached is not None:
            _write(cached, body or b"")
        outcome = "compiled"
    if body is None:
        return "skipped"
    _write(pyc_path(source), header(source) + body)
    return outcome


def _compile_chunk(args: tuple[list[str], str | None]) -> list[str]:
    paths, cache = args
    return [compile_one(Path(p), Path(cache) if cache else None) for p in paths]


# File times come from the kernel's coarse clock, which can lag `date` by a few ms.
CLOCK_MARGIN_NS = 1_000_000_000


def missing(venv: Path, since_ns: int | None = None) -> list[Path]:
    """The .py files under venv whose .pyc is absent or stale; with `since_ns`, only among
    those whose inode changed since then (ctime: no tool can set it back)."""
    since = None if since_ns is None else since_ns - CLOCK_MARGIN_NS
    found = []
    for dirpath, dirnames, filenames in os.walk(venv):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if not name.endswith(".py"):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            if not stat.S_ISLNK(st.st_mode) and (since is None or st.st_ctime_ns >= since):
                found.append(Path(dirpath) / name)
    return [p for p in sorted(found) if not is_current(p)]


def compile_all(sources: list[Path], cache: Path | None, jobs: int) -> dict[str, int]:
    counts = {"hit": 0, "compiled": 0, "skipped": 0}
    chunks = [[str(p) for p in sources[i::jobs]] for i in range(jobs)]
    work = [(chunk, str(cache) if cache else None) for chunk in chunks if chunk]
    if len(work) <= 1:
        results = [_compile_chunk(w) for w in work]
    else:
        with ProcessPoolExecutor(len(work)) as pool:
            results = list(pool.map(_compile_chunk, work))
    for outcomes in results:
        for outcome in outcomes:
            counts[outcome] += 1
    return counts


def main(argv: list[str]) -> int:
    since = None
    if argv[:1] == ["--since"] and len(argv) > 1:
        since = int(argv[1]) if argv[1].isdigit() else None  # not GNU date: look at all
        argv = argv[2:]
    if len(argv) not in (1, 2):
        print("usage: pyc_cache.py [--since NS] VENV [CACHE_DIR]", file=sys.stderr)
        return 2
    venv = Path(argv[0])
    cache = Path(argv[1]) if len(argv) == 2 else None
    sources = missing(venv, since)
    counts = compile_all(sources, cache, os.cpu_count() or 1)
    print(
        f"bytecode: {len(sources)} files, {counts['hit']} from the cache, "
        f"{counts['compiled']} compiled, {counts['skipped']} not valid for this Python"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
