"""The budgeted measurement plan (klaraptor.collect.plan): cost model, budget, cold-sweep bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from klaraptor.collect.plan import (
    CostModel,
    MeasurementPlan,
    TableMeasurer,
    fit_cost_model,
    ladder,
    protocol_launches,
    run_plan,
)
from klaraptor.core.errors import KlaraptorError
from klaraptor.suite.recorded import load_recorded


def test_protocol_launches_follow_the_timer() -> None:
    # 1 ms: no batching, 5 samples reach 5 ms: warm-up 2 + probe 1 + 5.
    assert protocol_launches(1.0) == 8
    # 0.01 ms: batches of 20 launches (0.2 ms per sample), 25 samples to reach 5 ms.
    assert protocol_launches(0.01) == 3 + 25 * 20
    # 0.001 ms: 100 launches per sample at most, 30 samples at most.
    assert protocol_launches(0.001) == 3 + 30 * 100
    # Long kernels: the minimum of 5 samples.
    assert protocol_launches(50.0) == 8


def test_fit_cost_model_recovers_constants() -> None:
    truth = CostModel(per_point_s=0.04, ncu_session_s=3.0, ncu_point_s=0.2, ncu_replay=1.5)
    rng = np.random.default_rng(0)
    phases = []
    for k in range(6):
        t = list(rng.uniform(0.005, 2.0, size=40 + 10 * k))
        ncu = [(v, 4.0) for v in t[: 20 + 30 * k]]
        phases.append(
            {
                "kernel": f"k{k}",
                "time_ms": t,
                "train_time_s": truth.sweep_s(t),
                "ncu": ncu,
                "train_ncu_s": truth.ncu_s(ncu),
            }
        )
    model, per_kernel = fit_cost_model(phases)
    assert model.per_point_s == pytest.approx(0.04)
    assert all(v == pytest.approx(0.04) for v in per_kernel.values())
    assert model.ncu_session_s == pytest.approx(3.0, rel=1e-6)
    assert model.ncu_point_s == pytest.approx(0.2, rel=1e-6)
    assert model.ncu_replay == pytest.approx(1.5, rel=1e-6)


def test_ladder() -> None:
    assert ladder(1536, [256, 512, 768, 1024, 1536]) == [768, 256]
    assert ladder(96, [32, 48, 64, 96]) == [48]
    assert ladder(256, [256]) == []


def _recorded_measurers():
    data = load_recorded()
    for name, kd in sorted(data.kernels.items()):
        times = kd.times()
        sizes = sorted({D.values()[0] for D, _ in times})
        train = [int(n) for n in kd.summary["meta"]["train_sizes"]]
        L = max(train)
        blocks = sorted(b for D, b in times if D.values() == (L,))
        idx = {b: i for i, b in enumerate(blocks)}
        hot = {
            ((D.values()[0],), idx[b]): (v[0], (v[2] - v[1]) / v[0])
            for (D, b), v in times.items()
            if D.values()[0] in train and b in idx
        }
        cold = {
            ((L,), idx[tuple(r[1:4])]): (r[4]["gpu__time_duration.sum"] / 1e6, math.nan)
            for r in kd.ncu
            if r[0] == L and tuple(r[1:4]) in idx
        }
        assert sizes
        yield name, TableMeasurer(hot, cold), len(blocks), L, train


@pytest.mark.parametrize("budget", [1.0, 1.25, 1.5, 3.0])
def test_plan_never_exceeds_its_budget_on_the_recorded_suite(budget: float) -> None:
    for name, meas, n_cfg, L, train in _recorded_measurers():
        cost = CostModel(per_point_s=0.03)
        res = run_plan(meas, cost, n_cfg, (L,), [(n,) for n in ladder(L, train)], budget=budget)
        assert res.spent_s <= res.budget_s + 1e-12, (name, res.spent_s, res.budget_s)
        at_L = [p["ms"] for p in res.points if p["kind"] == "time" and p["D"] == [L]]
        assert len(at_L) >= n_cfg  # every candidate timed hot at L
        assert res.tune_once_s == pytest.approx(cost.sweep_s(at_L[:n_cfg]))
        if budget == 1.0:
            assert res.spent_s == pytest.approx(res.tune_once_s)


def test_cold_sweep_bound_measures_every_possible_winner() -> None:
    for name, meas, n_cfg, L, _ in _recorded_measurers():
        res = run_plan(meas, CostModel(per_point_s=0.0), n_cfg, (L,), [], budget=100.0)
        hot = {p["cfg"]: p["ms"] for p in res.points if p["kind"] == "time"}
        cold = {p["cfg"]: p["ms"] for p in res.points if p["kind"] == "cold"}
        assert cold, name
        spreads = [p["spread"] for p in res.points if p["kind"] == "time"]
        band = float(np.median(spreads))
        best_cold = min(cold.values())
        # Anything skipped had a hot time (less the band) above the best cold time found.
        for c, t in hot.items():
            if c not in cold:
                assert t * (1 - band) > best_cold, (name, c)


def test_measured_walls_are_the_cost_and_calibrate_the_estimates() -> None:
    from klaraptor.collect.plan import MeasurementPlan, ReplayMeasurer, calibrated

    cost = CostModel(per_point_s=0.03)
    n = 4
    walls = {((100,), c, False): (1.0 + c, 0.01, 0.5) for c in range(n)}
    walls.update({((50,), c, False): (0.5, 0.01, 0.5) for c in range(n)})
    plan = MeasurementPlan(n, (100,), ((50,),), cost, budget=1.5, needs_cold=False)
    res = plan.run(ReplayMeasurer(walls))
    at_L = [p for p in res.points if p["D"] == [100]]
    assert all(p["cost_s"] == 0.5 and p["measured_cost"] for p in at_L)
    assert res.tune_once_s == pytest.approx(cost.session_s + n * 0.5)
    # The sweep measured 0.5 s per point, so each smaller point is budgeted at about that:
    # (1.5 - 1) * (0.65 + 2.0) / 0.5 -> two candidates at the one smaller size.
    assert sum(p["D"] == [50] for p in res.points) == 2
    cal = calibrated(cost, at_L)
    assert cal.per_point_s == pytest.approx(
        0.5 - np.median([cost.time_point_s(p["ms"]) - 0.03 for p in at_L])
    )


def test_next_points_run_the_plan_request_by_request() -> None:
    from klaraptor.collect.plan import MeasurementPlan

    plan = MeasurementPlan(3, (8,), ((4,),), CostModel(per_point_s=0.0), budget=10.0)
    results: dict = {}
    asked = []
    while need := plan.next_points(results):
        asked.append(need)
        for key in need:
            D, c, cold = key
            results[key] = (1.0 + c + (0.5 if cold else 0.0), 0.0) if c != 1 else None
    assert asked[0] == [((8,), c, False) for c in range(3)]  # the sweep in one request
    assert all(len(a) == 1 for a in asked[1:])  # then one point at a time
    res = plan.replay(results)
    assert ((8,), 1, False) not in res.keys()  # the failed point did not run
    assert res.keys() == [k for a in asked for k in a if results[k] is not None]


def test_a_smaller_size_is_budgeted_at_its_worst_protocol_cost() -> None:
    cost = CostModel(per_point_s=0.0)
    # A 1 ms kernel needs 8 launches at L; at a smaller size it may run 3 + 30 x 100 short ones.
    assert cost.time_point_s(1.0) < cost.time_point_bound_s(1.0)
    assert cost.time_point_bound_s(1.0) == pytest.approx(cost.time_point_s(1e-4))
    assert cost.time_point_bound_s(50.0) == cost.time_point_s(50.0)


class _WalledMeasurer:
    """Recorded-style times with the wall each point cost in the session (as the worker reports):
    every point 0.1 s, except the sweep's first point at L, which pays `setup_s` more to build
    the arguments (reported as its set-up)."""

    def __init__(self, times: dict[tuple[tuple[int, ...], int], float], setup_s: float) -> None:
        self.times, self.setup_s, self.first = times, setup_s, True

    def time(self, D, cfgs, *, cold):  # noqa: ANN001, ANN201 - the Measurer protocol
        out = {}
        for c in cfgs:
            setup = self.setup_s if self.first else 0.0
            self.first = False
            out[c] = (self.times[(tuple(D), c)] * (1.5 if cold else 1.0), 0.01, 0.1 + setup, setup)
        return out

    def counters(self, points):  # noqa: ANN001, ANN201
        return []


def test_measured_walls_are_the_cost_and_the_smaller_sizes_pay_their_set_up() -> None:
    n, L, smaller = 10, (1024,), [(512,), (256,)]
    times = {(D, c): 1.0 + 0.1 * c for D in [L, *smaller] for c in range(n)}
    cost = CostModel(per_point_s=0.1, session_s=0.5)

    def plan(setup_s: float):  # noqa: ANN202
        return run_plan(_WalledMeasurer(times, setup_s), cost, n, L, smaller, needs_cold=False)

    cheap = plan(0.0)
    assert all(p["measured_cost"] for p in cheap.points)
    assert cheap.tune_once_s == pytest.approx(0.5 + n * 0.1)
    assert cheap.spent_s == pytest.approx(0.5 + 0.1 * len(cheap.points))
    assert cheap.ratio <= 1.5 + 1e-9
    assert cheap.counts()["time"] > n
    # Building the arguments at L took 0.45 s: each smaller size may cost as much to set up, so
    # the budget left fits fewer candidates there.
    costly = plan(0.45)
    assert costly.ratio <= 1.5 + 1e-9
    assert costly.counts()["time"] < cheap.counts()["time"]


def test_a_prior_orders_the_sweep_and_keeps_its_top_k() -> None:
    name, meas, n_cfg, L, train = next(_recorded_measurers())
    smaller = [(n,) for n in ladder(L, train)]
    prior = tuple(reversed(range(n_cfg)))  # any order: the plan follows it
    full = MeasurementPlan(n_cfg, (L,), tuple(smaller), CostModel(per_point_s=0.03), prior=prior)
    res = full.run(meas)
    at_L = [p["cfg"] for p in res.points if p["kind"] == "time" and p["D"] == [L]]
    assert at_L[:n_cfg] == list(prior)
    k = 5
    cost = CostModel(per_point_s=0.03)
    top = MeasurementPlan(n_cfg, (L,), tuple(smaller), cost, prior=prior, prior_keep=k).run(meas)
    timed = {p["cfg"] for p in top.points if p["kind"] == "time"}
    assert timed <= set(prior[:k]), name  # nothing outside the top k, at any size
    assert [p["cfg"] for p in top.points if p["D"] == [L] and p["kind"] == "time"][:k] == list(
        prior[:k]
    )
    # Tune-once's cost is estimated for the candidates left out, so the budget keeps its unit.
    sweep_cost = cost.session_s + sum(p["cost_s"] for p in top.points[:k])
    assert top.tune_once_s > sweep_cost and any("prior" in n for n in top.notes)
    assert top.spent_s <= top.budget_s + 1e-12
    with pytest.raises(KlaraptorError, match="prior_keep"):
        MeasurementPlan(n_cfg, (L,), prior=prior, prior_keep=0)


def test_the_set_up_at_a_smaller_size_is_scaled_by_its_argument_bytes() -> None:
    # A set-up at L as costly as the budget left (the d714813 softmax, conv2d and n-body runs):
    # charged in full to each smaller size, no smaller size fits; scaled by the argument bytes
    # (half and a quarter of L's), the fold gets its candidates.
    n, L, smaller = 10, (1024,), ((512,), (256,))
    times = {(D, c): 1.0 + 0.1 * c for D in [L, *smaller] for c in range(n)}
    cost = CostModel(per_point_s=0.1, session_s=0.5)

    def timed_small(scale: tuple[float, ...]) -> int:
        plan = MeasurementPlan(n, L, smaller, cost, needs_cold=False, setup_scale=scale)
        res = plan.run(_WalledMeasurer(times, 0.5))
        assert res.ratio <= 1.5 + 1e-9
        return sum(p["D"] != list(L) for p in res.points)

    assert timed_small(()) == 0
    assert timed_small((0.5, 0.25)) >= 4
    # A ratio above 1 is capped: a smaller size never costs more to set up than L.
    assert timed_small((3.0, 3.0)) == 0


def test_the_cold_sweep_leaves_budget_for_the_smaller_sizes() -> None:
    # Cold runs priced so that the cold sweep alone would spend the whole budget, and every
    # candidate within reach of the best cold time (the bound never stops it).
    n, L, smaller = 20, (1024,), ((512,),)
    times = {(D, c): 1.0 + 0.001 * c for D in [L, *smaller] for c in range(n)}
    cost = CostModel(per_point_s=0.1, session_s=0.5)

    def run(reserve: int):  # noqa: ANN202
        plan = MeasurementPlan(n, L, smaller, cost, ladder_reserve=reserve)
        return plan.run(_WalledMeasurer(times, 0.0))

    greedy, kept = run(0), run(2)
    assert greedy.ratio <= 1.5 + 1e-9 and kept.ratio <= 1.5 + 1e-9
    small = [p["cfg"] for p in kept.points if p["D"] == [512]]
    assert len(small) >= 2 and small[:2] == [0, 1]  # the two best hot candidates
    assert kept.counts()["cold"] < greedy.counts()["cold"]


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"setup_scale": (0.5,)}, "setup_scale has 1 values for 2"),
        ({"setup_scale": (0.5, math.nan)}, "finite"),
        ({"setup_scale": (0.5, -1.0)}, "≥ 0"),
        ({"ladder_reserve": -1}, "ladder_reserve"),
    ],
)
def test_bad_plan_settings_are_refused_by_name(kw: dict, words: str) -> None:
    with pytest.raises(KlaraptorError, match=words):
        MeasurementPlan(4, (1024,), ((512,), (256,)), **kw)
