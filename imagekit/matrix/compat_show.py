"""`imagekit compat show`: the tables, and which images run on a given driver and GPU.

The verdicts are the rules the self-check judges with (contract.driver.driver_problem,
contract.archs.arch_verdict) over the compatibility data, so `compat show` refuses exactly
what an image's self-check would fail on that host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from imagekit.contract.archs import arch_verdict
from imagekit.contract.driver import driver_problem as gpu_driver_problem
from imagekit.contract.driver import version_tuple
from imagekit.errors import CompatError, UsageError
from imagekit.matrix import compat as compat_mod
from imagekit.matrix.compat import Compat, CudaRelease, TorchRelease
from imagekit.platforms import AMD64
from imagekit.runtime import fwdcompat, gpu_models
from imagekit.text_table import render_table


@dataclass(frozen=True)
class Host:
    driver: str | None
    gpu: str | None  # as the user wrote it
    capability: tuple[int, int] | None


@dataclass(frozen=True)
class Fit:
    runs: bool
    why: str  # short, for the row
    rule: str = ""  # the rule that refused, with its source: printed once, as a footnote
    jit: bool = False  # it runs through PTX JIT (which needs the toolkit's own driver)


# NVIDIA's driver versions as nvidia-smi prints them: 535.104.05, 580.95.05, 470.82
DRIVER = re.compile(r"\d+\.\d+(\.\d+)?")


def parse_host(driver: str | None, gpu: str | None) -> Host:
    if driver is not None and not DRIVER.fullmatch(driver):
        raise UsageError(
            f"--driver {driver!r} is not a driver version; give it as nvidia-smi prints it, "
            "e.g. --driver 535.104.05"
        )
    capability = None
    if gpu is not None:
        capability = gpu_models.capability_of(gpu)
        if capability is None:
            raise UsageError(
                f"--gpu {gpu!r} is neither a compute capability (sm_90, 9.0) nor a known "
                f"model ({gpu_models.known_names()}); pass its capability, e.g. --gpu sm_90"
            )
    return Host(driver, gpu, capability)


def driver_verdict(data: Compat, cuda: CudaRelease, host: Host, jit: bool) -> Fit:
    source = data.source_text(cuda.source, only=("cuda-notes", "cuda-runfiles"))
    if gpu_driver_problem(host.driver, cuda.min_driver, cuda.version):
        rule = (
            f"CUDA {cuda.major}.x runs on drivers from {cuda.min_driver} (minor-version "
            f"compatibility); source: {source}"
        )
        why = f"driver {host.driver} < {cuda.min_driver}; {_forward_note(cuda, host)}"
        return Fit(False, why, rule)
    if jit and host.driver and version_tuple(host.driver) < version_tuple(cuda.toolkit_driver):
        rule = (
            f"PTX JIT needs the toolkit's own driver ({cuda.toolkit_driver} for CUDA "
            f"{cuda.version}); minor-version compatibility does not cover it; source: {source}"
        )
        return Fit(False, f"this GPU needs PTX JIT; driver {host.driver} is too old", rule)
    return Fit(True, "")


def _forward_note(cuda: CudaRelease, host: Host) -> str:
    """What the nvidia flavor's entrypoint would decide (its compat libcuda is the toolkit's)."""
    names = (host.gpu,) if host.gpu and gpu_models.model_of(host.gpu) else ()
    decision = fwdcompat.decide(
        host.driver, cuda.min_driver, names, cuda.toolkit_driver, cuda.forward_branches
    )
    if decision.enable:
        return "the nvidia flavor runs (forward compatibility, data-center GPUs only)"
    return "no forward compatibility for it either"


def arch_text(
    data: Compat, torch: TorchRelease, cuda: CudaRelease, host: Host, platform: str = AMD64
) -> Fit:
    """Whether the wheel of `platform` has code for the host's GPU: the aarch64 wheels are
    compiled for other GPUs than the x86-64 ones (an A100 on an arm64 host needs sm_80 in
    the aarch64 list)."""
    if host.capability is None:
        return Fit(True, "")
    try:
        archs = data.archs_for(torch.version, cuda.version, platform)
    except CompatError as exc:  # no list for the platform: refuse rather than guess
        return Fit(False, "its arch list is not in the compat data", str(exc))
    verdict = arch_verdict(host.capability, compat_mod.arch_entries(archs))
    if verdict.runs:
        return Fit(True, f"{verdict.via} (JIT)" if verdict.jit else verdict.via, jit=verdict.jit)
    gpu = f"sm_{host.capability[0]}{host.capability[1]}"
    rule = (
        "SASS sm_XY runs on GPUs of major X and minor >= Y, PTX compute_XY on any GPU >= X.Y "
        "(CUDA programming guide, binary compatibility); the wheels' arch lists: source: "
        + data.source_text(_archs_source(data, cuda, platform))
    )
    return Fit(False, f"no code for {gpu} (built for {' '.join(archs)})", rule)


def _archs_source(data: Compat, cuda: CudaRelease, platform: str) -> Mapping[str, str]:
    archs = data.variant_archs[compat_mod.variant_of(cuda.version)]
    return archs.arm64.source if platform != AMD64 and archs.arm64 else archs.source


def row_verdict(
    data: Compat, torch: TorchRelease, cuda: CudaRelease, host: Host, platform: str = AMD64
) -> Fit:
    archs = arch_text(data, torch, cuda, host, platform)
    if not archs.runs:
        return archs
    driver = driver_verdict(data, cuda, host, jit=archs.jit)
    if not driver.runs:
        return driver
    return Fit(True, archs.why)


def show(driver: str | None = None, gpu: str | None = None, platform: str = AMD64) -> list[str]:
    data = compat_mod.load()
    host = parse_host(driver, gpu)
    if host.driver is None and host.capability is None:
        return compat_tables(data, platform)
    asked = " and ".join(x for x in (driver and f"driver {driver}", gpu and f"GPU {gpu}") if x)
    if platform != AMD64:
        asked += f" ({platform})"
    rows: list[tuple[str, str, str]] = []
    rules: list[str] = []
    runs = 0
    for torch in data.torch.values():
        for version in data.cudas_of(torch, platform):
            verdict = row_verdict(data, torch, data.cuda[version], host, platform)
            runs += verdict.runs
            text = f"runs {verdict.why}".rstrip() if verdict.runs else f"REFUSED: {verdict.why}"
            if verdict.rule:
                if verdict.rule not in rules:
                    rules.append(verdict.rule)
                text += f" [{rules.index(verdict.rule) + 1}]"
            rows.append((torch.version, version, text))
    lines = [f"torch builds on {asked}:", *render_table(("torch", "CUDA", "verdict"), rows)]
    lines.append(f"{runs} of {len(rows)} torch x CUDA builds run there")
    lines += ["", "Why refused:"] + [f"[{i}] {r}" for i, r in enumerate(rules, 1)] if rules else []
    return lines


def compat_tables(data: Compat, platform: str = AMD64) -> list[str]:
    if platform != AMD64:
        return platform_tables(data, platform)
    torch = render_table(
        ("torch", "PyPI CUDA", "variants", "Python", "torchvision"),
        [
            (
                rel.version,
                rel.pypi_cuda,
                " ".join(rel.variants),
                f"{rel.python[0]}-{rel.python[-1]}",
                rel.torchvision or "-",
            )
            for rel in data.torch.values()
        ],
    )
    cuda = render_table(
        ("CUDA", "image tag", "min driver", "toolkit driver", "OS"),
        [
            (c.version, c.full, c.min_driver, c.toolkit_driver, " ".join(c.os))
            for c in data.cuda.values()
        ],
    )
    ask = "Ask: imagekit compat show --driver 535.104.05 --gpu sm_90 (or --gpu H100)"
    more = "Other platforms: imagekit compat show --platform linux/arm64"
    return [*torch, "", *cuda, "", ask, more]


def platform_tables(data: Compat, platform: str) -> list[str]:
    """The tables for one platform other than amd64: what upstream publishes for it."""
    rows = []
    for rel in data.torch.values():
        builds = rel.builds(platform)
        if builds is None:
            rows.append((rel.version, "-", "-", "-", "no wheels in the data"))
            continue
        pypi = builds.pypi_cuda or "CPU"
        pythons = f"{builds.python[0]}-{builds.python[-1]}" if builds.python else "-"
        rows.append((rel.version, pypi, " ".join(builds.variants) or "-", pythons, builds.note))
    torch = render_table(("torch", "PyPI build", "index variants", "Python", "note"), rows)
    cuda = render_table(
        ("CUDA", "image tag", f"OS ({platform})"),
        [(c.version, c.full, " ".join(c.os_for(platform)) or "-") for c in data.cuda.values()],
    )
    archs = render_table(
        ("torch", "CUDA", f"GPU archs of the {platform} wheel"), _arch_rows(data, platform)
    )
    features = render_table(
        ("feature", f"packages on {platform}", "note"),
        [
            (
                f.name,
                "; ".join(f"{k}: {' '.join(v)}" for k, v in f.arm64_pip.items()) or "none",
                f.arm64_note,
            )
            for f in data.features.values()
        ],
    )
    return [f"Builds for {platform}:", *torch, "", *cuda, "", *archs, "", *features]


def _arch_rows(data: Compat, platform: str) -> list[tuple[str, str, str]]:
    """Each CUDA wheel's arch list on `platform` (what `--gpu` is judged against)."""
    rows = []
    for rel in data.torch.values():
        for version in data.cudas_of(rel, platform):
            try:
                archs = " ".join(data.archs_for(rel.version, version, platform))
            except CompatError:
                archs = "not in the data: arm64 cells of it are refused"
            rows.append((rel.version, version, archs))
    return rows
