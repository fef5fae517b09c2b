"""`imagekit build --dry-run`: the CA bundle and each planned build's command (and push), printed;
nothing is contacted."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit import terminal
from imagekit.builder.inputs import Inputs
from imagekit.builder.session import BuildOptions, plan
from imagekit.matrix.cells import Cell


def print_dry_run(cells: Sequence[Cell], options: BuildOptions, resolved: Inputs) -> None:
    lines = [f"CA bundle: {resolved.ca_bundle or 'none'} (from {resolved.ca_source})"]
    for b in plan(cells, options, resolved):
        lines += [f"{b.cell.id}:", f"  {b.command()}"]
        if options.push:
            lines.append(f"  push: {b.push_command(options.compression)}")
    terminal.echo(lines)
