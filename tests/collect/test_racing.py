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
