"""`imagekit build --dry-run`: the CA bundle and each planned build's command (and push), printed;
nothing is contacted."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit import terminal
from imagekit.builder.inputs import Inputs
from imagekit.builder.session import BuildOptions, plan
from imagekit.engine.interface import image_output
from imagekit.matrix.cells import Cell
from imagekit.supply.sbom import MEDIA_TYPE


def print_dry_run(cells: Sequence[Cell], options: BuildOptions, resolved: Inputs) -> None:
    lines = [f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})"]
    for b in plan(cells, options, resolved):
        lines += [f"{b.cell.id}:", f"  {b.command()}"]
        if options.push:
            lines.append(f"  push: {b.push_command(options.compression)}")
            lines += supply_lines(options)
    terminal.echo(lines)


def supply_lines(options: BuildOptions) -> list[str]:
    """What goes with the push: the engine decides provenance, which a dry run cannot ask."""
    lines = []
    if options.provenance:
        output = image_output(options.compression, push=True)
        lines.append(
            f"  provenance: mode=min, pushed by `docker buildx build --output {output}` "
            "where the engine can hold it"
        )
    if options.attach_sbom:
        lines.append(f"  sbom: oras attach --artifact-type {MEDIA_TYPE} <pushed digest>")
    return lines
