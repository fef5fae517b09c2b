"""Finding a way to build with BuildKit, and the daemon to build on.

Order: the chosen CLI (--docker / IMAGEKIT_DOCKER) or each `docker` found, first with the
buildx plugin, else a pre-23 CLI driven with DOCKER_BUILDKIT=1. Never the classic builder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from imagekit.engine.interface import Compression, is_inline_cache
from imagekit.errors import EngineError

MIN_ENGINE = Version("20.10")
CANDIDATES = ("/usr/bin/docker", "/usr/local/bin/docker")
HOW_TO_GET = (
    "install the buildx plugin (https://docs.docker.com/go/buildx/), or point --docker "
    "(or IMAGEKIT_DOCKER) at a Docker CLI older than 23, which runs BuildKit itself when "
    "DOCKER_BUILDKIT=1; imagekit never falls back to the classic builder"
)


@dataclass(frozen=True)
class Builder:
    cli: str
    kind: str  # "buildx" or "buildkit" (pre-23 CLI with DOCKER_BUILDKIT=1)
    cli_version: str
    # buildx only: the selected builder's driver ("docker", "docker-container", ...)
    driver: str = ""

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.kind == "buildkit":
            env["DOCKER_BUILDKIT"] = "1"
        return env


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def cli_version(cli: str) -> Version | None:
    result = _run([cli, "--version"])  # client only: works with the daemon down
    match = re.search(r"version (\d+\.\d+(?:\.\d+)?)", result.stdout)
    try:
        return Version(match.group(1)) if match else None
    except InvalidVersion:
        return None


def has_buildx(cli: str) -> bool:
    return _run([cli, "buildx", "version"]).returncode == 0


def buildx_driver(cli: str) -> str:
    """The selected buildx builder's driver, from `docker buildx inspect` ("" if unknown)."""
    match = re.search(r"^Driver:\s*(\S+)", _run([cli, "buildx", "inspect"]).stdout, re.M)
    return match.group(1) if match else ""


def candidates(chosen: str | None) -> list[str]:
    if chosen:
        return [chosen]
    found: list[str] = []
    for path in [shutil.which("docker"), *CANDIDATES]:
        if (
            path
            and Path(path).exists()
            and Path(path).resolve() not in {Path(f).resolve() for f in found}
        ):
            found.append(path)
    return found


def find_builder(chosen: str | None = None) -> Builder:
    chosen = chosen or os.environ.get("IMAGEKIT_DOCKER") or None
    tried: list[str] = []
    for cli in candidates(chosen):
        if not shutil.which(cli):
            tried.append(f"{cli}: not found or not executable")
            continue
        version = cli_version(cli)
        if has_buildx(cli):
            return Builder(cli, "buildx", str(version), buildx_driver(cli))
        if version is not None and version < Version("23"):
            return Builder(cli, "buildkit", str(version))
        tried.append(
            f"{cli}: Docker CLI {version} without the buildx plugin "
            "(CLIs 23+ build only through buildx)"
        )
    if not tried:
        tried.append("no docker CLI on PATH")
    raise EngineError("cannot build with BuildKit: " + "; ".join(tried) + ". To fix: " + HOW_TO_GET)


def daemon_hint() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return (
        f"cannot reach the Docker daemon at {host}. Start it (`sudo systemctl start docker`, "
        "or `sudo dockerd &` where there is no systemd), or set DOCKER_HOST to a running engine"
    )


def check_engine_version(version: str) -> None:
    try:
        ok = Version(version.split("+")[0].split("-")[0]) >= MIN_ENGINE
    except InvalidVersion:
        ok = True  # unknown scheme (a dev build): let BuildKit itself decide
    if not ok:
        raise EngineError(
            f"Docker engine {version} is too old: imagekit needs {MIN_ENGINE} or newer for "
            "BuildKit cache and secret mounts; upgrade the engine"
        )


CONTAINER_BUILDER = "docker buildx create --use --driver docker-container"


def unsupported(
    builder: Builder, cache_to: Sequence[str], compression: Compression, containerd_store: bool
) -> list[str]:
    """What this builder cannot do of what was asked, each with the option, the value and
    the fix. Docker 20.10's built-in BuildKit exports gzip layers into the engine and inline
    cache only; buildx's `docker` driver writes into the engine's image store too (unless
    that store is containerd's), so layer compression and cache export need another driver."""
    problems = []
    if builder.kind == "buildkit":
        what = (
            f"{builder.cli} {builder.cli_version} builds with Docker's built-in BuildKit "
            "(DOCKER_BUILDKIT=1, no buildx)"
        )
        fix = (
            "install the buildx plugin (https://docs.docker.com/go/buildx/) and "
            f"`{CONTAINER_BUILDER}`"
        )
    elif builder.driver == "docker" and not containerd_store:
        what = "the selected buildx builder uses the docker driver (the engine's own image store)"
        fix = f"`{CONTAINER_BUILDER}`, or turn on the engine's containerd image store"
    else:
        return []
    for spec in cache_to:
        # both write inline cache only (the built-in BuildKit through BUILDKIT_INLINE_CACHE)
        if not is_inline_cache(spec):
            problems.append(
                f"--cache-to {spec}: {what}, which exports inline cache only. Fix: {fix}; "
                "or --cache-to type=inline (read back with --cache-from IMAGE)"
            )
    if not compression.default:
        problems.append(
            f"{compression.as_options()}: {what}, which pushes gzip layers at the engine's "
            f"level only. Fix: {fix}; "
            "or use --compression gzip without a level (the default)"
        )
    return problems


# Daemons built with Go 1.27 or newer panic while exporting eStargz ("footer buffer = 48,
# not 51"): the stargz-snapshotter they vendor writes a gzip footer Go 1.27's gzip no
# longer pads (containerd/stargz-snapshotter#2330, fixed by #2333). Seen with Debian's
# docker.io 28.5.2 (go1.27.1); it takes the daemon and every build on it down.
ESTARGZ_SAFE_BELOW_GO = Version("1.27")
ALLOW_ESTARGZ = "IMAGEKIT_ALLOW_ESTARGZ"


def go_version(said: str) -> Version | None:
    """`docker version`'s GoVersion ("go1.27.1", "go1.24.9 X:nocoverageredesign") parsed."""
    match = re.match(r"go(\d+\.\d+(?:\.\d+)?)", said.strip())
    return Version(match.group(1)) if match else None


def estargz_crash(engine_version: str, go: str) -> list[str]:
    """The refusal of --compression estargz on a daemon whose eStargz export would crash it
    (empty where it is safe, where the Go version is unknown, or with the override set)."""
    built_with = go_version(go)
    if os.environ.get(ALLOW_ESTARGZ) == "1" or built_with is None:
        return []
    if built_with < ESTARGZ_SAFE_BELOW_GO:
        return []
    return [
        f"--compression estargz: Docker engine {engine_version} was built with {go.strip()}, "
        "whose eStargz export crashes the daemon (panic: footer buffer = 48, not 51; "
        "containerd/stargz-snapshotter#2330, fixed by #2333). Fix: use --compression zstd or "
        "gzip, or an engine built with Go older than 1.27 or carrying that fix; set "
        f"{ALLOW_ESTARGZ}=1 to try anyway"
    ]
