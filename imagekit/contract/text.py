"""Text shown to people: every character that could end a line or move the cursor, escaped.

Standard library only: the host's output (imagekit/terminal.py) and the in-image self-check's
report use the same rule.
"""

from __future__ import annotations


def shown(line: str) -> str:
    """One line as it may be shown: escaped, and with no CI command in it. GitHub Actions
    reads `::name::` at a line's start (leading spaces trimmed) and the older `##[name]`
    anywhere in a line: a value at the start of a line (a path such as
    `::notice::x/images.lock`) shows its first colon as `\\x3a`, and `##[` as `#\\x23[`.
    Idempotent, as `escape` is."""
    line = escape(line)
    body = line.lstrip()
    if body.startswith("::"):
        line = line[: len(line) - len(body)] + "\\x3a" + body[1:]
    return line.replace("##[", "#\\x23[")


# Not printable, by Python's own definition (str.isprintable): the C0 and C1 controls and
# DEL, the format characters (bidirectional overrides, zero-width joiners), the line and
# paragraph separators, surrogates and unassigned code points. A space is printable.
def escape(text: str) -> str:
    """`text` with every unprintable character written as its Python escape (a newline as
    `\\n`, ESC as `\\x1b`, U+202E as `\\u202e`). Idempotent: its result is printable, so
    escaping it again changes nothing; a backslash already in `text` is kept as it is."""
    if text.isprintable():  # the usual line: one pass in C, nothing to do
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
