"""`imagekit build --dry-run`: the CA bundle and each planned build's command (and push), printed;
nothing is contacted."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit import terminal
from imagekit.builder.inputs import Inputs
from imagekit.builder.session import BuildOptions, PlannedBuild, plan
from imagekit.engine.interface import image_output
from imagekit.matrix.cells import Cell
from imagekit.supply.sbom import MEDIA_TYPE


def print_dry_run(cells: Sequence[Cell], options: BuildOptions, resolved: Inputs) -> None:
    lines = [f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})"]
    for b in plan(cells, options, resolved):
        lines += [f"{b.cell.id}:", f"  {b.command()}"]
        if options.push:
            lines += push_lines(b, options)
            lines += supply_lines(options)
    terminal.echo(lines)


def push_lines(build: PlannedBuild, options: BuildOptions) -> list[str]:
    """How the push goes; which way depends on the engine, which a dry run does not ask."""
    asked = options.compression
    lines = []
    if asked.auto:
        lines.append("  compression: auto (zstd where BuildKit pushes the layers, else gzip)")
    builder, engine = asked.for_engine(True), asked.for_engine(False)
    if options.load:
        return [*lines, f"  push: {build.push_command(builder)}"]
    return [
        *lines,
        "  build and push in one, nothing loaded (where BuildKit pushes): "
        + build.build_push_command(builder),
        "  elsewhere (Docker 20.10, buildx's docker driver on the classic store): the build "
        f"above, then {build.push_command(engine)}",
    ]


def supply_lines(options: BuildOptions) -> list[str]:
    """What goes with the push: the engine decides provenance, which a dry run cannot ask."""
    lines = []
    if options.provenance:
        output = image_output(options.compression.for_engine(True), push=True)
        lines.append(
            f"  provenance: mode=min, pushed by `docker buildx build --output {output}` "
            "where the engine can hold it"
        )
    if options.attach_sbom:
        lines.append(f"  sbom: oras attach --artifact-type {MEDIA_TYPE} <pushed digest>")
    return lines
