"""Host-side text tables (`imagekit list`, `compat show`, the build summary), laid out by rich.

The lines are returned, not printed: callers echo them (imagekit/terminal.py), tests read
them. Plain text, without styles (the one writer escapes every control character, an ANSI
style's too); columns never wrap, so a line stays one row for grep and for the tests that
split it. Each cell is escaped before it is laid out: a newline in a value would otherwise
become a row of its own. The in-image self-check has only the standard library
and formats its own report.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table

from imagekit.contract.text import escape

Justify = Literal["left", "right"]
_WIDE = 10_000  # no terminal width: a long row stays one line


def render_table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Sequence[str] = (),
) -> list[str]:
    """`header` and `rows` as aligned columns two spaces apart; columns named in `right`
    are right-justified (numbers)."""
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="", show_edge=False)
    for name in header:
        justify: Justify = "right" if name in right else "left"
        table.add_column(name, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    out = io.StringIO()
    console = Console(
        file=out,
        width=_WIDE,
        force_terminal=False,
        color_system=None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(table)
    return [line.rstrip() for line in out.getvalue().split("\n")[:-1]]
