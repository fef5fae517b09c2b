"""The push's decisions, one function each, asked by the run and by the dry run.

The run (build_runner.py, orchestrate.py) asks them of the real engine; the dry run
(dry_run.py) of the engines it pictures, so nothing it prints is decided anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from imagekit.builder.build_options import BuildOptions
from imagekit.engine.interface import BuildEngine, BuildRequest, Compression
from imagekit.supply import sbom


class PushEngine(Protocol):
    """What the decisions ask of an engine (the real one, or one the dry run pictures)."""

    def pushes_from_builder(self) -> bool: ...
    def attaches_provenance(self) -> bool: ...
    def pushes_as_stored(self, compression: Compression) -> bool: ...


def pushes_straight(options: BuildOptions, engine: PushEngine) -> bool:
    """--push without --load, where BuildKit pushes: one build, nothing loaded."""
    return options.push and not options.load and engine.pushes_from_builder()


def pushed_request(
    request: BuildRequest, options: BuildOptions, engine: PushEngine
) -> BuildRequest:
    """The request as pushed: BuildKit's provenance where asked and the engine can hold it."""
    return replace(request, provenance=options.provenance and engine.attaches_provenance())


def engine_pushes(engine: PushEngine, compression: Compression, provenance: bool) -> bool:
    """Whether the engine's own `docker push` sends the loaded image; else BuildKit exports
    it again and pushes. The engine's push writes no attestation: provenance needs BuildKit."""
    return engine.pushes_as_stored(compression) and not provenance


def sbom_status(options: BuildOptions, target: str) -> str:
    """Whether the pushed image's SBOM is attached: only the runtime stage writes one."""
    if not options.attach_sbom:
        return "off"
    return "attached" if sbom.in_stage(target) else "not-in-stage"


def provenance_state(asked: bool, attached: bool) -> str:
    if attached:
        return "attached"
    return "unsupported" if asked else "off"


def resolve_compression(engine: BuildEngine, options: BuildOptions) -> BuildOptions:
    """--compression auto: zstd where BuildKit writes the pushed layers, else gzip."""
    if not options.compression.auto:
        return options
    chosen = options.compression.for_engine(options.push and engine.pushes_from_builder())
    return replace(options, compression=chosen)


def index_problem(
    engine: BuildEngine,
    platforms: Sequence[str],
    options: BuildOptions,
    who: Callable[[], str] | None = None,
) -> str:
    """Why `platforms`, several, cannot be built as one index with these options on this
    engine ("" where they can). `who` names the engine (default: its describe(), which asks
    the daemon; a dry run, which contacts nothing, names it itself)."""
    asked = f"--platform {','.join(platforms)}"
    if not options.push or options.load:
        return (
            f"{asked}: an image of several platforms is one index, pushed to a registry, "
            "and each platform's report is read back from there: add --push (without "
            "--load); to build a local image, name one platform (e.g. --platform linux/arm64)"
        )
    if not (engine.pushes_from_builder() and engine.holds_multi_platform()):
        return (
            f"{asked}: {(who or engine.describe)()} cannot build and push an image of several "
            "platforms (Docker 20.10, or buildx's docker driver on the classic image store). "
            'Fix: turn on the containerd image store (dockerd\'s {"features": '
            '{"containerd-snapshotter": true}}), or use a docker-container builder '
            "(docker buildx create --driver docker-container --use)"
        )
    return ""
