"""`imagekit doctor` (issue 50): each check judged from gathered facts (table-tested, no
engine), what a selection needs, and the command's lines, --json and exit codes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit import machine_facts, readiness
from imagekit.cli.doctor_cmd import doctor
from imagekit.contract import exits
from imagekit.engine import discover
from imagekit.locks.pinned import load_cells
from imagekit.machine_facts import (
    EngineFacts,
    Facts,
    GpuFacts,
    QemuFacts,
    RegistryFacts,
    ToolFacts,
)
from imagekit.platforms import AMD64, ARM64
from imagekit.readiness import MISSING, OK, WARN, Needs

WriteEnv = Callable[..., Path]

# Docker 28 on the containerd store through the recorded client: what quickstart.sh sets up
GOOD_ENGINE = EngineFacts(
    source="containerd recorded in /etc/imagekit/engine.env",
    host="unix:///var/run/docker.sock",
    server_version="28.5.2",
    containerd_store=True,
    gpu_runtime=False,
    cli="/opt/imagekit-engines/docker28/usr/bin/docker",
    cli_version="28.5.2",
    builder_kind="buildx",
    buildx_version="0.29.1",
    driver="docker",
)
# Debian's 20.10 client on PATH, the user's report: built-in BuildKit, no buildx
OLD_CLIENT = EngineFacts(
    source="PATH",
    host="unix:///var/run/docker.sock",
    server_version="28.5.2",
    containerd_store=True,
    cli="/usr/bin/docker",
    cli_version="20.10.24",
    builder_kind="buildkit",
)
QEMU_OK = QemuFacts(ARM64, None, "/opt/q/qemu-aarch64", "11.1.3")
COSIGN = ToolFacts("cosign", "/usr/local/bin/cosign", "3.1.1", "IMAGEKIT_COSIGN")
ORAS = ToolFacts("oras", "/usr/local/bin/oras", "1.3.3", "IMAGEKIT_ORAS")
LOCAL = RegistryFacts("127.0.0.1:5000", "http://127.0.0.1:5000/v2/", 200)


def facts(**changes: Any) -> Facts:
    base = {
        "host_platform": AMD64,
        "engine": GOOD_ENGINE,
        "qemu": (QEMU_OK,),
        "registries": (LOCAL,),
        "cosign": COSIGN,
        "oras": ORAS,
        "gpu": GpuFacts(),
    }
    return Facts(**{**base, **changes})


def one(checks: list[readiness.Check], name: str) -> readiness.Check:
    (found,) = [c for c in checks if c.name == name]
    return found


# -- what a selection needs -------------------------------------------------------------------
def cells_of(write_env: WriteEnv, *blocks: dict[str, Any]) -> list[Any]:
    text = yaml.safe_dump(
        {"registry": "ghcr.io/acme", "repository": "train", "matrix": list(blocks)}
    )
    return load_cells([write_env(text)])


def block(**more: Any) -> dict[str, Any]:
    return {
        "cuda": "cpu",
        "torch": "2.7.1",
        "python": "3.11",
        "os": "debian12",
        "flavor": "slim",
        **more,
    }


def test_needs_come_from_the_cells_platforms_and_registries(write_env: WriteEnv) -> None:
    cells = cells_of(write_env, block(platform=["linux/amd64", "linux/arm64"]))
    needs = readiness.needs_of(cells, "envs/")
    assert needs.platforms == (AMD64, ARM64) and needs.multi_platform
    assert needs.registries == ("ghcr.io",) and not needs.registry_needed
    pushed = readiness.needs_of(cells, push=True, registries=["127.0.0.1:5000"])
    assert pushed.registries == ("127.0.0.1:5000",) and pushed.registry_needed


def test_one_platform_cells_need_no_qemu_and_no_buildx(write_env: WriteEnv) -> None:
    needs = readiness.needs_of(cells_of(write_env, block()))
    assert needs.platforms == (AMD64,) and not needs.multi_platform
    checks = readiness.judge(facts(engine=OLD_CLIENT, qemu=(QemuFacts(ARM64, "no QEMU"),)), needs)
    assert one(checks, "buildx").status == WARN and one(checks, "qemu linux/arm64").status == WARN
    assert readiness.ready(checks)


def test_docker_hub_is_named_docker_io() -> None:
    assert readiness.registry_of("pytorch/train:1") == "docker.io"
    assert readiness.registry_of("127.0.0.1:5000/train:1") == "127.0.0.1:5000"


# -- each check, judged -----------------------------------------------------------------------
def test_the_engine_line_says_version_store_and_a_stale_record() -> None:
    check = readiness.judge_engine(GOOD_ENGINE)
    assert check.status == OK and check.required
    assert check.found == "Docker 28.5.2, containerd image store, at unix:///var/run/docker.sock"
    noted = readiness.judge_engine(EngineFacts(**{**GOOD_ENGINE.__dict__, "note": "record stale"}))
    assert noted.status == OK and noted.found.endswith("(record stale)")
    down = EngineFacts(server_error="cannot reach the Docker daemon at unix:///x. Start it")
    check = readiness.judge_engine(down)
    assert check.status == MISSING and check.fix.startswith("cannot reach the Docker daemon")


@pytest.mark.parametrize(
    ("engine", "multi", "status"),
    [
        (GOOD_ENGINE, True, OK),  # buildx on the containerd store: pushes and holds indexes
        (OLD_CLIENT, False, WARN),  # the user's report: builds, but no zstd push
        (OLD_CLIENT, True, MISSING),  # a cell of two platforms cannot be built
        (EngineFacts(**{**GOOD_ENGINE.__dict__, "containerd_store": False}), False, WARN),
        (EngineFacts(**{**GOOD_ENGINE.__dict__, "containerd_store": False}), True, MISSING),
        (
            EngineFacts(
                **{**GOOD_ENGINE.__dict__, "containerd_store": False, "driver": "docker-container"}
            ),
            True,
            OK,
        ),
    ],
)
def test_buildx_and_its_driver(engine: EngineFacts, multi: bool, status: str) -> None:
    check = readiness.judge_buildx(engine, Needs(multi_platform=multi))
    assert check.status == status and check.required == multi
    assert engine.cli in check.found and engine.source in check.found
    if status != OK:
        assert "--compression zstd" in check.fix and "docker buildx create" in check.fix


def test_no_usable_client_is_missing_with_discovery_s_fix() -> None:
    error = "cannot build with BuildKit: no docker CLI on PATH. To fix: install the buildx plugin"
    check = readiness.judge_buildx(EngineFacts(builder_error=error), Needs())
    assert check.status == MISSING and check.required and check.fix == error


@pytest.mark.subprocess
def test_a_docker_path_that_is_no_docker_cli_is_named_with_its_answer_and_the_fix_alone(
    tmp_path: Path,
) -> None:
    """`doctor --docker /bin/false`: the path given and what it answered, never "Docker CLI
    None"; the fix line holds the fix only."""
    script = tmp_path / "notdocker"
    script.write_text('#!/bin/sh\necho "hello from $1"\nexit 3\n')
    script.chmod(0o755)
    with pytest.raises(discover.NoBuilder) as raised:
        discover.find_builder(str(script))
    problem, fix = raised.value.problem, raised.value.fix
    assert problem == (
        f"cannot build with BuildKit: {script} (--docker) is not a Docker CLI: `{script} "
        f"--version` exited 3 and printed 'hello from --version', and `{script} buildx "
        "version` failed"
    )
    assert "None" not in problem and fix == discover.HOW_TO_POINT
    assert str(raised.value) == f"{problem}. To fix: {fix}"  # build's message: both
    check = readiness.judge_buildx(EngineFacts(builder_error=problem, builder_fix=fix), Needs())
    assert check.status == MISSING and check.found == problem and check.fix == fix
    assert "cannot build" not in check.fix
    silent = tmp_path / "silent"
    silent.write_text('#!/bin/sh\n[ "$1" = buildx ] && exit 1\nexit 0\n')
    silent.chmod(0o755)
    with pytest.raises(discover.NoBuilder, match="`.*silent --version` printed nothing"):
        discover.find_builder(str(silent))


