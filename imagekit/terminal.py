"""The one place imagekit writes text for people, on stdout and stderr.

Text is a line (a `str`) or several (a sequence of `str`). A line is written with every
unprintable character escaped (contract/text.py): a newline inside it shows as `\\n`, so no
value (a path, a matrix value, a label read from an image, a container's log line) can
start a line of its own (a CI workflow command such as `::notice::`) or move the cursor; a
value that begins a line shows `::` as `\\x3a:`, and `##[` (GitHub's older command form,
read anywhere in a line) as `#\\x23[`.
imagekit's own line breaks are the breaks between the lines it passes; there is no other
way to break one. Lines that come from elsewhere whole (a container's or BuildKit's log)
are shown behind a gutter (`foreign`), so none of them starts a line of the output either.

A test (tests/test_hostile_output.py) holds every other module to writing through here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from imagekit.contract.text import escape, shown

Text = str | Sequence[str]
GUTTER = "  | "


def lines(text: Text) -> list[str]:
    """`text` as its lines: a `str` is one line, whatever it holds."""
    return [text] if isinstance(text, str) else list(text)


def render(text: Text) -> str:
    """The lines of `text`, each as it may be shown (contract/text.py `shown`: escaped, no
    CI command), joined by newlines (no trailing one)."""
    return "\n".join(shown(line) for line in lines(text))


def echo(text: Text = "", err: bool = False) -> None:
    """Write `text`, then a newline, to stdout (or stderr), escaped line by line."""
    _write(render(text), err)


def command(line: str) -> None:
    """Write one GitHub Actions workflow command to stdout, as it is: its caller escapes
    its message and properties by the toolkit's rules (errors.Problem.annotation)."""
    _write(escape(line), err=False)


def _write(text: str, err: bool) -> None:
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, "encoding", None) or "utf-8"
    # a terminal or a pipe that cannot show a character gets its escape, not a crash
    stream.write((text + "\n").encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def rich_text(text: Text) -> Any:
    """`text` escaped, as a rich Text: for a live display, where rich draws (its markup is
    not read either: `[bold]` in a value stays as written)."""
    from rich.text import Text as RichText

    return RichText(render(text))


def split(block: str) -> list[str]:
    """A block of text from elsewhere (a log, a command's output) as its lines. Only `\\n`
    breaks it: a carriage return or another separator in a line stays in it, escaped."""
    return block.rstrip("\n").split("\n") if block else []


def foreign(block: str | Iterable[str]) -> list[str]:
    """Lines that come from a container, the engine or another program, each behind the
    GUTTER: a line such as `::error::x` in a container's log is shown, never obeyed."""
    found = (
        split(block)
        if isinstance(block, str)
        else [part for line in block for part in split(line) or [""]]
    )
    return [f"{GUTTER}{line}" for line in found]
