"""`imagekit compat refresh`: re-derive what PyPI's metadata (and a PyTorch-style index) can tell.

From PyPI, without downloading a wheel: a torch release's Python range (the cpXY tags of its
Linux x86_64 wheels, from the simple JSON index), its PyPI-default CUDA (the
nvidia-cuda-runtime / cuda-toolkit pin in the wheel's METADATA, served on its own per PEP 658
or read from the zip by range requests, whose environment markers say for which machine) and
its torchvision (the torchvision release whose own `Requires-Dist: torch` pin admits it); the
same for its Linux aarch64 wheels (the `arm64` entry: null CUDA where PyPI's aarch64 wheel is
a CPU build). From a PyTorch-style index (`--index`), the variants (`+cu126`, `+cpu`, ...
local versions of its wheels) of each machine. It prints a diff and writes only with
--write; rows it wrote carry the date they were read.
"""

from __future__ import annotations

import datetime
import difflib
import html
import io
import json
import re
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagekit.contract import exits
from imagekit.errors import ImagekitError
from imagekit.matrix import compat as compat_mod
from imagekit.paths import write_atomic

INDEX = "https://pypi.org/simple"
Fetch = Callable[[str, dict[str, str]], bytes]

# What pins torch's CUDA in its METADATA, first found first: the runtime wheel
# (nvidia-cuda-runtime-cu12 in older releases), else the cuda-toolkit meta-package (newer).
_CUDA_PINS = (re.compile(r"nvidia-cuda-runtime(-cu\d+)?"), re.compile(r"cuda-toolkit"))
_VARIANT = re.compile(r"^(cu\d+|cpu)$")  # rocm, xpu and the like are not imagekit's
# torchvision 0.N pairs with torch 2.(N-15) (torchvision's README table): a later
# torchvision's loose `torch>=` pin is not a build for an untested torch.
_TORCHVISION_OFFSET = 15
_ROW = re.compile(r'^  "(?P<version>[^"]+)": \{.*\}$', re.M)
_ROW_KEYS = ("python", "pypi_cuda", "variants", "torchvision", "source", "arm64", "note")


class RefreshError(ImagekitError):
    exit_code = exits.RESOLVE


