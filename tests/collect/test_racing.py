"""The racing rule on the CPU: who gets the full measurement, and what a failure does."""

from __future__ import annotations

from typing import Any

from klaraptor.collect.racing import RaceSettings, contenders, race


def _value(ms: float, rel: float) -> dict[str, Any]:
    return {"median_ms": ms, "q1_ms": ms * (1 - rel), "q3_ms": ms * (1 + rel)}


def test_only_the_candidates_that_overlap_the_leader_are_measured_precisely() -> None:
    true = {"a": 1.00, "b": 1.004, "c": 1.2, "d": 3.0, "e": 1.01}
    calls: list[tuple[str, str]] = []

    def first(k: str) -> dict[str, Any]:
        calls.append(("first", k))
        return _value(true[k], 0.01)  # a few samples: a wide interval

    def full(k: str) -> dict[str, Any]:
        calls.append(("full", k))
        return _value(true[k], 0.001)

    out = race(list(true), first, full, RaceSettings(band=0.002))
    refined = {k for stage, k in calls if stage == "full"}
    assert refined == {"a", "b", "e"}  # within each other's intervals; c and d are clearly slower
    assert [k for stage, k in calls if stage == "first"] == list(true)
    assert out["c"]["race_stage"] == "first" and out["a"]["race_stage"] == "full"
    assert min(out, key=lambda k: out[k]["median_ms"]) == "a"


def test_a_new_leader_after_refinement_pulls_in_its_own_contenders() -> None:
    # c leads the first estimates and a overlaps it; measured precisely c is slower, a leads, and
    # b, whose wide first interval overlaps the new leader, is refined next: it is the best.
    first = {"a": _value(0.992, 0.004), "b": _value(1.01, 0.01), "c": _value(0.99, 0.004)}
    full_ms = {"a": 1.0, "b": 0.95, "c": 1.02}
    order: list[str] = []

    def full(k: str) -> dict[str, Any]:
        order.append(k)
        return _value(full_ms[k], 0.001)

    out = race(list(first), first.__getitem__, full, RaceSettings(band=0.0))
    assert order == ["c", "a", "b"]
    assert min(out, key=lambda k: out[k]["median_ms"]) == "b"


def test_failed_candidates_leave_the_race() -> None:
    def first(k: str) -> dict[str, Any] | None:
        return None if k == "x" else _value(1.0 if k == "a" else 5.0, 0.01)

    out = race(["x", "a", "b"], first, lambda k: _value(1.0, 0.0), RaceSettings())
    assert (
        out["x"] is None and out["a"]["race_stage"] == "full" and out["b"]["race_stage"] == "first"
    )


def test_contenders_of_nothing_is_nothing() -> None:
    assert contenders({}, 0.01) == []


def test_the_first_estimates_check_stays_with_a_refined_point() -> None:
    def first(k: str) -> dict[str, Any]:
        return {**_value(1.0, 0.01), "check": {"ok": True}}

    out = race(["a"], first, lambda k: _value(1.0, 0.001), RaceSettings())
    assert out["a"]["race_stage"] == "full" and out["a"]["check"] == {"ok": True}


def test_max_full_measures_only_the_best_first_estimates_precisely() -> None:
    # Ten near-ties, all contenders of one another: the plain race refines every one; a search's
    # race (max_full = 3) only the three best first estimates, once each.
    true = {f"k{i}": 1.0 + 0.001 * i for i in range(10)}
    full_calls: list[str] = []

    def full(k: str) -> dict[str, Any]:
        full_calls.append(k)
        return _value(true[k], 0.001)

    def first(k: str) -> dict[str, Any]:
        return _value(true[k], 0.02)

    race(list(true), first, full, RaceSettings(band=0.006))
    assert sorted(full_calls) == sorted(true)
    full_calls.clear()
    out = race(list(reversed(true)), first, full, RaceSettings(band=0.006, max_full=3))
    assert full_calls == ["k0", "k1", "k2"]
    assert sum(v["race_stage"] == "full" for v in out.values()) == 3


def test_max_full_below_one_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="max_full"):
        RaceSettings(max_full=0)


def test_collect_options_refuse_a_bad_race_cap_or_band_by_name() -> None:
    import pytest

    from klaraptor.collect.collector import CollectOptions
    from klaraptor.core.errors import CollectError

    for bad in (0, -2, 2.5, True, "3"):
        with pytest.raises(CollectError, match="race_max_full"):
            CollectOptions(race_max_full=bad)  # type: ignore[arg-type]
    for bad in (1.0, -0.1, "0.01", float("nan")):
        with pytest.raises(CollectError, match="noise_band"):
            CollectOptions(noise_band=bad)  # type: ignore[arg-type]
    assert CollectOptions(race_max_full=3, noise_band=0.004).race_max_full == 3


def test_a_search_picks_among_its_precise_measurements() -> None:
    from klaraptor.collect.measure import SEARCH_OPTIONS, Measured, TimedConfig
    from klaraptor.core.types import Config, DataSize, ParamValues

    def timed(bx: int, ms: float, precise: bool) -> TimedConfig:
        return TimedConfig(Config(ParamValues.NONE, (bx, 1, 1)), ms, 0.01, "ok", precise=precise)

    size = DataSize(("n",), (1024,))
    # A first estimate that undercuts every full measurement is the one to doubt.
    m = Measured("k", size, "dev", (timed(32, 0.9, False), timed(64, 1.0, True)), 0.1, 2, 0)
    assert m.best is not None and m.best.config.block == (64, 1, 1)
    only_first = Measured(
        "k", size, "dev", (timed(32, 0.9, False), timed(64, 1.0, False)), 0.1, 2, 0
    )
    assert only_first.best is not None and only_first.best.config.block == (32, 1, 1)
    assert SEARCH_OPTIONS.race_max_full == 3
