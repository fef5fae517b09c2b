"""Sizes in bytes, on the host: the matrix's `size_budget`, launch's /dev/shm quantity and the
build summary's figures. pydantic's ByteSize holds the unit table and does the arithmetic;
the grammars here only say which spellings imagekit accepts.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ByteSize, TypeAdapter, ValidationError

_BYTES = TypeAdapter(ByteSize)
# A unit is required and its case matters: ByteSize alone would also take "12g", "12gb" and
# "1.5" (one byte), each more likely a slip than a budget.
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*")
# A Kubernetes binary quantity as launch takes it: "64Gi" (the same grammar Slurm's side reads).
QUANTITY = re.compile(r"([1-9][0-9]*)(Mi|Gi|Ti)")


def parse_size(value: Any) -> int:
    """A positive size: a string with its unit ("12GB", "800MiB"; "1.5" alone is ambiguous),
    or a whole number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        if not isinstance(value, str) or not _SIZE.fullmatch(value):
            raise ValueError('expected a size with a unit, such as "12GB" or "800MiB"')
        size = _to_bytes(value.strip())
    if size <= 0:
        raise ValueError("a size budget must be more than 0")
    return size


def quantity_kib(quantity: str) -> int:
    """KiB in a Kubernetes quantity such as "64Gi" (what `df -k` reports on the node)."""
    if not QUANTITY.fullmatch(quantity):
        raise ValueError(f"{quantity!r} is not a whole number of Mi, Gi or Ti")
    return _to_bytes(quantity + "B") // 1024  # "64Gi" is ByteSize's "64GiB"


def gb(size: int) -> str:
    """Decimal gigabytes with two decimals, as registries and `docker images` count."""
    return f"{ByteSize(size).to('GB'):.2f} GB"


def _to_bytes(text: str) -> int:
    try:
        return int(_BYTES.validate_python(text))
    except ValidationError as exc:  # the grammars above let only ByteSize's own units through
        raise ValueError(exc.errors()[0]["msg"]) from None
