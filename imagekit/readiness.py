"""`imagekit doctor`: is this machine ready for the selected cells? (docs/doctor.md)

Gathering and judging are apart: `gather` reads the machine once into plain `Facts` (the
engine and its image store, buildx and its driver, QEMU, the registries, cosign, oras, the
GPUs: machine_facts.py); each `judge_*` is a pure function of those facts and of what the
selection `Needs`, giving one `Check`: ok, missing (needed, and not there) or warn
(optional, and not there).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.contract.refs import parse
from imagekit.engine.discover import Builder
from imagekit.machine_facts import (
    DOCKER_HUB,
    EngineFacts,
    Facts,
    GpuFacts,
    QemuFacts,
    RegistryFacts,
    ToolFacts,
    gather_engine,
    gather_gpu,
    gather_qemu,
    gather_registry,
    gather_tool,
)
from imagekit.matrix.cells import Cell
from imagekit.platforms import AMD64, PLATFORMS

FORMAT = 1  # of the --json report
OK, MISSING, WARN = "ok", "missing", "warn"
CONTAINER_BUILDER = "docker buildx create --use --driver docker-container"
CONTAINERD_STORE = 'dockerd\'s {"features": {"containerd-snapshotter": true}}'
OLD_QEMU = 8  # below it (Debian 12's 7.2), onnxruntime's aarch64 build crashes on import


# -- what the selection needs -----------------------------------------------------------------
@dataclass(frozen=True)
class Needs:
    cells: int = 0  # 0: no matrix here (only the machine is checked)
    where: str = ""  # the matrix's files, as the summary names them
    platforms: tuple[str, ...] = ()  # every platform a selected cell declares
    multi_platform: bool = False  # a cell declares several: one index, pushed by BuildKit
    registries: tuple[str, ...] = ()  # hosts to check: --registry's, else the cells'
    registry_needed: bool = False  # --push or --registry: an unreachable one is missing
    push: bool = False
    attest: bool = False  # `imagekit test --attest` and `imagekit verify`: cosign
    gpu: bool = False  # `imagekit test` on GPUs here


def registry_of(tag: str) -> str:
    return parse(tag).registry or DOCKER_HUB


def needs_of(
    cells: Sequence[Cell],
    where: str = "",
    push: bool = False,
    registries: Sequence[str] = (),
    attest: bool = False,
    gpu: bool = False,
) -> Needs:
    declared = {p for cell in cells for p in cell.platforms}
    found = sorted({registry_of(tag) for cell in cells for tag in cell.tags})
    return Needs(
        cells=len(cells),
        where=where,
        platforms=tuple(p for p in PLATFORMS if p in declared),
        multi_platform=any(len(cell.platforms) > 1 for cell in cells),
        registries=tuple(dict.fromkeys(registries)) or tuple(found),
        registry_needed=push or bool(registries),
        push=push,
        attest=attest,
        gpu=gpu,
    )


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | missing | warn
    required: bool
    found: str  # what is there (version, path), or what is not
    fix: str = ""  # what makes it ok ("" when ok)
    needed_for: str = ""  # why it is needed, or what it would serve

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "required": self.required,
            "found": self.found,
            "fix": self.fix,
            "needed_for": self.needed_for,
        }


def _check(name: str, ok: bool, required: bool, found: str, fix: str, why: str) -> Check:
    status = OK if ok else (MISSING if required else WARN)
    return Check(name, status, required, found, "" if ok else fix, why)


# -- judging: one pure function per line ------------------------------------------------------
def judge_matrix(needs: Needs) -> Check:
    if not needs.cells:
        return Check(
            "matrix",
            WARN,
            False,
            "none here: only the machine is checked",
            "run `imagekit init` to start one (or pass --envs FILE|DIR)",
            "what the checks below require",
        )
    found = (
        f"{needs.cells} cell{'s' if needs.cells != 1 else ''} from {needs.where or 'envs/'}: "
        f"{', '.join(needs.platforms)}"
    )
    return Check("matrix", OK, False, found, "", "what the checks below require")


def judge_engine(e: EngineFacts) -> Check:
    store = {True: "containerd image store", False: "classic image store", None: "store ?"}[
        e.containerd_store
    ]
    found = f"Docker {e.server_version}, {store}, at {e.host}" if not e.server_error else ""
    if e.note:
        found = f"{found} ({e.note})" if found else e.note
    return _check(
        "engine",
        not e.server_error,
        True,
        found or "no engine answers",
        e.server_error,
        "every build, test and push",
    )


def _builder(e: EngineFacts) -> Builder:
    return Builder(e.cli, e.builder_kind, e.cli_version, e.driver)


def pushes_from_builder(e: EngineFacts) -> bool:
    """BuildKit writes and pushes the layers itself: the engine's rule (Builder.pushes_layers)."""
    return _builder(e).pushes_layers(bool(e.containerd_store))


