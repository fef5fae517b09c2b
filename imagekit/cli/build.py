"""`imagekit build`, from parsed options to reports and an exit code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from imagekit.build import bases as base
from imagekit.build.display import make_display
from imagekit.build.inputs import Inputs
from imagekit.build.session import (
    BuildOptions,
    CellReport,
    Runner,
    build_labels,
    plan,
    raise_for_failures,
    summary,
)
from imagekit.contract.refs import parse
from imagekit.engine.docker import DockerEngine
from imagekit.engine.interface import MAX_LEVEL, Compression, Engine
from imagekit.errors import BuildError, UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.ref_checks import check_tag
from imagekit.urls import refuse_credentials


def compression_from(kind: str, level: int | None) -> Compression:
    """--compression and --compression-level, checked against BuildKit's ranges."""
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
    if not compression.default and not kwargs["push"]:
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
    )


def check_target(cells: Sequence[Cell], target: str) -> None:
    """Only cells that build pip packages with `build_apt` have a `packages` stage (the rest
    install them in the runtime); say so before building any."""
    without = [c.id for c in cells if target == "packages" and c.pip_stage != "packages"]
    if without:
        raise UsageError(
            f"--target packages: {', '.join(without)} has no packages stage (only cells with "
            "both `pip:` and `build_apt:` build their pip packages there; the others install "
            "them in the runtime stage); use --target builder or runtime, or select only "
            "cells with `build_apt:`"
        )


@dataclass(frozen=True)
class BuildRun:
    """How this run goes, beside what it builds: a dry run, base bootstrapping, the CLI."""

    dry_run: bool = False
    bootstrap_base: bool = False
    mirror: str | None = None
    docker_cli: str | None = None
    progress: str = "auto"

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> BuildRun:
        return cls(
            dry_run=values["dry_run"],
            bootstrap_base=values["bootstrap_base"],
            mirror=values["mirror"],
            docker_cli=values["docker_cli"],
            progress=values["progress"],
        )


def check_tag_suffix(cells: Sequence[Cell], suffix: str) -> None:
    """Every tag with the suffix must still be a Docker tag (at most 128 characters)."""
    for cell in cells:
        for ref in cell.tags:
            try:
                check_tag(f"{parse(ref).tag}{suffix}")
            except ValueError as exc:
                raise UsageError(
                    f"--tag-suffix {suffix!r}: {cell.id}'s tag {ref} with it: {exc}; "
                    "use a shorter suffix"
                ) from None


def run_build(
    cells: Sequence[Cell], options: BuildOptions, resolved: Inputs, run: BuildRun
) -> None:
    check_target(cells, options.target)
    check_tag_suffix(cells, options.tag_suffix)
    if run.dry_run:  # contacts nothing, so no git call for the revision label
        click.echo(f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})")
        for b in plan(cells, options, resolved):
            click.echo(f"{b.cell.id}:\n  {b.command()}")
            if options.push:
                click.echo(f"  push: {b.push_command(options.compression)}")
        return
    engine = DockerEngine(run.docker_cli)
    # what this builder cannot do is refused before anything runs (exit 2)
    engine.check_support(options.cache_to, options.compression)
    builds = plan(cells, replace(options, labels=build_labels()), resolved)
    unbuildable = preflight(engine, cells, run.bootstrap_base, options.keep_going)
    builds = [b for b in builds if b.cell.id not in unbuildable]
    if run.bootstrap_base:
        bootstrap_missing(engine, [b.cell for b in builds], run.mirror or base.DEFAULT_MIRROR)
    reports = Runner(engine, options, resolved, make_display(run.progress)).run(builds)
    reports += [
        CellReport(cell=c.id, status="not-attempted", error=why)
        for c in cells
        if (why := unbuildable.get(c.id))
    ]
    click.echo(summary(reports))
    click.echo(f"reports: {Path(options.report_dir)}/<cell>/build.json")
    raise_for_failures(reports)


def preflight(
    engine: Engine, cells: Sequence[Cell], bootstrap: bool, keep_going: bool
) -> dict[str, str]:
    """Before building anything: which cells' base images cannot be had here, and what would
    make them buildable. Without --keep-going that stops the run; with it, the other cells
    build and these are reported as not attempted."""
    suites = base.bootstrappable()
    can_bootstrap = set(suites) if bootstrap else set()
    missing = base.unavailable_bases(engine, base.bases_of(cells), can_bootstrap)
    unbuildable = {}
    for cell in cells:
        refs = [base.unpinned(r) for r in (cell.runtime_image, cell.builder_image) if r]
        lacking = [r for r in refs if r in missing]
        if lacking:
            unbuildable[cell.id] = "; ".join(
                f"base {r}: {missing[r]}. Fix: {base.fixes_for(r, suites)}" for r in lacking
            )
    if unbuildable and not keep_going:
        raise BuildError(_unbuildable_message(cells, unbuildable, missing, suites))
    return unbuildable


def _unbuildable_message(
    cells: Sequence[Cell], unbuildable: dict[str, str], missing: dict[str, str], suites: dict
) -> str:  # type: ignore[type-arg]
    lines = [
        f"{len(unbuildable)} of {len(cells)} cells cannot be built here; nothing was built.",
        "Base images this engine does not have and cannot get:",
        *(f"  {ref}: {why}" for ref, why in sorted(missing.items())),
        "To make them available: "
        + "; ".join(dict.fromkeys(base.fixes_for(ref, suites) for ref in sorted(missing))),
        f"Cells that need them: {', '.join(unbuildable)}",
    ]
    buildable = [c.id for c in cells if c.id not in unbuildable]
    if buildable:
        lines.append(f"Buildable here: {', '.join(buildable)}")
    lines.append("(--keep-going builds the others and reports these as not attempted)")
    return "\n".join(lines)


def bootstrap_missing(engine: DockerEngine, cells: Sequence[Cell], mirror: str) -> None:
    suites = base.bootstrappable()
    for ref in base.bases_of(cells):
        if ref in suites and engine.inspect(ref) is None:
            click.echo(f"bootstrapping {ref} from {mirror} (debootstrap {suites[ref]})")
            base.bootstrap(engine, suites[ref], ref, mirror)
