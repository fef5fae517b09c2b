"""Compatibility data: torch -> CUDA variants and Pythons, CUDA -> drivers, archs, OS.

Loaded once from `data/compat.yaml` into frozen records. Lookups raise CompatError that
lists what does exist, so a user can pick a valid combination from the message alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from packaging.version import Version

from imagekit.errors import CompatError
from imagekit.resources import DATA_DIR

COMPAT_FILE = DATA_DIR / "compat.yaml"
CPU = "cpu"


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    pypi_cuda: str
    variants: tuple[str, ...]
    torchvision: str | None


@dataclass(frozen=True)
class CudaRelease:
    version: str
    full: str
    min_driver: str
    toolkit_driver: str
    archs: tuple[str, ...]
    os: tuple[str, ...]
    cudnn_tag: str = "cudnn"  # the cuDNN word in nvidia/cuda tags: cudnn8, cudnn9 or cudnn

    @property
    def require_cuda(self) -> str:
        """What an image built on this CUDA's wheels asks of the driver: the major's floor.
        CUDA minor-version compatibility runs any 12.x (13.x) build on a driver of the
        major's first release, so cuda>=12.8 would refuse hosts the wheels run on."""
        return f"cuda>={self.version.split('.')[0]}.0"


@dataclass(frozen=True)
class OsRelease:
    name: str
    image: str
    python: str
    nvidia: bool
    cuda_tag: str | None
    suite: str | None


@dataclass(frozen=True)
class Feature:
    name: str
    pip: Mapping[str, tuple[str, ...]]  # key: "cpu", a CUDA major, or "*"
    needs_devel: bool


@dataclass(frozen=True)
class Compat:
    torch: Mapping[str, TorchRelease]
    cuda: Mapping[str, CudaRelease]
    os: Mapping[str, OsRelease]
    variant_archs: Mapping[str, tuple[str, ...]]
    features: Mapping[str, Feature]

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


def _minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


def _feature(name: str, row: dict[str, Any]) -> Feature:
    pip = row["pip"]
    by_key = {"*": tuple(pip)} if isinstance(pip, list) else {k: tuple(v) for k, v in pip.items()}
    return Feature(
        name=name, pip=MappingProxyType(by_key), needs_devel=bool(row.get("needs_devel", False))
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
                    cudnn_tag=r.get("cudnn_tag", "cudnn"),
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
                )
                for n, r in raw["os"].items()
            }
        ),
        variant_archs=ro({k: tuple(v) for k, v in raw["variant_archs"].items()}),
        features=ro({n: _feature(n, r) for n, r in raw["features"].items()}),
    )


@lru_cache(maxsize=4)
def load(path: Path = COMPAT_FILE) -> Compat:
    with open(path, encoding="utf-8") as fh:
        return parse(yaml.safe_load(fh))
