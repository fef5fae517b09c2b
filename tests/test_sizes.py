"""Sizes: the spellings imagekit accepts, converted by pydantic's ByteSize."""

from __future__ import annotations

import pytest

from imagekit.sizes import gb, parse_size, quantity_kib


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("12GB", 12 * 10**9),
        ("800MiB", 800 * 2**20),
        (" 1.5 GiB ", int(1.5 * 2**30)),
        ("3KB", 3000),
        ("2TiB", 2 * 2**40),
        ("7B", 7),
    ],
)
def test_sizes_with_a_unit(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12g", "12gb", "1.5", "12 GB of disk", "12 parsecs", "GB"])
def test_spellings_bytesize_would_take_are_refused(text: str) -> None:
    # ByteSize is case-insensitive, reads a bare "1.5" as one byte and single letters as
    # units; a matrix file that writes those more likely slipped than meant it.
    with pytest.raises(ValueError, match="expected a size with a unit"):
        parse_size(text)


def test_kubernetes_quantities_in_kib() -> None:
    assert quantity_kib("64Gi") == 64 * 2**20  # 67108864, what `df -k` shows for 64Gi
    assert quantity_kib("512Mi") == 512 * 1024
    assert quantity_kib("1Ti") == 2**30
    with pytest.raises(ValueError, match="whole number of Mi, Gi or Ti"):
        quantity_kib("64G")


def test_gb_is_decimal_with_two_places() -> None:
    assert gb(5_100_000_000) == "5.10 GB"
    assert gb(0) == "0.00 GB"
    assert gb(2**30) == "1.07 GB"