@pytest.mark.parametrize(
    ("qemu", "platforms", "status"),
    [
        (QEMU_OK, (AMD64, ARM64), OK),
        (
            QemuFacts(ARM64, "linux/arm64 on this x86_64 host needs QEMU; register it"),
            (AMD64, ARM64),
            MISSING,
        ),
        (QemuFacts(ARM64, "needs QEMU"), (AMD64,), WARN),
        (QemuFacts(ARM64, None, "/usr/bin/qemu-aarch64-static", "7.2.13"), (ARM64,), WARN),
    ],
)
def test_qemu_for_the_foreign_platform(
    qemu: QemuFacts, platforms: tuple[str, ...], status: str
) -> None:
    check = readiness.judge_qemu(qemu, Needs(platforms=platforms))
    assert check.name == "qemu linux/arm64" and check.status == status
    assert check.required == (ARM64 in platforms)
    if qemu.problem:
        assert check.fix == qemu.problem
    if qemu.version.startswith("7."):
        assert "crashes onnxruntime" in check.fix and "engines.sh qemu" in check.fix


@pytest.mark.parametrize(
    ("registry", "needs", "status", "needle"),
    [
        (
            LOCAL,
            Needs(registry_needed=True, push=True),
            OK,
            "answers at http://127.0.0.1:5000/v2/ (HTTP 200)",
        ),
        (
            RegistryFacts("ghcr.io", "https://ghcr.io/v2/", None, "Name or service not known"),
            Needs(registry_needed=True, push=True),
            MISSING,
            "no answer: Name or service not known",
        ),
        (
            RegistryFacts("ghcr.io", "https://ghcr.io/v2/", None, "timed out"),
            Needs(),
            WARN,
            "no answer",
        ),
        (
            RegistryFacts("ghcr.io", "https://ghcr.io/v2/", 401),
            Needs(registry_needed=True, push=True),
            MISSING,
            "no login",
        ),
        (
            RegistryFacts("ghcr.io", "https://ghcr.io/v2/", 401),
            Needs(registry_needed=True),
            WARN,  # it answers; a login is for a push, not asked for here
            "HTTP 401); no login",
        ),
        (
            RegistryFacts(
                "ghcr.io", "https://ghcr.io/v2/", 401, credentials="/root/.docker/config.json"
            ),
            Needs(registry_needed=True, push=True),
            OK,
            "login in /root/.docker/config.json",
        ),
    ],
)
def test_the_registry_answers_and_has_a_login_for_a_push(
    registry: RegistryFacts, needs: Needs, status: str, needle: str
) -> None:
    check = readiness.judge_registry(registry, needs)
    assert check.status == status and needle in check.found
    if status != OK:
        assert check.fix


