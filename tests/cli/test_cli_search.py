"""`klaraptor search KERNEL D=...` (issue 37 item 4): bad input gets a message and exit code 2;
with the CUDA toolkit, the walk is printed step by step, emulated and not measured."""

from __future__ import annotations

import json

import pytest

from klaraptor.backends.cupy_backend import gpu_problem
from klaraptor.cli import main
from tests.isa.helpers import needs_tools

TRANSPOSE = "tunables.transpose.transpose_tiles"


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("tunables.nope", "N=4096"), "no suite kernel named 'tunables.nope'"),
        (("polybench.gemm.gemm", "N=4096"), "has no program parameters"),
        ((TRANSPOSE, "N=abc"), "'abc' is not an integer"),
        ((TRANSPOSE, "M=4096"), "unknown ['M']"),
        ((TRANSPOSE, "N=4096", "--device", "nope"), "no recorded device profile 'nope'"),
    ],
)
def test_bad_input_is_a_message_not_a_traceback(capsys, argv, message) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", *argv)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


@needs_tools
def test_search_prints_the_path_and_why(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=1024")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "GPU emulated: recorded profile 'h200'"
    assert "0. TILE=32, RPT=4, block (32, 8, 1):" in out and "bottleneck:" in out
    assert "stop:" in out and "cuobjdump -res-usage" in out
    assert lines[-1].startswith("chosen: ") and lines[-1].endswith("emulated, not measured")
    rc, out, _ = run(capsys, "search", TRANSPOSE, "N=1024", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["emulated_not_measured"] and doc["steps"][-1]["moved_to"] is None


def test_measure_zero_is_a_usage_error(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(["search", TRANSPOSE, "N=4096", "--measure", "0"])
    assert exc.value.code == 2
    assert "argument --measure: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.skipif(gpu_problem() is None, reason="a GPU is here")
def test_measure_without_a_gpu_stops_at_once_with_a_message(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=1024", "--measure", "3")
    assert rc != 0 and rc != 1 and out == ""  # a KlaraptorError's exit code, not an internal one
    assert "klaraptor search --measure" in err and "needs a CUDA GPU" in err
    assert "without it the search runs on emulated times alone" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("bad", ["0", "1.5", "abc", "nan", "-0.2"])
def test_a_bad_budget_is_a_usage_error_that_names_it(capsys, bad) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as exc:
        main(["search", TRANSPOSE, "N=4096", "--budget", bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --budget: the search budget must be a fraction" in err
    assert f"got {bad!r}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--budget", "0.25", "--measure", "3"), "give --measure K or --budget F, not both"),
        (("--plan-only",), "give --budget F with it"),
        (("--order", "variants-first"), "--order sets a budgeted search's order"),
    ],
)
def test_budget_options_that_do_not_go_together_are_named(capsys, argv, message) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=4096", *argv)
    assert rc == 2 and out == "" and message in err and "Traceback" not in err


@pytest.mark.skipif(gpu_problem() is None, reason="a GPU is here")
def test_budget_without_a_gpu_stops_at_once_and_points_to_plan_only(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(capsys, "search", TRANSPOSE, "N=1024", "--budget", "0.25")
    assert rc not in (0, 1) and out == ""  # a KlaraptorError's exit code
    assert "needs a CUDA GPU" in err and "--plan-only" in err


@needs_tools
def test_plan_only_prints_what_a_budget_would_time(capsys) -> None:  # noqa: ANN001
    rc, out, err = run(
        capsys,
        "search",
        TRANSPOSE,
        "N=1024",
        "--budget",
        "0.25",
        "--order",
        "emulated",
        "--plan-only",
        "--json",
    )
    doc = json.loads(out)["budget"]
    assert rc == 0, err
    assert doc["fraction"] == 0.25 and 1 <= len(doc["measure"]) < doc["configurations"]
    assert doc["order"] == "emulated"
    assert doc["estimated_s"] <= 0.25 * doc["brute_force_estimate_s"]
    ms = [m["emulated_ms"] for m in doc["measure"]]
    assert ms == sorted(ms)


def test_the_plan_is_printed_with_its_budget_and_order() -> None:
    import math

    from klaraptor import suite
    from klaraptor.cli.search import _plan_text
    from klaraptor.models.saake.search import PlanOrder, SearchConfig, budgeted_plan

    spec = suite.get(TRANSPOSE)
    a, b = (SearchConfig(spec.default_variant, (t, 8, 1)) for t in (32, 16))
    text = _plan_text(
        budgeted_plan([(a, 2.0), (b, math.inf)], 1.0, lambda ms: 1.0, order=PlanOrder.EMULATED)
    )
    lines = text.splitlines()
    assert lines[1] == (
        "budget: 1 of brute force's estimated measurement cost (2.00 s for 2 configurations, "
        "priced before measuring from their emulated times)"
    )
    assert lines[2].startswith(
        "to time, least emulated time first, the unemulated (nearest the author's "
        "configuration first) interleaved by their share of the space: 2 configurations"
    )
    assert lines[3].endswith("block (32, 8, 1): emulated 2 ms")
    assert lines[4].endswith("block (16, 8, 1): not emulated (static order)")


def test_a_variants_first_plan_says_so() -> None:
    from klaraptor import suite
    from klaraptor.cli.search import _plan_text
    from klaraptor.models.saake.search import PlanOrder, SearchConfig, budgeted_plan

    spec = suite.get(TRANSPOSE)
    a, b = (SearchConfig(spec.default_variant, (t, 8, 1)) for t in (32, 16))
    plan = budgeted_plan([(a, 2.0), (b, 3.0)], 1.0, lambda ms: 1.0, order=PlanOrder.VARIANTS_FIRST)
    assert plan.rule is PlanOrder.VARIANTS_FIRST
    assert (
        _plan_text(plan)
        .splitlines()[2]
        .startswith(
            "to time, each compiled variant's least emulated configuration first, then the rest by "
            "emulated time: 2 configurations"
        )
    )


@pytest.mark.gpu
@needs_tools
def test_a_variants_first_budget_times_every_variant_s_best_on_the_gpu(  # noqa: ANN001
    capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("KLARAPTOR_HOME", str(tmp_path))
    rc, out, err = run(
        capsys,
        "search",
        TRANSPOSE,
        "N=2048",
        "--budget",
        "0.2",
        "--order",
        "variants-first",
        "--json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    plan, measured = doc["budget"], doc["measured"]
    assert plan["order"] == "variants-first"
    variants = [tuple(sorted(m["params"].items())) for m in plan["measure"]]
    n = len(set(variants))
    assert n > 1 and len(set(variants[:n])) == n  # each variant once before any repeats
    timed = [m for m in measured["configs"] if m["status"] == "ok"]
    assert len(timed) == len(plan["measure"]) and measured["best_ms"] > 0
    precise = [m for m in timed if m["precise"]] or timed
    assert measured["best_ms"] == min(m["measured_ms"] for m in precise)
