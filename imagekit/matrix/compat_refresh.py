"""`imagekit compat show|refresh`.

refresh re-derives two columns of the torch table from PyPI without downloading a wheel:
the Python range (the cpXY tags of the Linux x86_64 wheels, from the simple JSON index) and
the PyPI-default CUDA (the nvidia-cuda-runtime-cu12 / cuda-toolkit pin in the wheel's
METADATA, served on its own per PEP 658). It prints a diff and writes only with --write.
"""

from __future__ import annotations

import difflib
import io
import json
import re
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.version import Version

from imagekit.errors import ImagekitError
from imagekit.matrix import compat as compat_mod
from imagekit.paths import write_atomic

INDEX = "https://pypi.org/simple"
Fetch = Callable[[str, dict[str, str]], bytes]

_WHEEL = re.compile(
    r"^torch-(?P<ver>[^-]+)-cp(?P<py>\d)(?P<minor>\d+)-(?P<abi>[^-]+)-manylinux[^-]*x86_64\.whl$"
)
_CUDA_PINS = (
    # "name==12.6.77" in newer METADATA, "name (==12.1.105)" in older.
    re.compile(r"^Requires-Dist: nvidia-cuda-runtime(?:-cu\d+)?\s*\(?==\s*(\d+)\.(\d+)", re.M),
    re.compile(r"^Requires-Dist: cuda-toolkit(?:\[[^\]]*\])?\s*\(?==\s*(\d+)\.(\d+)", re.M),
)


class RefreshError(ImagekitError):
    exit_code = 9


def http_fetch(url: str, headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "imagekit", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return bytes(response.read())
    except OSError as exc:
        raise RefreshError(f"could not fetch {url}: {exc}") from None


@dataclass(frozen=True)
class Derived:
    version: str
    python: tuple[str, ...]
    pypi_cuda: str | None


def derive(files: list[dict[str, object]], version: str, fetch: Fetch) -> Derived:
    """Python tags and CUDA pin of one torch release, from the index's file list."""
    wheels = [
        f
        for f in files
        if (m := _WHEEL.match(str(f["filename"])))
        and m["ver"] == version
        and not m["abi"].endswith("t")
    ]  # free-threaded builds share the python tag
    if not wheels:
        raise RefreshError(f"PyPI has no Linux x86_64 CPython wheels of torch {version}")
    pythons = sorted(
        {f"{m['py']}.{m['minor']}" for f in wheels if (m := _WHEEL.match(str(f["filename"])))},
        key=Version,
    )
    metadata = wheel_metadata(wheels[0], fetch)
    cuda = None
    for pattern in _CUDA_PINS:
        if found := pattern.search(metadata):
            cuda = f"{found[1]}.{found[2]}"
            break
    return Derived(version, tuple(pythons), cuda)


def wheel_metadata(wheel: dict[str, object], fetch: Fetch) -> str:
    """METADATA of a wheel: PEP 658's side file, else read from the zip by range requests."""
    url = str(wheel["url"])
    try:
        return fetch(url + ".metadata", {}).decode("utf-8", "replace")
    except RefreshError:
        pass
    with zipfile.ZipFile(RangeFile(url, int(str(wheel["size"])), fetch)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8", "replace")


class RangeFile(io.RawIOBase):
    """A read-only file over HTTP range requests: zipfile reads only the directory and
    one member, a few hundred KB of a wheel that is gigabytes."""

    def __init__(self, url: str, size: int, fetch: Fetch) -> None:
        self.url, self.size, self.fetch, self.pos = url, size, fetch, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.fetch(self.url, {"Range": f"bytes={self.pos}-{end - 1}"})[: end - self.pos]
        self.pos += len(data)
        return data


def index_files(fetch: Fetch, index: str = INDEX) -> list[dict[str, object]]:
    raw = fetch(f"{index}/torch/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    return list(json.loads(raw)["files"])


def updated_text(text: str, derived: Derived) -> str:
    """Rewrite the `python:` and `pypi_cuda:` fields of one torch row, keeping the layout."""
    row = re.compile(rf'^(  "{re.escape(derived.version)}": \{{.*)$', re.M)
    match = row.search(text)
    if not match:
        return text
    line = match.group(1)
    pythons = ", ".join(f'"{p}"' for p in derived.python)
    line = re.sub(r"python: \[[^\]]*\]", f"python: [{pythons}]", line)
    if derived.pypi_cuda:
        line = re.sub(r'pypi_cuda: "[^"]*"', f'pypi_cuda: "{derived.pypi_cuda}"', line)
    return text[: match.start(1)] + line + text[match.end(1) :]


def refresh(
    versions: Iterable[str] = (),
    write: bool = False,
    fetch: Fetch = http_fetch,
    path: Path = compat_mod.COMPAT_FILE,
    index: str = INDEX,
) -> str:
    text = path.read_text(encoding="utf-8")
    data = compat_mod.parse(yaml.safe_load(text))
    wanted = list(versions) or list(data.torch)
    files = index_files(fetch, index)
    new_text, notes = text, []
    for version in wanted:
        if version not in data.torch:
            notes.append(
                f"torch {version} is not in the data: add its row (index variants) by hand"
            )
            continue
        new_text = updated_text(new_text, derive(files, version, fetch))
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(True),
            new_text.splitlines(True),
            fromfile=f"{path} (current)",
            tofile=f"{path} (PyPI)",
        )
    )
    if not diff:
        return "\n".join([*notes, f"compat data is current for torch {', '.join(wanted)}"])
    if write:
        write_atomic(path, new_text)
        compat_mod.load.cache_clear()
        notes.append(f"wrote {path}")
    else:
        notes.append("not written; run with --write to apply")
    return diff + "\n".join(notes)


def show() -> str:
    data = compat_mod.load()
    lines = ["torch    PyPI CUDA  variants                      Python"]
    for rel in data.torch.values():
        lines.append(
            f"{rel.version:<8} {rel.pypi_cuda:<10} {' '.join(rel.variants):<29} "
            f"{rel.python[0]}-{rel.python[-1]}"
        )
    lines += ["", "CUDA  image tag  min driver  toolkit driver  OS"]
    for cuda in data.cuda.values():
        lines.append(
            f"{cuda.version:<5} {cuda.full:<10} {cuda.min_driver:<11} "
            f"{cuda.toolkit_driver:<15} {' '.join(cuda.os)}"
        )
    return "\n".join(lines)
