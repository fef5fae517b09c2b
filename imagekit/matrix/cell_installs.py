"""What a cell installs: torch's requirements, and each feature's step with its CUDA archs."""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagekit.matrix.cells import FeatureStep
from imagekit.matrix.compat import CPU, Compat, Feature
from imagekit.matrix.expand import RawCell

# pynvml for the self-check's hardware health (ECC, row remapping, links, clocks): pure
# Python, ~50 KB, talks to the host driver's libnvidia-ml that the NVIDIA runtime mounts.
# A floor, not a pin: uv takes a package from the PyTorch index first when that index has
# it at all, so an exact PyPI version could fail to resolve there; 12.535 has every call
# the self-check makes (older clock "throttle" names are read as a fallback).
NVML_REQUIREMENT = "nvidia-ml-py>=12.535"


def torch_requirements(
    version: str, torchvision: str | None, wanted: bool | None, cuda: bool = False
) -> tuple[str, ...]:
    reqs = [f"torch=={version}"]
    if wanted and torchvision:
        reqs.append(f"torchvision=={torchvision}")
    if cuda:
        reqs.append(NVML_REQUIREMENT)
    return tuple(reqs)


def compile_needs(raw: RawCell, installer: str, compile: bool) -> tuple[str, ...]:
    """setuptools, where torch.compile needs it and nothing else brings it: torch's C++
    extension loader imports it (torch 2.7's cpp_extension, at import), torch declares it
    only for Python 3.12 on, CUDA cells get it through triton, and pip's venv brings its own
    on Python 3.11 and older; uv's does not (found by the arm64 CPU cell's self-check)."""
    old_python = Version(raw.python) < Version("3.12")
    return (
        ("setuptools",) if compile and raw.cuda == CPU and installer == "uv" and old_python else ()
    )


def pip_key(cuda: str) -> str:
    """A feature's package list for a cell: "cpu", or the CUDA major ("12")."""
    return CPU if cuda == CPU else cuda.split(".")[0]


def feature_steps(
    compat: Compat,
    features: tuple[str, ...],
    cuda: str,
    archs: tuple[str, ...],
    arm64_archs: tuple[str, ...] | None = None,
) -> tuple[FeatureStep, ...]:
    """`archs`: the cell's first platform's; `arm64_archs`: arm64's where they differ."""
    key = pip_key(cuda)
    steps = []
    for name in features:
        feature = compat.features[name]
        reqs = feature.pip_for(key) or ()
        if not feature.needs_devel:
            steps.append(FeatureStep(name, reqs, build_isolation=True))
            continue
        env = {**_arch_env(name, feature, archs), "MAX_JOBS": "${MAX_JOBS:-$(imagekit_max_jobs)}"}
        arm64 = _arch_env(name, feature, arm64_archs) if arm64_archs is not None else {}
        # Normalized, as a wheel's file name spells it (build-env.sh looks for NAME-*.whl).
        prebuilt = tuple(canonicalize_name(Requirement(r).name) for r in reqs)
        step = FeatureStep(name, reqs, False, tuple(env.items()), prebuilt, tuple(arm64.items()))
        steps.append(step)
    return tuple(steps)


def _arch_env(name: str, feature: Feature, archs: tuple[str, ...]) -> dict[str, str]:
    """A CUDA extension's arch settings for the GPUs of one torch wheel (its list less +PTX)."""
    env = {"TORCH_CUDA_ARCH_LIST": ";".join(a.removesuffix("+PTX") for a in archs)}
    if feature.cuda_archs:
        env[f"{_env_name(name)}_CUDA_ARCHS"] = ";".join(extension_archs(archs, feature))
    return env


def _env_name(feature: str) -> str:
    """'flash-attn' -> 'FLASH_ATTN' (its setup.py reads FLASH_ATTN_CUDA_ARCHS)."""
    return feature.upper().replace("-", "_")


def extension_archs(archs: tuple[str, ...], feature: Feature) -> list[str]:
    """The extension's own arch values that serve this cell's GPUs: its value for a major
    (SASS sm_80 runs on 8.6 and 8.9) wherever the cell targets that major."""
    majors = {a.split(".")[0] for a in archs}
    return [v for v in feature.cuda_archs if v[:-1] in majors]
