"""Compatibility data: torch -> CUDA variants and Pythons, CUDA -> drivers, archs, OS.

Loaded once from `data/compat.yaml` into frozen records. Lookups raise CompatError that
lists what does exist, so a user can pick a valid combination from the message alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

import yaml
from packaging.version import Version
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from imagekit.errors import CompatError
from imagekit.matrix.yaml_located import yaml_reason
from imagekit.platforms import AMD64
from imagekit.resources import DATA_DIR
from imagekit.runtime import fwdcompat

COMPAT_FILE = DATA_DIR / "compat.yaml"
CPU = "cpu"


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Builds:
    """A torch release's wheels for one platform."""

    python: tuple[str, ...]
    pypi_cuda: str | None  # CUDA build of PyPI's default wheel; None: PyPI's is a CPU build
    variants: tuple[str, ...]  # variants on the PyTorch index with wheels for the platform
    source: Mapping[str, str] = field(default_factory=_empty)
    note: str = ""


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    pypi_cuda: str
    variants: tuple[str, ...]
    torchvision: str | None
    source: Mapping[str, str] = field(default_factory=_empty)  # source key -> date read
    arm64: Builds | None = None  # None: no Linux aarch64 wheels in the data

    def builds(self, platform: str) -> Builds | None:
        if platform == AMD64:
            return Builds(self.python, self.pypi_cuda, self.variants, self.source)
        return self.arm64


@dataclass(frozen=True)
class CudaRelease:
    version: str
    full: str
    min_driver: str
    toolkit_driver: str
    archs: tuple[str, ...]
    os: tuple[str, ...]
    source: Mapping[str, str] = field(default_factory=_empty)  # source key -> date read
    forward_branches: tuple[int, ...] = ()  # driver branches its cuda-compat package serves
    arm64_os: tuple[str, ...] = ()  # where the arm64 (SBSA) toolkit and images exist

    def os_for(self, platform: str) -> tuple[str, ...]:
        return self.os if platform == AMD64 else self.arm64_os

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def require_cuda(self, forward: bool) -> str:
        """What an image built on this CUDA's wheels asks of the driver: the major's floor
        (minor-version compatibility runs any 12.x build on the major's first driver, so
        cuda>=12.8 would refuse hosts the wheels run on); with the forward-compatibility
        package (the nvidia flavor), also the older branches it serves."""
        return fwdcompat.requirement(self.version, self.forward_branches if forward else ())


@dataclass(frozen=True)
class OsRelease:
    name: str
    image: str
    python: str
    nvidia: bool
    cuda_tag: str | None
    suite: str | None
    source: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class Feature:
    name: str
    pip: Mapping[str, tuple[str, ...]]  # key: "cpu", a CUDA major, or "*"
    needs_devel: bool
    cuda_archs: tuple[str, ...] = ()  # a CUDA extension's own arch values (flash-attn's)
    arm64_pip: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)  # keys as `pip`
    arm64_note: str = ""  # why a key is missing from arm64_pip

    def pip_for(self, key: str, platform: str = AMD64) -> tuple[str, ...] | None:
        """Its packages for a cell ("cpu" or the CUDA major); None: none for the platform."""
        pip = self.pip if platform == AMD64 else self.arm64_pip
        return pip.get(key, pip.get("*"))


@dataclass(frozen=True)
class VariantArchs:
    default: tuple[str, ...]  # "8.0", "12.0+PTX": the TORCH_CUDA_ARCH_LIST spelling
    by_torch: Mapping[str, tuple[str, ...]]  # releases whose build differs from the default
    source: Mapping[str, str] = field(default_factory=_empty)
    # The variant's Linux aarch64 wheels: PyTorch compiles them for other (fewer) GPUs than
    # the x86-64 ones. None: no aarch64 list in the data, and arm64 lookups are refused.
    arm64: VariantArchs | None = None

    def of(self, torch: str) -> tuple[str, ...]:
        return self.by_torch.get(torch, self.default)


