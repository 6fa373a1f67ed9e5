"""The departure-delay fit of the microbenchmarks (klaraptor.collect.microbench.departure_slope)."""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor.collect.microbench import departure_slope

KS = np.arange(1, 33)


def test_a_clear_delay_is_resolved_and_kept() -> None:
    rng = np.random.default_rng(0)
    cycles = 800.0 + 36.0 * KS + rng.normal(0, 20, KS.size)
    delay, fit = departure_slope(KS, cycles)
    assert delay == pytest.approx(36.0, abs=1.0)
    assert fit["resolved"] and fit["slope_stderr"] < 1.0 and "note" not in fit


def test_a_negative_slope_is_noise_floored_at_zero_with_the_raw_slope_kept() -> None:
    # The H200's coalesced completion cycles by k (2026-11-24, 280ad56): no trend, DRAM noise.
    cycles = np.array([775, 791, 743, 607, 581, 777, 795, 586, 733, 778, 756, 634, 786, 651, 823,
                       624, 766, 605, 761, 767, 757, 648, 654, 791, 782, 644, 601, 621, 698, 642,
                       838, 636], dtype=float)  # fmt: skip
    delay, fit = departure_slope(KS, cycles)
    assert delay == 0.0
    assert fit["slope"] == pytest.approx(-1.215, abs=1e-3)
    assert not fit["resolved"] and fit["slope_stderr"] > abs(fit["slope"]) / 2
    assert "floored" in fit["note"]
