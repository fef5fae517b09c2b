"""`imagekit build`, from parsed options to reports and an exit code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from imagekit import base, inputs
from imagekit.build import (
    BuildOptions,
    Runner,
    build_labels,
    plan,
    raise_for_failures,
    summary,
)
from imagekit.cells import Cell
from imagekit.display import make_display
from imagekit.engine.docker import DockerEngine
from imagekit.errors import UsageError


def options_from(kwargs: dict[str, Any]) -> BuildOptions:
    torch_index = kwargs["torch_index"]
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


def run_build(cells: Sequence[Cell], kwargs: dict[str, Any]) -> None:
    options = options_from(kwargs)
    check_target(cells, options.target)
    # Every path is checked before anything is built or contacted.
    resolved = inputs.resolve(kwargs["ca_bundle"], kwargs["index_url"], kwargs["wheelhouse"])
    if kwargs["dry_run"]:  # contacts nothing, so no git call for the revision label
        click.echo(f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})")
        for b in plan(cells, options, resolved):
            click.echo(f"{b.cell.id}:\n  {b.command()}")
        return
    builds = plan(cells, replace(options, labels=build_labels()), resolved)
    engine = DockerEngine(kwargs["docker_cli"])
    if kwargs["bootstrap_base"]:
        bootstrap_missing(engine, cells, kwargs["mirror"] or base.DEFAULT_MIRROR)
    reports = Runner(engine, options, resolved, make_display(kwargs["progress"])).run(builds)
    click.echo(summary(reports))
    click.echo(f"reports: {Path(options.report_dir)}/<cell>/build.json")
    raise_for_failures(reports)


def bootstrap_missing(engine: DockerEngine, cells: Sequence[Cell], mirror: str) -> None:
    from imagekit import compat

    suites = {o.image: o.suite for o in compat.load().os.values() if o.suite}
    for ref in base.bases_of(cells):
        if ref in suites and engine.inspect(ref) is None:
            click.echo(f"bootstrapping {ref} from {mirror} (debootstrap {suites[ref]})")
            base.bootstrap(engine.builder.cli, str(suites[ref]), ref, mirror)