def holds_multi_platform(e: EngineFacts) -> bool:
    """An image of several platforms under one name (Builder.holds_multi_platform)."""
    return _builder(e).holds_multi_platform(bool(e.containerd_store))


def judge_buildx(e: EngineFacts, needs: Needs) -> Check:
    why = "several platforms in one image" if needs.multi_platform else "zstd layers, cache export"
    via = f"via {e.cli} {e.cli_version} ({e.source})"
    if not e.builder_kind:
        fix = e.builder_fix or e.builder_error
        return _check("buildx", False, True, e.builder_error, fix, "every build")
    if e.builder_kind == "buildkit":
        found = f"none: Docker's built-in BuildKit (DOCKER_BUILDKIT=1) {via}"
        fix = (
            "install the buildx plugin (https://docs.docker.com/go/buildx/), "
            f"then `{CONTAINER_BUILDER}`"
        )
        return _check("buildx", False, needs.multi_platform, found, _limits(fix), why)
    found = f"buildx {e.buildx_version or '?'}, driver {e.driver or '?'}, {via}"
    ok = pushes_from_builder(e) and (holds_multi_platform(e) or not needs.multi_platform)
    fix = f"turn on the containerd image store ({CONTAINERD_STORE}), or `{CONTAINER_BUILDER}`"
    return _check("buildx", ok, needs.multi_platform, found, _limits(fix), why)


def _limits(fix: str) -> str:
    return (
        f"{fix}. Without it builds work, but --push sends gzip layers through the engine "
        "(--compression zstd and --cache-to type=registry are refused) and an image of "
        "several platforms cannot be built"
    )


def judge_qemu(q: QemuFacts, needs: Needs) -> Check:
    required = q.platform in needs.platforms
    why = "cells that declare it" if required else f"building {q.platform} (no cell asks)"
    name = f"qemu {q.platform}"
    if q.problem is not None:
        return _check(name, False, required, "cannot run it in containers", q.problem, why)
    found = f"{Path(q.interpreter).name or 'registered'} {q.version or '?'} at {q.interpreter}"
    major = _major(q.version)
    if major is not None and major < OLD_QEMU:
        fix = (
            f"QEMU {q.version} runs torch but crashes onnxruntime's aarch64 build: QEMU 11 "
            "(`sudo bash .ci/engines.sh qemu` in imagekit's checkout)"
        )
        return Check(name, WARN, required, found + ", F flag", fix, why)
    return Check(name, OK, required, found + ", F flag", "", why)


def _major(version: str) -> int | None:
    match = re.match(r"(\d+)\.", version)
    return int(match.group(1)) if match else None


def judge_registry(r: RegistryFacts, needs: Needs) -> Check:
    name = f"registry {r.registry}"
    why = "--push" if needs.registry_needed else "a later --push"
    if r.status is None:
        fix = (
            f"reach {r.url} from here (network, proxy: HTTPS_PROXY), or name the registry "
            "you push to with --registry HOST"
        )
        return _check(name, False, needs.registry_needed, f"no answer: {r.error}", fix, why)
    found = f"answers at {r.url} (HTTP {r.status})"
    if r.status == 401 and not r.credentials:
        fix = f"`docker login {r.registry}` before pushing (no credentials for it were found)"
        return _check(name, False, needs.push, found + "; no login", fix, why)
    login = f"; login in {r.credentials}" if r.credentials else ""
    return Check(name, OK, needs.registry_needed, found + login, "", why)