@pytest.mark.parametrize(
    ("config", "registry", "where"),
    [
        ({"auths": {"ghcr.io": {"auth": "x"}}}, "ghcr.io", "/c.json"),
        ({"auths": {"https://index.docker.io/v1/": {}}}, "docker.io", "/c.json"),
        (
            {"credHelpers": {"ghcr.io": "gh"}},
            "ghcr.io",
            "the credential helper docker-credential-gh",
        ),
        (
            {"credsStore": "pass"},
            "ghcr.io",
            "the credential store docker-credential-pass (if it has one)",
        ),
        ({"auths": {"other.io": {}}}, "ghcr.io", ""),
        ({}, "ghcr.io", ""),
    ],
)
def test_where_a_login_is_found(config: dict[str, Any], registry: str, where: str) -> None:
    assert machine_facts.credentials_for(registry, config, "/c.json") == where


def test_cosign_and_oras_are_required_only_for_what_uses_them() -> None:
    gone = ToolFacts("oras", variable="IMAGEKIT_ORAS")
    assert readiness.judge(facts(oras=gone), Needs())[-2].status == WARN
    checks = readiness.judge(facts(oras=gone), Needs(push=True, registry_needed=True))
    oras = one(checks, "oras")
    assert (
        oras.status == MISSING
        and "apt-get install oras" in oras.fix
        and "$IMAGEKIT_ORAS" in oras.fix
    )
    cosign = one(readiness.judge(facts(cosign=ToolFacts("cosign")), Needs(attest=True)), "cosign")
    assert cosign.status == MISSING and cosign.found == "not found"


def test_no_gpu_is_a_warning_unless_one_is_needed() -> None:
    check = readiness.judge_gpu(GpuFacts(), GOOD_ENGINE, Needs())
    assert check.status == WARN
    assert check.found == "no GPU: builds work; `imagekit test` runs the CPU checks only"
    assert readiness.judge_gpu(GpuFacts(), GOOD_ENGINE, Needs(gpu=True)).status == MISSING


def test_gpus_with_their_driver_and_the_engine_s_runtime() -> None:
    gpus = GpuFacts("/usr/bin/nvidia-smi", ("NVIDIA H100 80GB HBM3",) * 2, "580.95.05")
    with_runtime = EngineFacts(**{**GOOD_ENGINE.__dict__, "gpu_runtime": True})
    check = readiness.judge_gpu(gpus, with_runtime, Needs(gpu=True))
    assert check.status == OK and check.found == "2 x NVIDIA H100 80GB HBM3; driver 580.95.05"
    check = readiness.judge_gpu(gpus, GOOD_ENGINE, Needs(gpu=True))
    assert check.status == MISSING and "nvidia-ctk runtime configure" in check.fix


def test_no_matrix_is_a_warning_naming_imagekit_init() -> None:
    check = readiness.judge_matrix(Needs())
    assert check.status == WARN and "none here" in check.found and "imagekit init" in check.fix


def test_ready_only_when_nothing_needed_is_missing() -> None:
    needs = Needs(cells=1, platforms=(AMD64, ARM64), multi_platform=True)
    assert readiness.ready(readiness.judge(facts(), needs))
    assert not readiness.ready(readiness.judge(facts(engine=OLD_CLIENT), needs))


