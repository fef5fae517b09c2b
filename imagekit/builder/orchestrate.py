"""`imagekit build` from typed options to reports: the selection checked, then a dry run
(dry_run.py) or the engine's support checked, the preflight and base bootstrap
(preflight.py), the builds (build_runner.py) and the summary. The engine is the caller's:
the CLI makes one DockerEngine per run, tests pass engine/fake.py's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from imagekit import terminal
from imagekit.builder import bases as base
from imagekit.builder.build_options import BuildOptions, BuildRun
from imagekit.builder.build_plan import PlannedBuild, plan
from imagekit.builder.build_report import CellReport, raise_for_failures, summary
from imagekit.builder.build_runner import Runner
from imagekit.builder.display import make_display
from imagekit.builder.dry_run import print_dry_run
from imagekit.builder.git_labels import build_labels
from imagekit.builder.inputs import Inputs
from imagekit.builder.preflight import bootstrap_missing, check_tag_suffix, check_target, preflight
from imagekit.builder.push_decisions import index_problem, resolve_compression
from imagekit.engine import tools
from imagekit.engine.interface import BuildEngine, BuildRegistryEngine
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell


def check_tools(engine: BuildEngine, options: BuildOptions) -> None:
    """oras, before anything builds (not after an hour): it attaches the SBOM, and a push
    without --load reads the pushed image's layers back from the registry."""
    if not options.push:
        return
    if options.attach_sbom:
        tools.find(tools.ORAS, "--push (it attaches the SBOM; --no-attach-sbom skips that)")
    if not options.load and engine.pushes_from_builder():
        tools.find(tools.ORAS, "--push without --load (the layer report is read back from "
                   "the registry; --load keeps the image here and reads it locally)")  # fmt: skip


def check_platforms(
    engine: BuildEngine, builds: Sequence[PlannedBuild], options: BuildOptions
) -> None:
    """What this engine cannot build of the planned platforms, refused before anything runs:
    a foreign platform without QEMU, or an index of several that it cannot push."""
    base.check_emulation(engine, dict.fromkeys(p for b in builds for p in b.request.platforms))
    several = next((b for b in builds if len(b.platforms) > 1), None)
    problem = index_problem(engine, several.platforms, options) if several else ""
    if problem:
        raise UsageError(problem)


def run_build(
    engine: BuildRegistryEngine,
    cells: Sequence[Cell],
    options: BuildOptions,
    resolved: Inputs,
    run: BuildRun,
) -> None:
    check_target(cells, options.target)
    check_tag_suffix(cells, options.tag_suffix)
    if run.dry_run:  # contacts nothing, so no git call for the revision label
        print_dry_run(cells, options, resolved)
        return
    options = resolve_compression(engine, options)
    # what this builder cannot do is refused before anything runs (exit 2)
    engine.check_support(options.cache_to, options.compression)
    check_tools(engine, options)
    builds = plan(cells, replace(options, labels=build_labels()), resolved)
    check_platforms(engine, builds, options)
    platforms = {b.cell.id: b.platforms for b in builds}
    unbuildable = preflight(engine, cells, run.bootstrap_base, options.keep_going, platforms)
    builds = [b for b in builds if b.cell.id not in unbuildable]
    if run.bootstrap_base:
        mirror = run.mirror or base.DEFAULT_MIRROR
        bootstrap_missing(engine, [b.cell for b in builds], mirror, platforms)
    reports = Runner(engine, options, resolved, make_display(run.progress)).run(builds)
    reports += [
        CellReport(cell=c.id, status="not-attempted", error=terminal.render(why))
        for c in cells
        if (why := unbuildable.get(c.id))
    ]
    terminal.echo([*summary(reports), f"reports: {Path(options.report_dir)}/<cell>/build.json"])
    raise_for_failures(reports)
