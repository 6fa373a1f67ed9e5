"""The CPU parts of `benchmarks/bench_saake_search.py` (issue 37 item 4): its arguments, the
scoring of one (kernel, D) against a truth, and the summary's arithmetic on a recorded sample;
and a run asked for the GPU here, which has none, fails with a message."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from klaraptor.backends.cupy_backend import gpu_problem

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_saake_search.py"


@pytest.fixture(scope="module")
def bs():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("bench_saake_search", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "0"], "--limit must be a positive number"),
        (["--limit", "nan"], "--limit must be a positive number"),
        (["--k", "0"], "--k must be at least 1"),
        (["--pool", "all"], "--pool must be one of walk, rank"),
        (["--workers", "-1"], "--workers must be 0"),
        (["--kernels", "sgemm.sgemm,nope"], "'nope' is not a tunables kernel"),
        (["--recorded", "/nonexistent.json"], "is not a file"),
        (["--budget", "0"], "--budget must be a fraction in (0, 1]"),
        (["--budget", "1.5"], "--budget must be a fraction in (0, 1]"),
        (["--rescore", "/nonexistent.json"], "needs --recorded"),
        (["--order", "fastest"], "--order must be one of variants-first, emulated"),
        (["--sizes", "all"], "--sizes must be eval or train"),
        (["--sizes", "train"], "--sizes train needs --recorded"),
        (["--emulations", "/nonexistent.json"], "--emulations /nonexistent.json is not a file"),
        (
            ["--emulations", __file__, "--recorded", __file__],
            "--emulations is for a GPU run",
        ),
    ],
)
def test_bad_arguments_are_named(bs, tmp_path, capsys, argv, message) -> None:  # noqa: ANN001
    assert bs.main([str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_arguments_default_to_every_tunables_kernel(bs, tmp_path) -> None:  # noqa: ANN001
    from klaraptor.suite import tunables

    a = bs.parse_args([str(tmp_path)])
    assert a.kernels == [s.name for s in tunables.SPECS] and a.k == 3 and a.pool == "walk"
    assert a.limit == 400.0 and a.workers >= 1
    short = bs.parse_args([str(tmp_path), "--kernels", "sgemm.sgemm,tunables.gsmap.gsmap"])
    assert short.kernels == ["tunables.sgemm.sgemm", "tunables.gsmap.gsmap"]


def test_evaluation_sizes_are_above_training(bs) -> None:  # noqa: ANN001
    from klaraptor import suite

    for name in bs.kernel_names(""):
        spec = suite.get(name)
        assert min(bs.eval_sizes(spec)) > max(int(n) for n in spec.meta["train_sizes"])


# A recorded sample: four configurations, the emulator's order is not the truth's.
EMU = {
    "walk": [["A=1", [32, 1, 1], 3.0], ["A=2", [32, 1, 1], 1.0], ["A=2", [64, 1, 1], 2.0]],
    "rank": [
        ["A=2", [32, 1, 1], 1.0],
        ["A=2", [64, 1, 1], 2.0],
        ["A=1", [32, 1, 1], 3.0],
        ["A=1", [64, 1, 1], 4.0],
        ["A=4", [32, 1, 1], math.inf],
    ],
    "walk_s": 10.0,
    "rank_s": 12.0,
}
TRUTH = {  # (variant, block) -> (ms, seconds its timing cost)
    ("A=1", (32, 1, 1)): (1.00, 0.5),
    ("A=1", (64, 1, 1)): (2.00, 0.5),
    ("A=2", (32, 1, 1)): (1.20, 1.0),
    ("A=2", (64, 1, 1)): (1.04, 2.0),
    ("A=4", (32, 1, 1)): (5.00, 1.0),
}


def test_score_takes_the_fastest_measured_of_the_k_least_emulated(bs) -> None:  # noqa: ANN001
    row = bs.score(EMU, TRUTH, k=2, pool="walk")
    s = row["search"]
    # The two least emulated of the walk: A=2 at 32 (1.20 ms) and at 64 (1.04 ms).
    assert s["choice"] == ["A=2", [64, 1, 1]] and s["r"] == pytest.approx(1.04)
    assert s["measurement_s"] == pytest.approx(3.0) and row["brute_force_s"] == pytest.approx(5.0)
    assert s["cost_ratio"] == pytest.approx(0.6)
    assert row["best"] == ["A=1", [32, 1, 1]] and row["truth_complete"]
    assert row["by_k"]["walk_1"] == {"r": pytest.approx(1.2), "cost_ratio": pytest.approx(0.2)}
    assert row["by_k"]["rank_3"]["r"] == pytest.approx(1.0)  # A=1 at 32 is third
    # Measured by the search itself: its own times choose, the truth's score.
    got = {("A=2", (32, 1, 1)): (0.9, 0.1), ("A=2", (64, 1, 1)): (None, 0.2)}
    s2 = bs.score(EMU, TRUTH, k=2, pool="walk", measured=got)["search"]
    assert s2["choice"] == ["A=2", [32, 1, 1]] and s2["r"] == pytest.approx(1.2)
    assert s2["measurement_s"] == pytest.approx(0.3)


def test_the_budgeted_search_scores_its_emulated_prefix(bs, monkeypatch) -> None:  # noqa: ANN001
    from klaraptor.collect import measure

    # A cost model of 1 s a point: brute force's estimate is 5 s, 0.45 of it buys 2 points.
    class Flat:
        def time_point_s(self, ms: float) -> float:
            return 1.0

    monkeypatch.setattr(measure, "measure_cost_model", lambda: Flat())
    truth = {**TRUTH, ("A=2", (32, 1, 1)): (1.20, 1.5, 0.5)}  # this point paid 0.5 s of setup
    row = bs.score(EMU, truth, k=3, pool="walk", budget=0.45, order="emulated")
    s = row["search"]
    assert s["rule"] == "budget" and s["measured_configs"] == 2 and not s["within_5pct"]
    # the plan's order: the least emulated (A=2 at 32, 1.20 ms), then the one that cannot be
    # emulated (A=4, a fifth of the space, 5.00 ms): the first is the choice
    assert s["measured_not_emulated"] == 1
    assert s["choice"] == ["A=2", [32, 1, 1]] and s["r"] == pytest.approx(1.20)
    assert row["setup_s"] == pytest.approx(0.5) and row["brute_force_s"] == pytest.approx(5.0)
    assert s["measurement_s"] == pytest.approx(2.0) and s["cost_ratio"] == pytest.approx(0.4)
    assert s["cost_ratio_with_setup"] == pytest.approx(2.5 / 5.5)
    assert s["estimated_s"] == 2.0 and s["brute_force_estimate_s"] == 5.0
    assert row["emulated"] == 4 and row["by_budget"]["rank_0.3"]["measured_configs"] == 1
    assert row["by_budget"]["variants_0.3"]["measured_configs"] == 1  # every order is scored
    # Every configuration in the budget: the best found.
    assert bs.score_budget(EMU, truth, 1.0)["r"] == pytest.approx(1.0)
    assert bs.ORDERS[0] == "variants-first"  # the product's default heads the bench's orders


def test_truth_without_every_configuration_is_not_complete(bs) -> None:  # noqa: ANN001
    partial = {k: v for k, v in TRUTH.items() if k[0] != "A=4"}
    assert not bs.score(EMU, partial, k=1, pool="rank")["truth_complete"]


def test_a_truth_may_lack_two_percent_of_the_space(bs) -> None:  # noqa: ANN001
    assert bs.truth_complete(377, 1) and bs.truth_complete(100, 2)
    assert not bs.truth_complete(168, 117) and not bs.truth_complete(0, 0)


def test_a_search_that_cannot_run_is_a_miss(bs) -> None:  # noqa: ANN001
    failed = {**EMU, "search_error": "an exit depends on data", "walk": None}
    row = bs.score(failed, TRUTH, k=3, pool="walk")
    assert "r" not in row["search"] and row["search"]["error"].startswith("an exit")


def test_summary_math_on_a_recorded_sample(bs) -> None:  # noqa: ANN001
    def pair(name: str, r: float | None, meas: float, brute: float, complete: bool = True):  # noqa: ANN202
        search = {"k": 3} if r is None else {"r": r, "measurement_s": meas}
        by_k = {"walk_3": {"r": r or 9.0, "cost_ratio": meas / brute}}
        return {
            "kernel": name,
            "D": 1,
            "truth_complete": complete,
            "brute_force_s": brute,
            "search": search,
            "search_cpu_s": 10.0,
            "by_k": by_k,
        }

    pairs = [
        pair("a", 1.00, 0.1, 2.0),
        pair("b", 1.04, 0.2, 4.0),
        pair("c", 1.20, 0.4, 2.0),
        pair("d", None, 0.0, 3.0),  # the search could not run: a miss
        pair("e", 1.00, 0.1, 1.0, complete=False),  # not judged
    ]
    s = bs.summarize(pairs)
    assert s["pairs"] == 5 and s["pairs_judged"] == 4 and s["pairs_searched"] == 3
    assert s["within_5pct"] == pytest.approx(2 / 4)
    assert s["within_5pct_searched"] == pytest.approx(2 / 3)
    assert s["geomean_r"] == pytest.approx((1.00 * 1.04 * 1.20) ** (1 / 3))
    assert s["cost_ratio"]["total"] == pytest.approx(0.7 / 8.0)
    assert s["cost_ratio"]["geomean"] == pytest.approx((0.05 * 0.05 * 0.2) ** (1 / 3))
    assert s["search_compile_emulation_s"] == pytest.approx(30.0)
    assert s["targets"] == {"within_5pct_at_least_80pct": False, "cost_ratio_at_most_0.3": True}
    assert s["not_judged"] == ["e D=1"]
    assert s["by_k"]["walk_3"]["within_5pct"] == pytest.approx(2 / 4)


@pytest.mark.skipif(gpu_problem() is None, reason="a GPU is here")
def test_without_a_gpu_the_measured_run_is_refused(bs, tmp_path, capsys) -> None:  # noqa: ANN001
    assert bs.main([str(tmp_path), "--kernels", "gsmap.gsmap"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "Traceback" not in err


@pytest.mark.parametrize("reuse", [False, True])
def test_the_gpu_run_s_orchestration_on_fakes(bs, tmp_path, monkeypatch, reuse) -> None:  # noqa: ANN001
    """run_gpu with the GPU parts faked (brute force writes a known truth to its store, the
    search's measurement reads it back) and the emulations canned: truth, the search's K, its
    measured choice, the scoring and the summary go together as on the GPU. `reuse`: the
    emulations come from an earlier output (--emulations), and none is made again."""
    import klaraptor.collect.collector as collector
    import klaraptor.collect.measure as measure
    from klaraptor import suite
    from klaraptor.collect.measure import Measured, TimedConfig
    from klaraptor.store import Measurement, Store

    name = "tunables.gsmap.gsmap"
    spec = suite.get(name)
    sizes = bs.eval_sizes(spec)
    ms = {
        ("VEC=1,EPT=1", (256, 1, 1)): 2.0,
        ("VEC=2,EPT=4", (128, 1, 1)): 1.0,
        ("VEC=4,EPT=8", (128, 1, 1)): 1.5,
        ("VEC=2,EPT=4", (256, 1, 1)): 1.02,
    }
    emu_order = [  # emulated ms: the fastest measured is second
        ["VEC=4,EPT=8", [128, 1, 1], 0.1],
        ["VEC=2,EPT=4", [256, 1, 1], 0.2],
        ["VEC=2,EPT=4", [128, 1, 1], 0.3],
        ["VEC=1,EPT=1", [256, 1, 1], 0.4],
    ]

    emulating: list = []

    class FakeEmulations:
        def __init__(self, todo, rank, workers, threads) -> None:  # noqa: ANN001
            self.todo, self.compile_s = list(todo), {n: 2.0 for n, _ in todo}
            emulating.extend(todo)

        def pump(self, on_done) -> None:  # noqa: ANN001
            while self.todo:
                n, N = self.todo.pop()
                on_done({"kernel": n, "N": N, "walk": emu_order, "walk_s": 5.0, "steps": []})

        def wait(self, on_done, deadline) -> None:  # noqa: ANN001
            self.pump(on_done)

        def close(self) -> list:
            return []

    def values(text: str):  # noqa: ANN202
        return spec.param_values({k: int(v) for k, v in (kv.split("=") for kv in text.split(","))})

    register = collector._register

    def fake_collect(spec_, sizes_, *, store, options, progress):  # noqa: ANN001, ANN202
        register(store, spec_)
        store.put_measurements(
            [
                Measurement(
                    name,
                    "gpu0",
                    spec.size(N),
                    b,
                    "time",
                    "ok",
                    {"median_ms": t * N / sizes[0], "wall_s": 0.5},
                    params=values(v),
                )
                for N in sizes_
                for (v, b), t in ms.items()
            ]
        )
        return type("Report", (), {"device": "gpu0"})()

    def fake_measure(spec_, D, configs, *, store, options):  # noqa: ANN001, ANN202
        # The search measures its few best precisely, the rest once (not brute force's race).
        assert options == measure.SEARCH_OPTIONS and options.race_max_full == 3
        timed = tuple(
            TimedConfig(c, ms[(bs.variant_text(c.params), c.block)] * D / sizes[0], 0.25, "ok")
            for c in configs
        )
        return Measured(name, spec.size(D), "gpu0", timed, 3.0, len(timed), 0)

    monkeypatch.setattr(measure, "gpu_check", lambda what: None)
    monkeypatch.setattr(measure, "measure_configs", fake_measure)
    monkeypatch.setattr(collector, "collect", fake_collect)
    monkeypatch.setattr(bs, "Emulations", FakeEmulations)
    monkeypatch.setattr(bs, "_prepare_store", lambda path: Store(path))
    argv = [str(tmp_path), "--kernels", "gsmap.gsmap", "--k", "2"]
    if reuse:
        import json

        earlier = tmp_path / "earlier.json"
        record = {"walk": emu_order, "walk_s": 5.0, "steps": [], "static_order": True}
        pairs = [{"kernel": name, "D": N, "emulation": record, "search_cpu_s": 6.0} for N in sizes]
        earlier.write_text(json.dumps({"pairs": pairs, "provenance": {"commit": "c0ffee"}}))
        argv += ["--emulations", str(earlier)]
    result = bs.run_gpu(bs.parse_args(argv), lambda r: None)
    assert emulating == ([] if reuse else [(name, N) for N in sizes])
    if reuse:
        assert result["emulations_from"] == [
            {"file": "earlier.json", "provenance": {"commit": "c0ffee"}}
        ]
        assert all(p["emulation"]["walk"] == emu_order for p in result["pairs"])
    assert (
        result["complete"]
        and [p["D"] for p in sorted(result["pairs"], key=lambda p: p["D"])] == sizes
    )
    for p in result["pairs"]:
        s = p["search"]
        assert (
            p["truth_complete"] and p["configs"] == 4 and p["best"] == ["VEC=2,EPT=4", [128, 1, 1]]
        )
        # its two least emulated: VEC=4,EPT=8 (1.5) and VEC=2,EPT=4 at 256 (1.02): the latter
        assert s["choice"] == ["VEC=2,EPT=4", [256, 1, 1]] and s["r"] == pytest.approx(1.02)
        assert s["measurement_s"] == pytest.approx(0.5) and p["brute_force_s"] == pytest.approx(2.0)
        assert p["search_cpu_s"] == pytest.approx(6.0) and p["search_wall_s"] == 3.0
    assert result["summary"]["within_5pct"] == 1.0
    assert result["summary"]["cost_ratio"]["total"] == pytest.approx(0.25)


def test_the_result_joins_saake_search_json_under_its_own_key(bs, tmp_path) -> None:  # noqa: ANN001
    import json

    path = tmp_path / "saake_search.json"
    path.write_text(json.dumps({"pairs": [1], "summary": {"a": 1}, "provenance": {"c": "x"}}))
    doc = {"pairs": [{"kernel": "k", "emulation": {"rank": [1], "walk": [2], "steps": [3]}}]}
    bs.merge_into(path, {**doc, "summary": {"within_5pct": 0.5}})
    got = json.loads(path.read_text())
    assert got["pairs"] == [1] and got["summary"] == {"a": 1} and got["provenance"] == {"c": "x"}
    mine = got["tunables_search"]
    assert mine["summary"] == {"within_5pct": 0.5}
    assert mine["pairs"][0]["emulation"] == {"steps": [3]}