@dataclass(frozen=True)
class Compat:
    torch: Mapping[str, TorchRelease]
    cuda: Mapping[str, CudaRelease]
    os: Mapping[str, OsRelease]
    variant_archs: Mapping[str, VariantArchs]
    features: Mapping[str, Feature]
    sources: Mapping[str, str] = field(default_factory=_empty)  # key -> what and where

    def source_text(self, source: Mapping[str, str], only: tuple[str, ...] = ()) -> str:
        """'CUDA toolkit release notes (https://...), read 2026-11-23; ...' for a row."""
        keys = [k for k in source if not only or k in only]
        return "; ".join(f"{self.sources.get(k, k)}, read {source[k]}" for k in keys)

    def archs_for(self, torch: str, cuda: str, platform: str = AMD64) -> tuple[str, ...]:
        """TORCH_CUDA_ARCH_LIST of the official wheels of this torch for this CUDA on
        `platform`. CompatError for linux/arm64 where the data has no aarch64 list: x86-64's
        would claim GPUs the aarch64 wheels have no code for."""
        version = self.torch_release(torch).version
        if cuda == CPU:
            return ()
        archs = self.variant_archs.get(variant_of(cuda))
        if platform == AMD64:
            return archs.of(version) if archs else ()
        if archs is None or archs.arm64 is None:
            raise CompatError(
                f"torch {version} {variant_of(cuda)} on {platform}: the compat data has no "
                f"aarch64 arch list (variant_archs.{variant_of(cuda)}.arm64); add it from "
                "PyTorch's aarch64 build script of that release (the file's header says where)"
            )
        return archs.arm64.of(version)

    # -- lookups ---------------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease:
        """Exact version, or a major.minor that names the one known patch release."""
        if version in self.torch:
            return self.torch[version]
        same_minor = [v for v in self.torch if _minor(v) == version]
        if len(same_minor) == 1:
            return self.torch[same_minor[0]]
        raise CompatError(
            f"torch {version} is not in the compatibility data; known: {', '.join(self.torch)}"
        )

    def cuda_release(self, version: str) -> CudaRelease:
        if version in self.cuda:
            return self.cuda[version]
        raise CompatError(
            f"CUDA {version} is not in the compatibility data; known: "
            f"{', '.join([*self.cuda, CPU])}"
        )

    def os_release(self, name: str) -> OsRelease:
        if name in self.os:
            return self.os[name]
        raise CompatError(f"os {name} is unknown; known: {', '.join(self.os)}")

    def check_combination(
        self, cuda: str, torch: str, python: str, os_name: str, platform: str = AMD64
    ) -> None:
        """Raise CompatError naming what exists when the combination does not."""
        release = self.torch_release(torch)
        builds = release.builds(platform)
        on = "" if platform == AMD64 else f" for {platform}"
        if builds is None:
            raise CompatError(f"torch {release.version} has no wheels{on} in the compat data")
        variant = variant_of(cuda)
        if cuda != CPU:
            cuda_rel = self.cuda_release(cuda)
            if variant not in builds.variants and builds.pypi_cuda != cuda:
                found = self.cudas_of(release, platform)
                raise CompatError(
                    f"torch {release.version} has no CUDA {cuda} build{on}; it exists{on} for "
                    f"{'CUDA ' + ', '.join(found) if found else 'no CUDA version'}" + _note(builds)
                )
            supported = cuda_rel.os_for(platform)
            if os_name not in supported:
                raise CompatError(
                    f"CUDA {cuda} does not support {os_name}{on}; it supports "
                    f"{', '.join(supported) or 'no OS'}{on}"
                )
        elif CPU not in builds.variants and builds.pypi_cuda is not None:
            raise CompatError(f"torch {release.version} has no CPU build{on} in the data")
        if python not in builds.python:
            raise CompatError(
                f"torch {release.version} has no wheels{on} for Python {python}; "
                f"it has {', '.join(builds.python)}"
            )
        self.os_release(os_name)

    def cudas_of(self, release: TorchRelease, platform: str = AMD64) -> list[str]:
        """CUDA versions a torch release exists for (index variants and the PyPI default)."""
        builds = release.builds(platform)
        if builds is None:
            return []
        found = {v for v in self.cuda if variant_of(v) in builds.variants}
        if builds.pypi_cuda:
            found.add(builds.pypi_cuda)
        return sorted(found, key=Version)

    def torch_index(self, cuda: str, torch: str, platform: str = AMD64) -> str | None:
        """Extra index for the torch wheel, or None where PyPI's default build is the one."""
        builds = self.torch_release(torch).builds(platform)
        on_pypi = (builds.pypi_cuda if builds else None) or CPU  # what PyPI's wheel is built for
        if on_pypi == cuda:
            return None
        return f"https://download.pytorch.org/whl/{variant_of(cuda)}"


