"""The sizes whose argument bytes the info step measures (a long sweep measures a spread)."""

from __future__ import annotations

from klaraptor.collect.collector import FOOTPRINT_SIZES, footprint_sizes
from klaraptor.core.types import DataSize


def sizes(n: int) -> list[DataSize]:
    return [DataSize(("N",), (256 + 8 * i,)) for i in range(n)]


def test_a_short_list_is_measured_whole() -> None:
    assert footprint_sizes(sizes(5)) == sizes(5)
    assert footprint_sizes(sizes(FOOTPRINT_SIZES)) == sizes(FOOTPRINT_SIZES)


def test_a_long_sweep_measures_a_spread_with_both_ends() -> None:
    many = sizes(164)
    got = footprint_sizes(many)
    assert len(got) == FOOTPRINT_SIZES
    assert got[0] == many[0] and got[-1] == many[-1]
    assert got == sorted(got, key=lambda D: D.values()) and len(set(got)) == len(got)
