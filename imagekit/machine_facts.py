"""What `imagekit doctor` reads of this machine: engine, buildx, QEMU, registries, tools, GPUs.

Each `gather_*` reads one part into plain facts; readiness.py judges them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.errors import ImagekitError

TIMEOUT = 5.0  # seconds for one registry or tool answer: doctor says, it does not wait
DOCKER_HUB = "docker.io"
# Docker Hub's API host and the key `docker login` stores its credentials under
HUB_API, HUB_AUTH_KEY = "registry-1.docker.io", "https://index.docker.io/v1/"


@dataclass(frozen=True)
class EngineFacts:
    source: str = ""  # how the docker CLI was chosen (discover.choose)
    note: str = ""  # an engine record passed over, and why
    host: str = ""  # DOCKER_HOST as used
    server_version: str = ""
    server_error: str = ""  # the daemon unreachable or too old: the message with its fix
    containerd_store: bool | None = None
    gpu_runtime: bool | None = None  # the engine runs containers with --gpus (nvidia)
    cli: str = ""  # the docker CLI that builds
    cli_version: str = ""
    builder_kind: str = ""  # "buildx", "buildkit" (a pre-23 CLI), "": none usable
    builder_error: str = ""  # why none is usable (with the fix where builder_fix is "")
    builder_fix: str = ""  # what makes one usable (discover.NoBuilder's fix)
    buildx_version: str = ""
    driver: str = ""  # the selected buildx builder's driver


@dataclass(frozen=True)
class QemuFacts:
    platform: str
    problem: str | None  # emulation.emulation_problem: None where containers run it
    interpreter: str = ""
    version: str = ""


@dataclass(frozen=True)
class RegistryFacts:
    registry: str
    url: str
    status: int | None  # the /v2/ endpoint's HTTP status; None: no answer
    error: str = ""  # why no answer
    credentials: str = ""  # where a login for it is ("" none found)


@dataclass(frozen=True)
class ToolFacts:
    name: str
    path: str = ""  # "" not found
    version: str = ""
    variable: str = ""  # the environment variable that names its path


@dataclass(frozen=True)
class GpuFacts:
    smi: str = ""  # nvidia-smi's path, "" none
    gpus: tuple[str, ...] = ()  # one model name per GPU
    driver: str = ""
    error: str = ""  # nvidia-smi failed


@dataclass(frozen=True)
class Facts:
    host_platform: str
    engine: EngineFacts
    qemu: tuple[QemuFacts, ...]
    registries: tuple[RegistryFacts, ...]
    cosign: ToolFacts
    oras: ToolFacts
    gpu: GpuFacts


def gather_engine(docker_cli: str | None) -> EngineFacts:
    """Through the engine module, as `imagekit build` reaches it: the same client, chosen the
    same way (an engine record adopted first)."""
    from imagekit.engine import discover
    from imagekit.engine.docker import DockerEngine

    choice = discover.engine_choice(docker_cli)
    discover.adopt(choice, say_note=False)  # said on the engine's line instead
    engine = DockerEngine(docker_cli)
    facts: dict[str, Any] = {"source": choice.source, "note": choice.note}
    facts["host"] = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        facts["server_version"] = str(engine.client.version().get("Version", "?"))
        facts["containerd_store"] = engine.containerd_store
        facts["gpu_runtime"] = engine.has_gpu_runtime()
    except ImagekitError as exc:
        facts["server_error"] = exc.lines[0]
    try:
        builder = engine.builder
    except discover.NoBuilder as exc:  # what each CLI answered, and the fix on its own line
        return EngineFacts(**facts, builder_error=exc.problem, builder_fix=exc.fix)
    except ImagekitError as exc:
        return EngineFacts(**facts, builder_error=exc.lines[0])
    facts.update(cli=builder.cli, cli_version=builder.cli_version, builder_kind=builder.kind)
    if builder.kind == "buildx":
        facts.update(buildx_version=discover.buildx_version(builder.cli), driver=builder.driver)
    return EngineFacts(**facts)


def gather_qemu(platform: str) -> QemuFacts:
    from imagekit.engine import emulation

    entries = emulation.read_binfmt()
    problem = emulation.emulation_problem(platform, os.uname().machine, entries)
    interpreter = emulation.interpreter(platform, entries)
    said = _output([interpreter, "--version"]) if interpreter and problem is None else ""
    match = re.search(r"version (\d+\.\d+(?:\.\d+)?)", said)
    return QemuFacts(platform, problem, interpreter, match.group(1) if match else "")


def gather_registry(registry: str) -> RegistryFacts:
    from imagekit.engine.tools import plain_http

    api = HUB_API if registry == DOCKER_HUB else registry
    scheme = "http" if plain_http(f"{registry}/x") else "https"
    url = f"{scheme}://{api}/v2/"
    credentials = credentials_for(registry, *docker_config())
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            return RegistryFacts(registry, url, answer.status, credentials=credentials)
    except urllib.error.HTTPError as exc:  # 401 too: the registry answered
        return RegistryFacts(registry, url, exc.code, credentials=credentials)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        return RegistryFacts(registry, url, None, str(why), credentials)


def docker_config() -> tuple[dict[str, Any], str]:
    """The docker CLI's config.json (where `docker login` keeps credentials) and its path."""
    folder = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, str(path)
    return (data if isinstance(data, dict) else {}), str(path)


def credentials_for(registry: str, config: dict[str, Any], path: str) -> str:
    """Where a login for `registry` is: config.json's auths, a credential helper or store
    ("" where none is named)."""
    key = HUB_AUTH_KEY if registry == DOCKER_HUB else registry
    helpers = config.get("credHelpers") or {}
    if isinstance(helpers, dict) and key in helpers:
        return f"the credential helper docker-credential-{helpers[key]}"
    auths = config.get("auths") or {}
    if isinstance(auths, dict) and any(k in auths for k in (key, f"https://{key}")):
        return path
    if config.get("credsStore"):
        return f"the credential store docker-credential-{config['credsStore']} (if it has one)"
    return ""


def gather_tool(name: str) -> ToolFacts:
    from imagekit.engine import tools

    tool = {"cosign": tools.COSIGN, "oras": tools.ORAS}[name]
    named = os.environ.get(tool.variable)
    path = shutil.which(named) if named else shutil.which(name)
    if not path:
        return ToolFacts(name, variable=tool.variable)
    said = _output([path, "version"])
    match = re.search(r"^\s*(?:GitVersion|Version):\s*v?(\S+)", said, re.M)
    return ToolFacts(name, path, match.group(1) if match else "", tool.variable)


def gather_gpu() -> GpuFacts:
    from imagekit.contract.driver import read_driver

    smi = shutil.which("nvidia-smi") or ""
    if not smi:
        return GpuFacts(driver=read_driver() or "")
    query = [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuFacts(smi, driver=read_driver() or "", error=str(exc))
    if done.returncode != 0:
        error = (done.stderr or done.stdout).strip().splitlines()[-1:] or [
            f"exit {done.returncode}"
        ]
        return GpuFacts(smi, driver=read_driver() or "", error=error[0])
    rows = [line.rsplit(",", 1) for line in done.stdout.splitlines() if "," in line]
    driver = rows[0][1].strip() if rows else read_driver() or ""
    return GpuFacts(smi, tuple(r[0].strip() for r in rows), driver)


def _output(command: list[str]) -> str:
    """A tool's answer to a version question ("" where it gives none)."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT * 6, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr
