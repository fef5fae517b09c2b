"""Host-side text tables: aligned by rich, plain text, one line per row, values escaped."""

from __future__ import annotations

from imagekit.text_table import render_table


def test_columns_align_numbers_right_and_lines_carry_no_trailing_space() -> None:
    text = render_table(("CELL", "TIME"), [("a", "5s"), ("longer-cell", "312s")], right=("TIME",))
    assert text == [
        "CELL         TIME",
        "a              5s",
        "longer-cell  312s",
    ]


def test_a_long_row_stays_one_line_and_markup_is_text() -> None:
    long = "REFUSED: " + "x" * 400 + " [bold]not markup[/bold]"
    text = render_table(("torch", "verdict"), [("2.7.1", long)])
    assert text[1] == f"2.7.1  {long}"


def test_plain_and_a_value_cannot_add_a_row_or_a_style() -> None:
    text = render_table(("A", "B"), [("x\n::notice::y", "\x1b[31mred\r")])
    assert text == ["A               B", "x\\n::notice::y  \\x1b[31mred\\r"]
