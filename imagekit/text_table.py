"""Host-side text tables (`imagekit list`, `compat show`, the build summary), laid out by rich.

The text is returned, not printed: callers echo it, tests read it. Plain text unless stdout
is a terminal (then the header is bold); columns never wrap, so a line stays one row for
grep and for the tests that split it. The in-image self-check has only the standard library
and formats its own report.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table

Justify = Literal["left", "right"]
_WIDE = 10_000  # no terminal width: a long row stays one line


def render_table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Sequence[str] = (),
) -> str:
    """`header` and `rows` as aligned columns two spaces apart; columns named in `right`
    are right-justified (numbers)."""
    tty = sys.stdout.isatty()
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, 2, 0, 0),
        header_style="bold" if tty else "",
        show_edge=False,
    )
    for name in header:
        justify: Justify = "right" if name in right else "left"
        table.add_column(name, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    console = Console(
        file=out,
        width=_WIDE,
        force_terminal=tty,
        color_system="standard" if tty else None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
