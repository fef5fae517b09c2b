"""Host-side text tables: aligned by rich, plain text off a terminal, one line per row."""

from __future__ import annotations

import io

import pytest

from imagekit.text_table import render_table


def test_columns_align_numbers_right_and_lines_carry_no_trailing_space() -> None:
    text = render_table(("CELL", "TIME"), [("a", "5s"), ("longer-cell", "312s")], right=("TIME",))
    assert text.splitlines() == [
        "CELL         TIME",
        "a              5s",
        "longer-cell  312s",
    ]


def test_a_long_row_stays_one_line_and_markup_is_text() -> None:
    long = "REFUSED: " + "x" * 400 + " [bold]not markup[/bold]"
    text = render_table(("torch", "verdict"), [("2.7.1", long)])
    assert text.splitlines()[1] == f"2.7.1  {long}"


def test_plain_off_a_terminal_bold_header_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "\x1b[" not in render_table(("A",), [("x",)])

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[1mA" in render_table(("A",), [("x",)])
