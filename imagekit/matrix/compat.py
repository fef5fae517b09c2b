"""Compatibility data: torch -> CUDA variants and Pythons, CUDA -> drivers, archs, OS.

Loaded once from `data/compat.yaml` into frozen records. Lookups raise CompatError that
lists what does exist, so a user can pick a valid combination from the message alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from packaging.version import Version

from imagekit.errors import CompatError
from imagekit.resources import DATA_DIR
from imagekit.runtime import fwdcompat

COMPAT_FILE = DATA_DIR / "compat.yaml"
CPU = "cpu"


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    pypi_cuda: str
    variants: tuple[str, ...]
    torchvision: str | None
    source: Mapping[str, str] = field(default_factory=_empty)  # source key -> date read


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


@dataclass(frozen=True)
class VariantArchs:
    default: tuple[str, ...]  # "8.0", "12.0+PTX": the TORCH_CUDA_ARCH_LIST spelling
    by_torch: Mapping[str, tuple[str, ...]]  # releases whose build differs from the default
    source: Mapping[str, str] = field(default_factory=_empty)


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

    def archs_for(self, torch: str, cuda: str) -> tuple[str, ...]:
        """TORCH_CUDA_ARCH_LIST of the official wheels of this torch for this CUDA."""
        archs = self.variant_archs.get(variant_of(cuda))
        if archs is None:
            return ()
        return archs.by_torch.get(self.torch_release(torch).version, archs.default)

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

    def check_combination(self, cuda: str, torch: str, python: str, os_name: str) -> None:
        """Raise CompatError naming what exists when the combination does not."""
        release = self.torch_release(torch)
        variant = variant_of(cuda)
        if cuda != CPU:
            cuda_rel = self.cuda_release(cuda)
            if variant not in release.variants and release.pypi_cuda != cuda:
                raise CompatError(
                    f"torch {release.version} has no CUDA {cuda} build; it exists for CUDA "
                    f"{', '.join(self.cudas_of(release))}"
                )
            if os_name not in cuda_rel.os:
                raise CompatError(
                    f"CUDA {cuda} does not support {os_name}; it supports {', '.join(cuda_rel.os)}"
                )
        elif CPU not in release.variants:
            raise CompatError(f"torch {release.version} has no CPU build in the data")
        if python not in release.python:
            raise CompatError(
                f"torch {release.version} has no wheels for Python {python}; "
                f"it has {', '.join(release.python)}"
            )
        self.os_release(os_name)

    def cudas_of(self, release: TorchRelease) -> list[str]:
        """CUDA versions a torch release exists for (index variants and the PyPI default)."""
        found = {v for v in self.cuda if variant_of(v) in release.variants}
        found.add(release.pypi_cuda)
        return sorted(found, key=Version)

    def torch_index(self, cuda: str, torch: str) -> str | None:
        """Extra index for the torch wheel, or None where PyPI's default build is the one."""
        release = self.torch_release(torch)
        if cuda != CPU and release.pypi_cuda == cuda:
            return None
        return f"https://download.pytorch.org/whl/{variant_of(cuda)}"


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


def _feature(raw: dict[str, Any], name: str, row: dict[str, Any]) -> Feature:
    _source(raw, f"features.{name}", row)
    pip = row["pip"]
    by_key = {"*": tuple(pip)} if isinstance(pip, list) else {k: tuple(v) for k, v in pip.items()}
    return Feature(
        name=name,
        pip=MappingProxyType(by_key),
        needs_devel=bool(row.get("needs_devel", False)),
        cuda_archs=tuple(str(a) for a in row.get("cuda_archs", ())),
    )


def parse(raw: dict[str, Any]) -> Compat:
    # Read-only views: the cached Compat is shared, so nobody may mutate it.
    ro = MappingProxyType
    return Compat(
        torch=ro(
            {
                v: TorchRelease(
                    version=v,
                    python=tuple(r["python"]),
                    pypi_cuda=r["pypi_cuda"],
                    variants=tuple(r["variants"]),
                    torchvision=r.get("torchvision"),
                    source=_source(raw, f"torch.{v}", r),
                )
                for v, r in raw["torch"].items()
            }
        ),
        cuda=ro(
            {
                v: CudaRelease(
                    version=v,
                    full=r["full"],
                    min_driver=r["min_driver"],
                    toolkit_driver=r["toolkit_driver"],
                    archs=tuple(r["archs"]),
                    os=tuple(r["os"]),
                    forward_branches=tuple(int(b) for b in r.get("forward_branches", ())),
                    source=_source(raw, f"cuda.{v}", r),
                )
                for v, r in raw["cuda"].items()
            }
        ),
        os=ro(
            {
                n: OsRelease(
                    name=n,
                    image=r["image"],
                    python=r["python"],
                    nvidia=bool(r["nvidia"]),
                    cuda_tag=r.get("cuda_tag"),
                    suite=r.get("suite"),
                    source=_source(raw, f"os.{n}", r),
                )
                for n, r in raw["os"].items()
            }
        ),
        variant_archs=ro({k: _variant_archs(raw, k, r) for k, r in raw["variant_archs"].items()}),
        features=ro({n: _feature(raw, n, r) for n, r in raw["features"].items()}),
        sources=ro({k: str(v) for k, v in raw["sources"].items()}),
    )


def _source(raw: dict[str, Any], where: str, row: dict[str, Any]) -> Mapping[str, str]:
    """A row's `source: {key: date read}`, each key one of the file's `sources`."""
    source = row.get("source")
    if not isinstance(source, dict) or not source:
        raise CompatError(f"compat data: {where} has no `source: {{key: date read}}`")
    for key, date in source.items():
        if key not in raw["sources"]:
            raise CompatError(f"compat data: {where} cites unknown source {key!r}")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(date)):
            raise CompatError(f"compat data: {where} source {key}: {date!r} is not YYYY-MM-DD")
    return MappingProxyType({str(k): str(v) for k, v in source.items()})


def _variant_archs(raw: dict[str, Any], variant: str, row: dict[str, Any]) -> VariantArchs:
    source = _source(raw, f"variant_archs.{variant}", row)
    by_torch = {str(k): tuple(v) for k, v in (row.get("by_torch") or {}).items()}
    return VariantArchs(tuple(row["archs"]), MappingProxyType(by_torch), source)


@lru_cache(maxsize=4)
def load(path: Path = COMPAT_FILE) -> Compat:
    with open(path, encoding="utf-8") as fh:
        return parse(yaml.safe_load(fh))
