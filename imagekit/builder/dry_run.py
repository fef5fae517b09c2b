"""`imagekit build --dry-run`: the CA bundle and each planned build's commands, printed;
nothing is contacted.

How a push goes depends on the engine (whether BuildKit pushes the layers, whether the
image can carry a provenance attestation), which a dry run does not ask. So it pictures
each kind of engine, asks it the run's own questions (push_decisions.py's pushes_straight,
pushed_request, engine_pushes, sbom_status, resolve_compression, index_problem;
DockerEngine's own build and push arguments) and prints what each would do, the kinds that
would do the same under one heading. Nothing it prints is decided anywhere else.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from imagekit import terminal
from imagekit.builder.build_options import BuildOptions
from imagekit.builder.build_plan import PlannedBuild, plan
from imagekit.builder.inputs import Inputs
from imagekit.builder.push_decisions import (
    engine_pushes,
    index_problem,
    provenance_state,
    pushed_request,
    pushes_straight,
    resolve_compression,
    sbom_status,
)
from imagekit.engine.discover import Builder, unsupported
from imagekit.engine.docker import DockerEngine
from imagekit.engine.interface import BuildRequest, Compression, build_push_flags
from imagekit.matrix.cells import Cell
from imagekit.supply.sbom import MEDIA_TYPE

# the engine's scratch files, which a real run names in a temporary folder
IIDFILE, METADATA = Path("<iidfile>"), Path("<metadata>")


class PicturedEngine(DockerEngine):
    """DockerEngine with its builder and image store given instead of discovered: what it
    says of a build and a push is the real engine's own code, and asking contacts nothing."""

    def __init__(self, where: str, builder: Builder, containerd_store: bool) -> None:
        super().__init__()
        self.where = where
        self._builder = builder
        self._containerd_store = containerd_store


def _buildx(driver: str) -> Builder:
    return Builder(cli="docker", kind="buildx", cli_version="", driver=driver)


ENGINES = (
    PicturedEngine(
        "buildx with a builder of its own (docker-container, remote)",
        _buildx("docker-container"),
        containerd_store=False,
    ),
    PicturedEngine("buildx's docker driver on the containerd image store", _buildx("docker"), True),
    PicturedEngine("buildx's docker driver on the classic image store", _buildx("docker"), False),
    PicturedEngine(
        "Docker 20.10's built-in BuildKit (no buildx)",
        Builder(cli="docker", kind="buildkit", cli_version=""),
        containerd_store=False,
    ),
)


def print_dry_run(cells: Sequence[Cell], options: BuildOptions, resolved: Inputs) -> None:
    lines = [f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})"]
    for b in plan(cells, options, resolved):
        lines.append(f"{b.cell.id}:")
        if options.push:
            lines += by_engine(b.cell, options, resolved)
        else:
            lines.append(f"  {b.command()}")
    terminal.echo(lines)


def by_engine(cell: Cell, options: BuildOptions, resolved: Inputs) -> list[str]:
    """Each engine kind's lines; kinds that would do the same share a heading."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for engine in ENGINES:
        groups.setdefault(tuple(engine_lines(cell, options, resolved, engine)), []).append(
            engine.where
        )
    if len(groups) == 1:
        return [f"  {line}" for line in next(iter(groups))]
    out = []
    for lines, where in groups.items():
        out += [f"  on {'; '.join(where)}:", *(f"    {line}" for line in lines)]
    return out


def engine_lines(
    cell: Cell, options: BuildOptions, resolved: Inputs, engine: PicturedEngine
) -> list[str]:
    """What a push of `cell` does on `engine`, decided as the run decides it."""
    options = resolve_compression(engine, options)
    build = plan([cell], options, resolved)[0]
    refused = refusals(engine, build, options)
    if refused:
        return [f"refused before anything builds: {problem}" for problem in refused]
    compression = options.compression
    request = pushed_request(build.request, options, engine)
    lines = [f"compression: {compression}"]
    if pushes_straight(options, engine):
        flags = build_push_flags(request, build.tags, compression)
        lines.append(
            "build and push in one, nothing loaded: "
            + shlex.join(engine._buildx_build(METADATA, flags))
        )
    else:
        built = shlex.join(engine.build_args(build.request, IIDFILE, METADATA))
        lines.append(f"build: {built}   # then tag {', '.join(build.tags)}")
        lines.append(f"push: {push_command(engine, build.tags, request, compression)}")
    asked = provenance_state(options.provenance, request.provenance)
    lines.append(f"provenance: {PROVENANCE[asked]}")
    lines.append(f"sbom: {sbom_line(sbom_status(options, build.request.target))}")
    return lines


PROVENANCE = {
    "attached": "attached (BuildKit's SLSA provenance, mode=min)",
    "off": "off (--no-provenance)",
    "unsupported": "none: this engine cannot hold the attestation (the report says unsupported)",
}


def sbom_line(status: str) -> str:
    if status == "attached":
        return f"oras attach --artifact-type {MEDIA_TYPE} <pushed digest>"
    if status == "off":
        return "off (--no-attach-sbom)"
    return "none: only the runtime stage writes one (the report says not-in-stage)"


def push_command(
    engine: PicturedEngine, tags: Sequence[str], request: BuildRequest, compression: Compression
) -> str:
    """The loaded image's push: the engine's `docker push`, or BuildKit's exporter again."""
    if engine_pushes(engine, compression, request.provenance):
        return "; ".join(shlex.join([engine.builder.cli, "push", tag]) for tag in tags)
    return shlex.join(engine.push_args(request, tags, compression, METADATA))


def refusals(engine: PicturedEngine, build: PlannedBuild, options: BuildOptions) -> list[str]:
    """What the real run refuses on this engine before it builds anything (exit 2)."""
    problems = unsupported(
        engine.builder, options.cache_to, options.compression, engine.containerd_store
    )
    if len(build.platforms) > 1:
        problem = index_problem(engine, build.platforms, options, who=lambda: "this engine")
        problems += [problem] if problem else []
    return problems
