"""Byte sizes as operators write them and as --help shows them (issue 25, item 6)."""

from __future__ import annotations

import pytest

from tether.collab.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16MiB", 16 * 2**20),
        ("16 MiB", 16 * 2**20),
        ("64KiB", 64 * 2**10),
        ("64kib", 64 * 2**10),
        ("1GiB", 2**30),
        ("512B", 512),
        ("512", 512),
        ("1.5MiB", 3 * 2**19),
        (" 2 TiB ", 2 * 2**40),
        ("0", 0),
    ],
)
def test_binary_units_and_plain_numbers_read_as_bytes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "binary", "decimal"),
    [("16MB", "16MiB for 16777216 bytes", "16000000B"), ("64k", "64KiB", "64000B")],
)
def test_si_units_are_refused_as_ambiguous_with_both_readings(
    text: str, binary: str, decimal: str
) -> None:
    with pytest.raises(ValueError, match="ambiguous") as refused:
        parse_size(text)
    assert binary in str(refused.value) and decimal in str(refused.value)


@pytest.mark.parametrize("text", ["12XB", "", "MiB", "-1MiB", "16 Mi B", "1e6", "0x10"])
def test_what_is_not_a_size_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_size(text)
    assert str(refused.value) == "is not a size (use e.g. 16MiB, 64KiB or bytes)"


def test_a_fraction_of_a_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_size("1.5B")


@pytest.mark.parametrize(
    ("size", "shown"),
    [(16 * 2**20, "16MiB"), (512 * 2**10, "512KiB"), (2**30, "1GiB"), (128, "128B"), (0, "0B")],
)
def test_a_size_shows_in_the_largest_unit_that_holds_it_exactly(size: int, shown: str) -> None:
    assert format_size(size) == shown
    assert parse_size(shown) == size


def test_a_size_no_unit_holds_exactly_shows_in_bytes() -> None:
    assert format_size(1500) == "1500B"
    assert format_size(2**20 + 1) == "1048577B"
