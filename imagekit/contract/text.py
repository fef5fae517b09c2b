"""Text shown to people: every character that could end a line or move the cursor, escaped.

Standard library only: the host's output (imagekit/terminal.py) and the in-image self-check's
report use the same rule.
"""

from __future__ import annotations

import re

# Not printable, by Python's own definition (str.isprintable): the C0 and C1 controls and
# DEL, the format characters (bidirectional overrides, zero-width joiners), the line and
# paragraph separators, surrogates and unassigned code points. A space is printable.
_FAST_OK = re.compile(r"[ -~]*")  # plain printable ASCII: nothing to do


def escape(text: str) -> str:
    """`text` with every unprintable character written as its Python escape (a newline as
    `\\n`, ESC as `\\x1b`, U+202E as `\\u202e`). Idempotent: its result is printable, so
    escaping it again changes nothing; a backslash already in `text` is kept as it is."""
    if _FAST_OK.fullmatch(text) or text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