def judge_tool(t: ToolFacts, required: bool, why: str, optional_why: str) -> Check:
    found = f"{t.path} {t.version}".strip() if t.path else "not found"
    fix = (
        f"install {t.name} (Debian 13 or newer: `apt-get install {t.name}`; on Debian 12 "
        f"`sudo bash .ci/engines.sh tools` in imagekit's checkout), or set ${t.variable}"
    )
    return _check(t.name, bool(t.path), required, found, fix, why if required else optional_why)


def judge_gpu(g: GpuFacts, e: EngineFacts, needs: Needs) -> Check:
    why = "imagekit test's GPU checks"
    if not g.gpus:
        found = "no GPU: builds work; `imagekit test` runs the CPU checks only"
        if g.error:
            found += f" (nvidia-smi: {g.error})"
        fix = "run `imagekit test` on a machine with an NVIDIA GPU and its driver"
        return _check("gpus", False, needs.gpu, found, fix, why)
    names = ", ".join(f"{n} x {m}" for m, n in _counted(g.gpus))
    found = f"{names}; driver {g.driver or '?'}"
    if e.gpu_runtime is False:
        fix = (
            "install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure "
            "--runtime=docker` and restart the engine"
        )
        return _check(
            "gpus", False, needs.gpu, found + "; the engine has no nvidia runtime", fix, why
        )
    return Check("gpus", OK, needs.gpu, found, "", why)


def _counted(names: Sequence[str]) -> list[tuple[str, int]]:
    return [(name, names.count(name)) for name in dict.fromkeys(names)]


def judge(facts: Facts, needs: Needs) -> list[Check]:
    """Every line of the report, in its order."""
    e = facts.engine
    checks = [judge_matrix(needs), judge_engine(e), judge_buildx(e, needs)]
    checks += [judge_qemu(q, needs) for q in facts.qemu]
    checks += [judge_registry(r, needs) for r in facts.registries]
    checks.append(
        judge_tool(
            facts.cosign, needs.attest, "--attest", "imagekit test --attest, imagekit verify"
        )
    )
    checks.append(
        judge_tool(
            facts.oras,
            needs.push,
            "--push (the SBOM attached, layers read back)",
            "build --push, imagekit sbom --from registry",
        )
    )
    checks.append(judge_gpu(facts.gpu, e, needs))
    return checks


def ready(checks: Sequence[Check]) -> bool:
    return all(c.status != MISSING for c in checks)


def report(checks: Sequence[Check], needs: Needs) -> dict[str, Any]:
    """The --json document (docs/doctor.md has every key)."""
    return {
        "format": FORMAT,
        "ready": ready(checks),
        "selection": {
            "cells": needs.cells,
            "platforms": list(needs.platforms),
            "registries": list(needs.registries),
            "push": needs.push,
            "attest": needs.attest,
            "gpu": needs.gpu,
        },
        "checks": [c.as_dict() for c in checks],
    }


def lines(checks: Sequence[Check]) -> list[str]:
    """The report for people: one line a check, and its fix under it when it is not ok."""
    width = max(len(c.name) for c in checks)
    out = []
    for c in checks:
        need = "needed" if c.required else "optional"
        out.append(f"{c.status:<8}{c.name:<{width + 2}}{c.found}  [{need}: {c.needed_for}]")
        if c.fix:
            out.append(f"{'':<8}{'':<{width + 2}}fix: {c.fix}")
    return out


# -- gathering: machine_facts.py reads the machine, one part at a time --------------------
def gather(needs: Needs, docker_cli: str | None) -> Facts:
    from imagekit.engine import emulation

    host = emulation.host_platform() or AMD64
    return Facts(
        host_platform=host,
        engine=gather_engine(docker_cli),
        qemu=tuple(gather_qemu(p) for p in PLATFORMS if p != host),
        registries=tuple(gather_registry(r) for r in needs.registries),
        cosign=gather_tool("cosign"),
        oras=gather_tool("oras"),
        gpu=gather_gpu(),
    )