def _note(builds: Builds) -> str:
    return f" ({builds.note})" if builds.note else ""


def variant_of(cuda: str) -> str:
    """'12.6' -> 'cu126'; 'cpu' stays 'cpu'."""
    return CPU if cuda == CPU else "cu" + cuda.replace(".", "")


def arch_entries(archs: tuple[str, ...]) -> list[str]:
    """TORCH_CUDA_ARCH_LIST spelling -> torch.cuda.get_arch_list() spelling:
    ('8.0', '12.0+PTX') -> ['sm_80', 'sm_120', 'compute_120']."""
    entries = []
    for arch in archs:
        digits = arch.removesuffix("+PTX").replace(".", "")
        entries.append(f"sm_{digits}")
        if arch.endswith("+PTX"):
            entries.append(f"compute_{digits}")
    return entries


def _minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


# -- the file's shape ------------------------------------------------------------------------
# pydantic models of data/compat.yaml, checked before any record is built: a key missing or
# of the wrong type is a CompatError naming the file, the key's path and the fix.
_STRICT = ConfigDict(extra="forbid", frozen=True)


def _int_as_text(value: Any) -> Any:
    # An extension's arch values are digits ("80"); an unquoted 80 means the same.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class _Row(BaseModel):
    model_config = _STRICT
    source: dict[str, Any] | None = None  # checked against `sources` by _source
    note: str | None = None


class _BuildsRow(_Row):
    python: list[str]
    pypi_cuda: str | None  # null: PyPI's wheel for the platform is a CPU build
    variants: list[str]


class _TorchRow(_Row):
    python: list[str]
    pypi_cuda: str
    variants: list[str]
    torchvision: str | None = None
    arm64: _BuildsRow | None = None


class _CudaRow(_Row):
    full: str
    min_driver: str
    toolkit_driver: str
    archs: list[str]
    os: list[str]
    forward_branches: list[int] = []
    arm64_os: list[str] = []


class _OsRow(_Row):
    image: str
    python: str
    nvidia: bool
    cuda_tag: str | None = None
    suite: str | None = None


Pip = list[str] | dict[str, list[str]]  # one list, or one per "cpu" / CUDA major


class _Arm64PipRow(BaseModel):
    model_config = _STRICT
    pip: Pip
    note: str | None = None


class _FeatureRow(_Row):
    pip: Pip
    needs_devel: bool = False
    cuda_archs: list[Annotated[str, BeforeValidator(_int_as_text)]] = []
    arm64: _Arm64PipRow | None = None


class _ArchsRow(_Row):
    archs: list[str]
    by_torch: dict[str, list[str]] = {}


class _VariantArchsRow(_ArchsRow):
    arm64: _ArchsRow | None = None


class _CompatFile(BaseModel):
    model_config = _STRICT
    sources: dict[str, str]
    torch: dict[str, _TorchRow]
    cuda: dict[str, _CudaRow]
    os: dict[str, _OsRow]
    variant_archs: dict[str, _VariantArchsRow]
    features: dict[str, _FeatureRow]


def _problem(error: Any) -> str:
    at = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function-"))
    at = at or "(top level)"
    if error["type"] == "missing":
        return f"{at}: missing; add it (the comment above its table says what it holds)"
    if error["type"] == "extra_forbidden":
        return f"{at}: unknown key; remove it, or fix its spelling"
    return f"{at}: {error['input']!r}: {error['msg']}"


def _shape(raw: Any, file: str) -> _CompatFile:
    try:
        return _CompatFile.model_validate(raw)
    except ValidationError as exc:
        problems = [_problem(e) for e in exc.errors()]
        raise CompatError(
            f"compat data {file} is not valid:", *(f"  - {p}" for p in problems)
        ) from None


