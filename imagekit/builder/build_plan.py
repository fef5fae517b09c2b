"""The planned builds of `imagekit build`: each cell's BuildRequest, tags and platforms.

plan() is pure (testable without Docker, printed by --dry-run).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from imagekit import paths
from imagekit.builder.build_options import BuildOptions
from imagekit.builder.inputs import Inputs
from imagekit.engine.emulation import host_platform
from imagekit.engine.interface import (
    BuildRequest,
    Compression,
    build_flags,
    build_push_flags,
    push_flags,
)
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell
from imagekit.platforms import AMD64

HOST = host_platform() or AMD64  # what a build without --platform makes


@dataclass(frozen=True)
class PlannedBuild:
    cell: Cell
    request: BuildRequest
    tags: tuple[str, ...]

    @property
    def platforms(self) -> tuple[str, ...]:
        """What this build makes: the request's platforms, or the engine's own."""
        return self.request.platforms or (HOST,)

    def command(self, docker: Sequence[str] = ("docker", "build")) -> str:
        flags = build_flags(self.request)
        return shlex.join([*docker, *flags]) + f"   # then tag {', '.join(self.tags)}"

    def build_push_command(self, compression: Compression) -> str:
        """The one build that BuildKit pushes as it exports (--push without --load)."""
        flags = build_push_flags(self.request, self.tags, compression)
        return shlex.join(["docker", "buildx", "build", *flags])

    def push_command(self, compression: Compression) -> str:
        """How the tags are pushed: the engine's push (gzip), or BuildKit's exporter."""
        if compression.default:
            return "; ".join(shlex.join(["docker", "push", tag]) for tag in self.tags)
        # the same request again, fully cached, as DockerEngine.push_args runs it
        return shlex.join(
            ["docker", "buildx", "build", *push_flags(self.request, self.tags, compression)]
        )


def plan(cells: Sequence[Cell], options: BuildOptions, inputs: Inputs) -> list[PlannedBuild]:
    builds = []
    for cell in cells:
        ctx = paths.context_dir(options.work_dir, cell.id)
        # No inline cache unless asked (--cache-to type=inline): BuildKit writes its records
        # into the image config in an unstable order (moby/buildkit#1876, #3188), which gave
        # a fully cached rebuild a new image ID.
        args: list[tuple[str, str]] = []
        if options.torch_index is not None:
            args.append(("TORCH_INDEX_URL", options.torch_index))
            if cell.arm64_torch_index is not None:  # the Dockerfile has arm64's own
                args.append(("TORCH_INDEX_URL_ARM64", options.torch_index))
        platforms = platforms_for(cell, options.platforms)
        secrets = [("ca", inputs.ca_bundle)] if inputs.ca_bundle else []
        if inputs.index_url:
            secrets.append(("index", options.work_dir / "secrets" / "index"))
        request = BuildRequest(
            context=ctx,
            dockerfile=paths.work_dockerfile(options.work_dir, cell.id),
            target=options.target,
            build_args=tuple(args),
            secrets=tuple(secrets),
            labels=options.labels,
            cache_from=options.cache_from,
            cache_to=options.cache_to,
            no_cache=options.no_cache,
            network=options.network,
            push_compression=options.compression if options.push else None,
            platforms=() if platforms == (HOST,) else platforms,
        )
        tags = tuple(t + options.tag_suffix for t in cell.tags)
        builds.append(PlannedBuild(cell=cell, request=request, tags=tags))
    return builds


def platforms_for(cell: Cell, asked: tuple[str, ...]) -> tuple[str, ...]:
    """The platforms to build of a cell: those asked (each one the cell's), or this host's
    where the cell has it, else the cell's first."""
    if not asked:
        return (HOST,) if HOST in cell.platforms else cell.platforms[:1]
    missing = [p for p in asked if p not in cell.platforms]
    if missing:
        raise UsageError(
            f"--platform {','.join(asked)}: cell {cell.id} ({cell.origin}) is built for "
            f"{', '.join(cell.platforms)}; add {', '.join(missing)} to its `platform:` "
            f"(`imagekit compat show --platform {missing[0]}` says what upstream publishes), "
            "or select cells that have it"
        )
    return asked