def http_fetch(url: str, headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "imagekit", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return bytes(response.read())
    except OSError as exc:
        raise RefreshError(f"could not fetch {url}: {exc}") from None


X86_64, AARCH64 = "x86_64", "aarch64"  # wheel tags' and markers' spelling of the machines


@dataclass(frozen=True)
class DerivedBuilds:
    """A torch release's wheels for Linux aarch64 (the data's `arm64` entry)."""

    python: tuple[str, ...]
    pypi_cuda: str | None  # None: PyPI's aarch64 wheel is a CPU build
    variants: tuple[str, ...] | None = None  # None: not derived (no --index)


@dataclass(frozen=True)
class Derived:
    version: str
    python: tuple[str, ...]
    pypi_cuda: str | None
    torchvision: str | None = None
    variants: tuple[str, ...] | None = None  # None: not derived (no --index)
    arm64: DerivedBuilds | None = None  # None: PyPI has no aarch64 wheels of it


@dataclass(frozen=True)
class LinuxWheel:
    """What a wheel's file name says, for a Linux CPython wheel of one machine."""

    name: str  # normalized (PEP 503)
    version: Version  # `.public` "2.7.1", `.local` "cu126" on a PyTorch-style index
    python: str  # "3.13"


def linux_wheel(filename: str, machine: str = X86_64) -> LinuxWheel | None:
    """The wheel's name, version and Python, or None where it is not a Linux CPython wheel
    for `machine`; free-threaded builds (ABI cp313t) share the interpreter tag and are left
    out."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    for tag in tags:
        linux = tag.platform.startswith(("linux", "manylinux")) and tag.platform.endswith(machine)
        cpython = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
        if linux and cpython and not tag.abi.endswith("t"):
            return LinuxWheel(name, version, f"{cpython[1]}.{cpython[2]}")
    return None


def wheels_of(
    files: list[dict[str, object]], name: str, version: str, machine: str = X86_64
) -> list[dict[str, object]]:
    """Linux CPython wheels of one release for `machine`."""
    return [
        f
        for f in files
        if (w := linux_wheel(str(f["filename"]), machine))
        and w.name == name
        and w.version.public == version
    ]


def derive(files: list[dict[str, object]], version: str, fetch: Fetch) -> Derived:
    """Python tags and CUDA pin of one torch release, from PyPI's file list."""
    found = _pythons_and_cuda(files, version, fetch, X86_64)
    if found is None:
        raise RefreshError(f"PyPI has no Linux x86_64 CPython wheels of torch {version}")
    arm64 = _pythons_and_cuda(files, version, fetch, AARCH64)
    return Derived(version, *found, arm64=DerivedBuilds(*arm64) if arm64 else None)


def _pythons_and_cuda(
    files: list[dict[str, object]], version: str, fetch: Fetch, machine: str
) -> tuple[tuple[str, ...], str | None] | None:
    wheels = [w for w in wheels_of(files, "torch", version, machine) if not _local(w, machine)]
    if not wheels:
        return None
    pythons = sorted(
        {w.python for f in wheels if (w := linux_wheel(str(f["filename"]), machine))},
        key=Version,
    )
    newest = linux_wheel(str(wheels[0]["filename"]), machine)
    metadata = wheel_metadata(wheels[0], fetch)
    return tuple(pythons), cuda_pin(metadata, machine, newest.python if newest else pythons[-1])


def _local(wheel: dict[str, object], machine: str = X86_64) -> str | None:
    parsed = linux_wheel(str(wheel["filename"]), machine)
    return parsed.version.local if parsed else None


def requires_dist(metadata: str) -> list[Requirement]:
    """A METADATA file's Requires-Dist entries; one that is not PEP 508 is skipped."""
    raw, _unparsed = parse_email(metadata)
    found = []
    for line in raw.get("requires_dist", []):
        try:
            found.append(Requirement(line))
        except InvalidRequirement:
            continue
    return found


def cuda_pin(metadata: str, machine: str = X86_64, python: str = "3.11") -> str | None:
    """'12.8' from `nvidia-cuda-runtime-cu12==12.8.90` (or `cuda-toolkit[...]==13.0.2`),
    among the requirements whose markers hold on Linux `machine`: torch's aarch64 wheels
    carried the x86_64-only pins of its CUDA build up to 2.10 (they were CPU builds)."""
    requirements = [r for r in requires_dist(metadata) if _applies(r, machine, python)]
    for pattern in _CUDA_PINS:
        for requirement in requirements:
            if not pattern.fullmatch(canonicalize_name(requirement.name)):
                continue
            for spec in requirement.specifier:
                if spec.operator == "==" and (found := re.match(r"(\d+)\.(\d+)", spec.version)):
                    return f"{found[1]}.{found[2]}"
    return None


def _applies(requirement: Requirement, machine: str, python: str) -> bool:
    if requirement.marker is None:
        return True
    where = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": machine}
    where |= {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    where |= {"os_name": "posix", "implementation_name": "cpython"}
    return requirement.marker.evaluate(where)


def torchvision_for(version: str, files: list[dict[str, object]], fetch: Fetch) -> str | None:
    """The newest torchvision of torch's paired minor whose own pin on torch admits it."""
    torch = Version(version)
    minor = torch.release[1] + _TORCHVISION_OFFSET
    releases = sorted(
        {
            w.version.public
            for f in files
            if (w := linux_wheel(str(f["filename"])))
            and w.name == "torchvision"
            and w.version.release[:2] == (0, minor)
            and not w.version.local
        },
        key=Version,
        reverse=True,
    )
    for release in releases:
        wheel = wheels_of(files, "torchvision", release)[0]
        if torch in torch_pin(wheel_metadata(wheel, fetch)):
            return release
    return None


def torch_pin(metadata: str) -> SpecifierSet:
    """The SpecifierSet of a wheel's `Requires-Dist: torch` line (empty: any torch)."""
    for requirement in requires_dist(metadata):
        if canonicalize_name(requirement.name) == "torch":
            return requirement.specifier
    return SpecifierSet()


def index_wheel_names(fetch: Fetch, index: str) -> list[str]:
    """The torch wheels' file names on a PyTorch-style index (PEP 503 HTML): one page, read
    once for every release."""
    page = fetch(f"{index.rstrip('/')}/torch/", {"Accept": "text/html"}).decode("utf-8", "replace")
    # An href spells the local version's "+" as %2B; the link text spells it out.
    return [
        urllib.parse.unquote(html.unescape(n).rsplit("/", 1)[-1].split("#")[0])
        for n in _anchors(page)
    ]


def index_variants(version: str, names: Iterable[str], machine: str = X86_64) -> tuple[str, ...]:
    """The cuXXX/cpu variants among an index's wheel names for a torch release."""
    found = {
        str(w.version.local)
        for n in names
        if (w := linux_wheel(n, machine))
        and w.name == "torch"
        and w.version.public == version
        and _VARIANT.match(w.version.local or "")
    }
    # cu118 < cu126 < cu130 by number; cpu last, as in the data file.
    return tuple(sorted(found, key=lambda v: (v == "cpu", int(v[2:]) if v != "cpu" else 0)))


def _anchors(page: str) -> list[str]:
    return re.findall(r"<a\s[^>]*href=\"([^\"]+)\"", page, re.I) + re.findall(
        r">\s*([^<>\s]+\.whl)\s*</a>", page, re.I
    )


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


def index_files(
    fetch: Fetch, project: str = "torch", index: str = INDEX
) -> list[dict[str, object]]:
    raw = fetch(f"{index}/{project}/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    return list(json.loads(raw)["files"])


# -- the data file -----------------------------------------------------------------------
def flow(value: object) -> str:
    """One value in the file's flow style (JSON strings are valid YAML)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return "null" if value is None else json.dumps(str(value))


def format_row(version: str, row: dict[str, object]) -> str:
    ordered = {k: row[k] for k in _ROW_KEYS if k in row}
    ordered.update({k: v for k, v in row.items() if k not in ordered})
    return f'  "{version}": ' + flow(ordered)


def apply(text: str, derived: Derived, read_on: str | None) -> str:
    """The file with one torch row re-derived (or added, in version order)."""
    rows = {m["version"]: m for m in _ROW.finditer(text)}
    old = rows.get(derived.version)
    row: dict[str, Any] = dict(yaml.safe_load(old.group(0))[derived.version]) if old else {}
    row["python"] = list(derived.python)
    if derived.pypi_cuda:
        row["pypi_cuda"] = derived.pypi_cuda
    row.setdefault("variants", [])
    if derived.variants is not None:
        row["variants"] = list(derived.variants)
    row["torchvision"] = derived.torchvision
    if not old:
        row["note"] = "variants: only the PyTorch index can tell; run refresh with --index"
    row["source"] = _stamped(row.get("source"), read_on, derived.variants is not None)
    if derived.arm64:
        row["arm64"] = _arm64_row(row.get("arm64") or {}, derived.arm64, read_on)
    line = format_row(derived.version, row)
    if old:
        return text[: old.start()] + line + text[old.end() :]
    before = [m for v, m in rows.items() if Version(v) < Version(derived.version)]
    at = before[-1].end() if before else min(m.start() for m in rows.values())
    return text[:at] + ("\n" if before else "") + line + ("" if before else "\n") + text[at:]


def _stamped(source: Any, read_on: str | None, from_index: bool) -> dict[str, Any]:
    stamped = dict(source or {})
    if read_on:
        stamped["pypi"] = read_on
        if from_index:
            stamped["pytorch-index"] = read_on
    return stamped


def _arm64_row(old: dict[str, Any], found: DerivedBuilds, read_on: str | None) -> dict[str, Any]:
    row = {**old, "python": list(found.python), "pypi_cuda": found.pypi_cuda}
    read = found.variants is not None
    row["variants"] = list(found.variants or ()) if read else (old.get("variants") or [])
    row["source"] = _stamped(old.get("source"), read_on, read)
    keys = ("python", "pypi_cuda", "variants", "source", "note")
    return {k: row[k] for k in keys if k in row}


def refresh(
    versions: Iterable[str] = (),
    write: bool = False,
    fetch: Fetch = http_fetch,
    path: Path = compat_mod.COMPAT_FILE,
    index: str = INDEX,
    torch_index: str | None = None,
    today: str | None = None,
) -> list[str]:
    text = path.read_text(encoding="utf-8")
    data = compat_mod.parse(yaml.safe_load(text), path)
    wanted = list(versions) or list(data.torch)
    torch_files = index_files(fetch, "torch", index)
    vision_files = index_files(fetch, "torchvision", index)
    index_names = index_wheel_names(fetch, torch_index) if torch_index else []
    found = []
    for version in wanted:
        derived = derive(torch_files, version, fetch)
        derived = replace(derived, torchvision=torchvision_for(version, vision_files, fetch))
        if torch_index:
            derived = replace(derived, variants=index_variants(version, index_names))
            if derived.arm64:
                arm64 = index_variants(version, index_names, AARCH64)
                derived = replace(derived, arm64=replace(derived.arm64, variants=arm64))
        found.append(derived)
    shown = text
    for derived in found:  # the diff shows values; dates change only on write
        shown = apply(shown, derived, read_on=None)
    notes = _notes(found, data, torch_index)
    diff = list(
        difflib.unified_diff(
            text.split("\n"),
            shown.split("\n"),
            fromfile=f"{path} (current)",
            tofile=f"{path} (PyPI{' + ' + torch_index if torch_index else ''})",
            lineterm="",
        )
    )
    if not diff:
        return [*notes, f"compat data is current for torch {', '.join(wanted)}"]
    if write:
        stamped = text
        read_on = today or datetime.date.today().isoformat()
        for derived in found:
            stamped = apply(stamped, derived, read_on=read_on)
        compat_mod.parse(yaml.safe_load(stamped), path)  # never write a file the loader rejects
        write_atomic(path, stamped)
        compat_mod.read.cache_clear()
        notes.append(f"wrote {path}")
    else:
        notes.append("not written; run with --write to apply")
    return diff + notes


def _arm64_archs_note(derived: Derived, data: compat_mod.Compat) -> list[str]:
    """The aarch64 variants found that have no aarch64 arch list: nothing here can derive
    one (it is in PyTorch's build scripts), and arm64 cells of them are refused until then."""
    if derived.arm64 is None:
        return []
    found = set(derived.arm64.variants or ())
    if derived.arm64.pypi_cuda:
        found.add(compat_mod.variant_of(derived.arm64.pypi_cuda))
    archs = data.variant_archs
    missing = sorted(v for v in found - {compat_mod.CPU} if not (v in archs and archs[v].arm64))
    if not missing:
        return []
    return [
        f"torch {derived.version}: no aarch64 arch list for {', '.join(missing)} "
        "(variant_archs.<variant>.arm64, from PyTorch's aarch64 build script); linux/arm64 "
        "cells of it are refused until one is added"
    ]


def _notes(found: list[Derived], data: compat_mod.Compat, torch_index: str | None) -> list[str]:
    notes = []
    for derived in found:
        if derived.version not in data.torch:
            notes.append(f"torch {derived.version} is new in the data")
        if derived.torchvision is None:
            notes.append(f"torch {derived.version}: no torchvision release pins it (yet)")
        notes += _arm64_archs_note(derived, data)
    if not torch_index:
        notes.append(
            "variants, architectures and drivers are not on PyPI: variants come from a "
            "PyTorch-style index (--index https://download.pytorch.org/whl), architectures and "
            "drivers from the sources the file names"
        )
    return notes