# -- records ------------------------------------------------------------------------------
def parse(raw: Any, file: str | Path = COMPAT_FILE) -> Compat:
    """The records of a loaded data file; CompatError naming `file` where it is not valid."""
    data = _shape(raw, str(file))
    sources = set(data.sources)
    # Read-only views: the cached Compat is shared, so nobody may mutate it.
    ro = MappingProxyType
    return Compat(
        torch=ro(
            {
                v: TorchRelease(
                    version=v,
                    python=tuple(r.python),
                    pypi_cuda=r.pypi_cuda,
                    variants=tuple(r.variants),
                    torchvision=r.torchvision,
                    source=_source(sources, f"torch.{v}", r),
                    arm64=_builds(sources, f"torch.{v}.arm64", r.arm64),
                )
                for v, r in data.torch.items()
            }
        ),
        cuda=ro(
            {
                v: CudaRelease(
                    version=v,
                    full=r.full,
                    min_driver=r.min_driver,
                    toolkit_driver=r.toolkit_driver,
                    archs=tuple(r.archs),
                    os=tuple(r.os),
                    forward_branches=tuple(r.forward_branches),
                    arm64_os=tuple(r.arm64_os),
                    source=_source(sources, f"cuda.{v}", r),
                )
                for v, r in data.cuda.items()
            }
        ),
        os=ro(
            {
                n: OsRelease(
                    name=n,
                    image=r.image,
                    python=r.python,
                    nvidia=r.nvidia,
                    cuda_tag=r.cuda_tag,
                    suite=r.suite,
                    source=_source(sources, f"os.{n}", r),
                )
                for n, r in data.os.items()
            }
        ),
        variant_archs=ro({k: _variant_archs(sources, k, r) for k, r in data.variant_archs.items()}),
        features=ro({n: _feature(sources, n, r) for n, r in data.features.items()}),
        sources=ro(dict(data.sources)),
    )


def _variant_archs(sources: set[str], variant: str, row: _VariantArchsRow) -> VariantArchs:
    where = f"variant_archs.{variant}"
    arm64 = _archs(sources, f"{where}.arm64", row.arm64) if row.arm64 else None
    return replace(_archs(sources, where, row), arm64=arm64)


def _archs(sources: set[str], where: str, row: _ArchsRow) -> VariantArchs:
    by_torch = MappingProxyType({t: tuple(a) for t, a in row.by_torch.items()})
    return VariantArchs(tuple(row.archs), by_torch, _source(sources, where, row))


def _builds(sources: set[str], where: str, row: _BuildsRow | None) -> Builds | None:
    if row is None:
        return None
    source = _source(sources, where, row)
    return Builds(tuple(row.python), row.pypi_cuda, tuple(row.variants), source, row.note or "")


def _feature(sources: set[str], name: str, row: _FeatureRow) -> Feature:
    _source(sources, f"features.{name}", row)
    return Feature(
        name=name,
        pip=_by_key(row.pip),
        needs_devel=row.needs_devel,
        cuda_archs=tuple(row.cuda_archs),
        arm64_pip=_by_key(row.arm64.pip) if row.arm64 else _empty(),
        arm64_note=(row.arm64.note or "") if row.arm64 else "",
    )


def _by_key(pip: list[str] | dict[str, list[str]]) -> Mapping[str, tuple[str, ...]]:
    by_key = {"*": tuple(pip)} if isinstance(pip, list) else {k: tuple(v) for k, v in pip.items()}
    return MappingProxyType(by_key)


def _source(sources: set[str], where: str, row: _Row) -> Mapping[str, str]:
    """A row's `source: {key: date read}`, each key one of the file's `sources`."""
    source = row.source
    if not source:
        raise CompatError(f"compat data: {where} has no `source: {{key: date read}}`")
    for key, date in source.items():
        if key not in sources:
            raise CompatError(f"compat data: {where} cites unknown source {key!r}")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(date)):
            raise CompatError(f"compat data: {where} source {key}: {date!r} is not YYYY-MM-DD")
    return MappingProxyType({str(k): str(v) for k, v in source.items()})


def load(path: Path | None = None) -> Compat:
    """The data file (COMPAT_FILE unless `path`), read once."""
    return read(path or COMPAT_FILE)


@lru_cache(maxsize=4)
def read(path: Path) -> Compat:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise CompatError(f"compat data {path} is not valid YAML: {yaml_reason(exc)}") from None
    return parse(raw, path)