# -- the command ------------------------------------------------------------------------------
@pytest.fixture
def gathered(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """doctor with the machine replaced by `seen["facts"]`; `seen` records what it asked."""
    seen: dict[str, Any] = {"facts": facts()}

    def gather(needs: Needs, docker_cli: str | None) -> Facts:
        seen.update(needs=needs, docker_cli=docker_cli)
        return seen["facts"]

    monkeypatch.setattr(readiness, "gather", gather)
    yield seen


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    """`imagekit doctor ARGS` through imagekit's main (its exit codes and error lines)."""
    from imagekit.cli import cli, main

    monkeypatch.setitem(cli.commands, "doctor", doctor)

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as info:
            main(["doctor", *args])
        out = capsys.readouterr()
        return int(info.value.code or 0), out.out, out.err

    return run


def test_doctor_without_a_matrix_checks_the_machine_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gathered: dict[str, Any], run_cli: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # no envs/ here
    code, out, err = run_cli()
    assert code == exits.OK, err
    assert gathered["needs"].cells == 0
    lines = out.splitlines()
    assert lines[0].startswith("warn    matrix") and "none here" in lines[0]
    assert "fix: run `imagekit init`" in lines[1]
    assert any(line.startswith("ok      engine") for line in lines)
    assert lines[-1].startswith("ready: everything the selection needs is here (")


def test_doctor_exits_5_naming_what_is_missing(
    write_env: WriteEnv, gathered: dict[str, Any], run_cli: Any
) -> None:
    cells_of(write_env, block(platform=["linux/amd64", "linux/arm64"]))
    gathered["facts"] = facts(engine=OLD_CLIENT)
    code, out, err = run_cli("--docker", "/usr/bin/docker")
    assert code == exits.ENGINE
    assert gathered["docker_cli"] == "/usr/bin/docker"
    assert "missing buildx" in out and "fix: install the buildx plugin" in out
    assert (
        err.strip() == "imagekit: error: not ready: buildx missing (each line above says the fix)"
    )


def test_doctor_push_requires_the_registry_and_oras(
    write_env: WriteEnv, gathered: dict[str, Any], run_cli: Any
) -> None:
    cells_of(write_env, block())
    gathered["facts"] = facts(oras=ToolFacts("oras", variable="IMAGEKIT_ORAS"))
    code, _, err = run_cli("--push", "--registry", "127.0.0.1:5000")
    assert code == exits.ENGINE and "oras missing" in err
    assert gathered["needs"].registries == ("127.0.0.1:5000",)
    assert gathered["needs"].push


def test_doctor_json_to_a_file_and_to_stdout(
    write_env: WriteEnv, tmp_path: Path, gathered: dict[str, Any], run_cli: Any
) -> None:
    cells_of(write_env, block())
    code, out, _ = run_cli("--json", str(tmp_path / "doctor.json"))
    assert code == exits.OK
    data = json.loads((tmp_path / "doctor.json").read_text())
    assert data["format"] == 1 and data["ready"] is True
    assert data["selection"] == {
        "cells": 1,
        "platforms": ["linux/amd64"],
        "registries": ["ghcr.io"],
        "push": False,
        "attest": False,
        "gpu": False,
    }
    assert {c["name"] for c in data["checks"]} >= {"engine", "buildx", "oras", "cosign", "gpus"}
    assert set(data["checks"][0]) == {"name", "status", "required", "found", "fix", "needed_for"}
    code, out, err = run_cli("--json", "-")
    assert json.loads(out) == data  # stdout is the JSON alone; the lines went to stderr
    assert "ok      engine" in err


def test_doctor_with_a_broken_matrix_is_its_usage_error(
    write_env: WriteEnv, gathered: dict[str, Any], run_cli: Any
) -> None:
    write_env("matrix: [{cuda: cpu}]\n")
    code, _, err = run_cli()
    assert code == exits.USAGE and "matrix" in err
    assert "needs" not in gathered  # nothing gathered for a matrix it cannot read


# -- docs/doctor.md documents every key, status, option and record key ---------------------------
DOC = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text()


def documented() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", DOC, re.M))


def test_every_key_of_the_json_report_is_documented() -> None:
    data = readiness.report(readiness.judge(facts(), Needs()), Needs())
    keys = set(data) | set(data["selection"]) | set(data["checks"][0])
    assert keys - documented() == set()


def test_every_status_check_and_record_key_is_documented() -> None:
    assert {OK, MISSING, WARN} <= documented()
    assert set(discover.RECORD_KEYS) <= documented()
    names = {c.name.split(" ")[0] for c in readiness.judge(facts(), Needs())}
    assert all(f"`{name}" in DOC for name in names)


def test_every_option_is_documented() -> None:
    filters = {"--envs", "--lock", "--cuda", "--torch", "--python", "--os", "--flavor", "--cell"}
    options = {p.opts[0] for p in doctor.params if p.opts and p.opts[0].startswith("--")}
    assert options - filters
    assert [o for o in options if f"`{o}" not in DOC] == []
