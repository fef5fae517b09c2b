"""`imagekit build`'s options, turned into typed objects: BuildOptions (what is built and how)
and BuildRun (how this run goes); the run itself is imagekit/builder/orchestrate.py's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from imagekit.builder.build_options import BuildOptions, BuildRun
from imagekit.engine.interface import MAX_LEVEL, Compression
from imagekit.errors import UsageError
from imagekit.urls import refuse_credentials


def compression_from(kind: str, level: int | None) -> Compression:
    """--compression and --compression-level, checked against BuildKit's ranges."""
    if kind == "auto":
        if level is not None:
            raise UsageError(
                f"--compression-level {level}: a level needs a compression; add "
                "--compression zstd or --compression gzip"
            )
        return Compression("auto")
    if level is not None and not 0 <= level <= MAX_LEVEL[kind]:
        raise UsageError(
            f"--compression-level {level}: {kind} takes 0-{MAX_LEVEL[kind]} "
            "(zstd 0-22, gzip and estargz 0-9); pick a level in range or leave it out"
        )
    return Compression(kind, level)


def options_from(kwargs: dict[str, Any]) -> BuildOptions:
    torch_index = refuse_credentials(
        kwargs["torch_index"], "--torch-index", "a build argument (build history, provenance)"
    )
    refuse_credentials(kwargs["mirror"], "--mirror", "the base image's apt sources")
    compression = compression_from(kwargs["compression"], kwargs["compression_level"])
    if not (compression.default or compression.auto) and not kwargs["push"]:
        raise UsageError(
            f"{compression.as_options()}: layers are compressed when they are pushed; "
            "add --push (the local image store keeps layers uncompressed)"
        )
    return BuildOptions(
        target=kwargs["target"],
        push=kwargs["push"],
        jobs=kwargs["jobs"],
        keep_going=kwargs["keep_going"],
        no_cache=kwargs["no_cache"],
        network="" if kwargs["network"] == "default" else kwargs["network"],
        cache_from=tuple(kwargs["cache_from"]),
        cache_to=tuple(kwargs["cache_to"]),
        tag_suffix=kwargs["tag_suffix"],
        torch_index="" if torch_index == "none" else torch_index,
        report_dir=kwargs["report_dir"],
        compression=compression,
        provenance=kwargs["provenance"],
        attach_sbom=kwargs["attach_sbom"],
        load=kwargs["load"],
        platforms=kwargs["platforms"] or (),
    )


def build_run_from(values: Mapping[str, Any]) -> BuildRun:
    """BuildRun's fields are named as their options are (--dry-run is dry_run, ...)."""
    return BuildRun(**{f.name: values[f.name] for f in fields(BuildRun)})
