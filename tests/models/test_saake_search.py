"""SAAKE's bottleneck-driven walk (Alg. 3) in the product (models/saake/search, issue 37 item
4): the moves, their order by the bottleneck, where it stops; on a fake emulator (no CUDA
toolkit) and end to end on a compiled tunables kernel (needs the toolkit)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from klaraptor import suite
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import KernelAttributes, ParamValues
from klaraptor.device.profile import recorded_profile
from klaraptor.models.saake.emulate import GridShape
from klaraptor.models.saake.search import (
    JointSpace,
    PlanOrder,
    SearchConfig,
    SearchError,
    budgeted_plan,
    check_budget,
    format_path,
    most_promising,
    neighbourhood_order,
    neighbours,
    prior_order,
    search,
    variants_first,
)
from tests.isa.helpers import needs_tools

EMULATED = PlanOrder.EMULATED

GSMAP = "tunables.gsmap.gsmap"  # VEC (1, 2, 4), EPT (1, 2, 4, 8), 1D blocks
ATTRS = KernelAttributes(32, 0, 0, 0, 1024, 232448)


def _cycles(pv: ParamValues, block: tuple[int, int, int]) -> float:
    """A separable bowl with its minimum at VEC=2, EPT=4, 128 threads (1000 cycles)."""
    return 1000.0 * (
        (abs(math.log2(pv["VEC"]) - 1) + 1)
        * (abs(math.log2(pv["EPT"]) - 2) + 1)
        * (abs(math.log2(block[0]) - 7) + 1)
    )


@dataclass
class FakeEmulator:
    pv: ParamValues
    candidates: tuple[tuple[int, int, int], ...]

    def cycles(self, D: Sequence[int], j: int) -> float:
        return _cycles(self.pv, self.candidates[j])

    def shape(self, D: Sequence[int], j: int) -> GridShape:
        # One resident block per SM: resident warps grow with the block.
        return GridShape(1000, 1, self.candidates[j][0] // 32, 132)

    def utilisation(self, D: Sequence[int], j: int) -> dict[str, float]:
        # DRAM is busy less of the time the more vectors a thread handles.
        return {"dram": 1.0 / self.pv["EPT"] ** 2}


@dataclass
class FakeSensitivity:
    mode: str
    bottleneck: str = "dram"

    def headline(self) -> str:
        return f"bottleneck: {self.bottleneck} ({self.mode}-bound)"

    def name(self, resource: str) -> str:
        return resource

    def meaning(self, resource: str) -> str:
        return f"{resource}: device memory"


def _walk(mode: str) -> Any:
    spec = suite.get(GSMAP)
    return search(
        spec,
        "N=1048576",
        recorded_profile("h200"),
        lambda pv: ATTRS,
        emulator_of=lambda pv, blocks: FakeEmulator(pv, tuple(blocks)),
        analyse=lambda em, d, j: FakeSensitivity(mode),
    )


def test_neighbours_are_one_parameter_one_value_or_one_block_dimension_doubled_or_halved() -> None:
    spec = suite.get(GSMAP)
    start = SearchConfig(spec.param_values({"VEC": 2, "EPT": 1}), (256, 1, 1))
    got = neighbours(spec, start, lambda pv: [(128, 1, 1), (256, 1, 1), (512, 1, 1)])
    moves = {m: (dict(c.variant.items()), c.block) for c, m in got}
    assert moves == {
        "VEC 2 -> 1": ({"VEC": 1, "EPT": 1}, (256, 1, 1)),
        "VEC 2 -> 4": ({"VEC": 4, "EPT": 1}, (256, 1, 1)),
        "EPT 1 -> 2": ({"VEC": 2, "EPT": 2}, (256, 1, 1)),
        "block x doubled": ({"VEC": 2, "EPT": 1}, (512, 1, 1)),
        "block x halved": ({"VEC": 2, "EPT": 1}, (128, 1, 1)),
    }
    # A block the variant cannot launch is no neighbour.
    assert len(neighbours(spec, start, lambda pv: [(256, 1, 1)])) == 3


def test_throughput_bound_tries_least_time_on_the_resource_first_not_the_fastest() -> None:
    path = _walk("throughput")
    first = path.steps[0]
    assert dict(first.config.variant.items()) == {"VEC": 1, "EPT": 1}
    assert first.config.block == (256, 1, 1) and first.ms == pytest.approx(12000 / 1.98e6)
    # VEC 1 -> 2 and 128 threads emulate faster (6000 cycles) than EPT 1 -> 2 (8000), but EPT 2
    # spends the least time on DRAM (1/4 of 8000): the walk takes it.
    assert "EPT 1 -> 2" in first.why and dict(first.moved_to.variant.items())["EPT"] == 2
    _check_descends_to_the_minimum(path)


def test_latency_bound_tries_more_resident_warps_first() -> None:
    path = _walk("latency")
    # 512 threads (16 resident warps) come first but emulate slower (18000); of the rest, same
    # warps, the faster VEC 1 -> 2 (6000) precedes EPT 1 -> 2 (8000); 128 threads come last.
    assert "VEC 1 -> 2" in path.steps[0].why and "neighbour 2 of 4" in path.steps[0].why
    _check_descends_to_the_minimum(path)


def _check_descends_to_the_minimum(path: Any) -> None:
    times = [s.ms for s in path.steps]
    assert all(b < a for a, b in zip(times, times[1:]))
    last = path.chosen
    assert last.moved_to is None and last.why.startswith("stop: ")
    assert dict(last.config.variant.items()) == {"VEC": 2, "EPT": 4}
    assert last.config.block == (128, 1, 1)
    for s, nxt in zip(path.steps, path.steps[1:]):
        assert s.moved_to == nxt.config
    text = format_path(path)
    assert text.splitlines()[-1].endswith("emulated, not measured")
    assert "bottleneck: dram" in text


def test_a_kernel_without_program_parameters_is_refused() -> None:
    with pytest.raises(SearchError, match="no program parameters"):
        search(suite.get("polybench.gemm.gemm"), "N=1024", recorded_profile("h200"))


@needs_tools
def test_search_walks_a_compiled_kernel_on_emulated_times() -> None:
    spec = suite.get("tunables.transpose.transpose_tiles")
    path = search(spec, "N=1024", recorded_profile("h200"))
    assert path.steps[0].config == SearchConfig(spec.default_variant, spec.default_block)
    times = [s.ms for s in path.steps]
    assert all(math.isfinite(t) and t > 0 for t in times)
    assert all(b < a for a, b in zip(times, times[1:]))
    assert path.chosen.why.startswith("stop")
    assert all(s.bottleneck.startswith("bottleneck:") for s in path.steps)
    assert "cuobjdump" in path.attributes_source
    assert path.configurations_emulated >= len(path.steps)


# -- the joint space ranked, the K most promising, and the `saake` prior of budgeted builds ---


def test_most_promising_are_the_k_least_emulated_never_the_unemulated() -> None:
    spec = suite.get(GSMAP)
    a, b, c = (SearchConfig(spec.default_variant, (t, 1, 1)) for t in (64, 128, 256))
    emulated = {a: 3.0, b: math.inf, c: 1.0}
    assert most_promising(emulated, 2) == [c, a]
    assert most_promising(list(emulated.items()), 5) == [c, a]
    with pytest.raises(SearchError, match="at least 1"):
        most_promising(emulated, 0)


# -- the budgeted search: emulated order, stopped at a fraction of brute force's estimated cost --


def _cost(ms: float) -> float:
    """A cost model: 1 s of overhead a point plus the kernel time (in seconds, for the sums)."""
    return 1.0 + ms


def test_the_budgeted_search_measures_a_prefix_of_the_emulated_order() -> None:
    spec = suite.get(GSMAP)
    c = [SearchConfig(spec.default_variant, (t, 1, 1)) for t in (32, 64, 128, 256, 512)]
    ranking = [(c[0], 4.0), (c[1], math.inf), (c[2], 1.0), (c[3], 2.0), (c[4], 3.0)]
    # brute force: 2 + 3 + 4 + 5 + (1 + 3: the unemulated priced at the median, 3 ms) = 18 s
    plan = budgeted_plan(ranking, 0.3, _cost, order=EMULATED)
    assert plan.brute_force_estimate_s == pytest.approx(18.0)
    # the least emulated first, then the one that cannot be emulated (its list's first), then
    # the emulated rest: each list's share of any prefix follows its share of the space
    assert plan.order == (c[2], c[1], c[3], c[4], c[0])
    assert plan.estimated_s == (2.0, 4.0, 3.0, 4.0, 5.0)
    # 0.3 x 18 = 5.4 s: 2 fits, + 4 would not; the next cheaper ones are not skipped to.
    assert plan.chosen == (c[2],) and plan.estimated_cost_s == pytest.approx(2.0)
    assert plan.unemulated_measured == 0
    half = budgeted_plan(ranking, 0.5, _cost, order=EMULATED)  # 2 + 4 + 3 = 9 <= 9
    assert half.chosen == (c[2], c[1], c[3]) and half.unemulated_measured == 1
    assert budgeted_plan(ranking, 1.0, _cost, order=EMULATED).chosen == plan.order
    # The first is always measured, however small the budget.
    assert budgeted_plan(ranking, 0.01, _cost, order=EMULATED).chosen == (c[2],)


def test_what_cannot_be_emulated_gets_its_share_of_the_budget() -> None:
    # A histogram's case: only a quarter of the space emulates. Put last, the emulated quarter
    # took the whole budget; interleaved, any prefix holds each in proportion.
    spec = suite.get(GSMAP)
    blocks = [(32 * (i + 1), 1, 1) for i in range(16)]
    c = [SearchConfig(spec.default_variant, b) for b in blocks]
    ranking = [(x, float(i) if i < 4 else math.inf) for i, x in enumerate(c)]
    plan = budgeted_plan(ranking, 0.25, lambda ms: 1.0, order=EMULATED)
    assert len(plan.chosen) == 4 and plan.unemulated_measured == 3
    assert plan.order[0] == c[0]  # the least emulated first
    assert [x for x in plan.order if x in c[4:]] == c[4:]  # the static order kept among them


def test_variants_first_measures_every_variant_s_best_before_the_rest() -> None:
    spec = suite.get(GSMAP)
    a = spec.param_values({"VEC": 1, "EPT": 1})
    b = spec.param_values({"VEC": 2, "EPT": 1})
    c = spec.param_values({"VEC": 4, "EPT": 1})
    x = [SearchConfig(v, (t, 1, 1)) for v in (a, b, c) for t in (64, 128)]
    # emulation favours variant a twice over; b's and c's best come right after a's best
    ms = [1.0, 2.0, 3.0, 5.0, 4.0, 6.0]
    ranking = list(zip(x, ms, strict=True))
    assert [x[i] for i in variants_first(x, ms)] == [x[0], x[2], x[4], x[1], x[3], x[5]]
    plan = budgeted_plan(ranking, 0.5, lambda t: 1.0, order=PlanOrder.VARIANTS_FIRST)
    assert plan.chosen == (x[0], x[2], x[4])
    emulated = budgeted_plan(ranking, 0.5, lambda t: 1.0, order=EMULATED)
    assert emulated.chosen == (x[0], x[1], x[2])  # least emulated first
    # variants-first is the product's default (chosen on the tunables' training sizes)
    assert budgeted_plan(ranking, 0.5, lambda t: 1.0).chosen == plan.chosen
    # a variant that cannot be emulated keeps its share of any prefix, as in the emulated order
    ranking[5] = (x[5], math.inf)
    ms[5] = math.inf
    assert variants_first(x, ms)[:2] == [0, 5]


def test_without_any_emulated_time_the_static_order_is_measured() -> None:
    spec = suite.get(GSMAP)
    c = [SearchConfig(spec.default_variant, (t, 1, 1)) for t in (32, 64, 128, 256)]
    plan = budgeted_plan([(x, math.inf) for x in c], 0.5, _cost, order=EMULATED)
    # every point priced at the overhead alone (no time to go by): half of them, in given order
    assert plan.brute_force_estimate_s == pytest.approx(4.0)
    assert plan.chosen == (c[0], c[1]) and plan.unemulated_measured == 2


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, math.nan, math.inf, "abc", None])
def test_a_bad_budget_is_named(bad) -> None:  # noqa: ANN001
    with pytest.raises(SearchError, match="the search budget must be a fraction"):
        check_budget(bad)
    spec = suite.get(GSMAP)
    with pytest.raises(SearchError, match=repr(bad) if isinstance(bad, str) else "got"):
        budgeted_plan([(SearchConfig(spec.default_variant, (32, 1, 1)), 1.0)], bad, _cost)


def test_a_budgeted_search_needs_configurations_and_a_sane_cost_model() -> None:
    spec = suite.get(GSMAP)
    with pytest.raises(SearchError, match="no configuration"):
        budgeted_plan([], 0.25, _cost, order=EMULATED)
    one = [(SearchConfig(spec.default_variant, (32, 1, 1)), 1.0)]
    with pytest.raises(SearchError, match="cost model"):
        budgeted_plan(one, 0.25, lambda ms: 0.0)
    assert check_budget("0.25") == 0.25 and check_budget(1) == 1.0


def test_the_static_fallback_goes_outward_from_the_author_s_configuration() -> None:
    spec = suite.get(GSMAP)
    blocks = [(128, 1, 1), (256, 1, 1), (512, 1, 1)]
    start = SearchConfig(spec.param_values({"VEC": 1, "EPT": 1}), (256, 1, 1))

    def cfg(vec: int, ept: int, bx: int) -> SearchConfig:
        return SearchConfig(spec.param_values({"VEC": vec, "EPT": ept}), (bx, 1, 1))

    far, near, start_again, off = cfg(4, 8, 128), cfg(2, 1, 256), cfg(1, 1, 256), cfg(1, 1, 64)
    got = neighbourhood_order(spec, start, [far, off, near, start_again], lambda pv: blocks)
    # one move, then six moves away; a block no variant can launch is unreachable: last
    assert got == [start_again, near, far, off]
    joint = JointSpace(
        spec,
        "N=1048576",
        recorded_profile("h200"),
        lambda pv: ATTRS,
        emulator_of=lambda pv, bs: FakeEmulator(pv, tuple(bs)),
    )
    order = joint.search_order()
    assert len(order) == len(joint.configs()) and all(math.isfinite(ms) for _, ms in order)
    assert [ms for _, ms in order] == sorted(ms for _, ms in order)


def test_unemulated_variants_follow_in_the_static_order() -> None:
    spec = suite.get(GSMAP)

    def emulator_of(pv: ParamValues, bs: Any) -> FakeEmulator:
        if pv["VEC"] != 1:
            raise KlaraptorError("an exit depends on the kernel's data")
        return FakeEmulator(pv, tuple(bs))

    joint = JointSpace(
        spec, "N=1048576", recorded_profile("h200"), lambda pv: ATTRS, emulator_of=emulator_of
    )
    order = joint.search_order()
    emulated = [c for c, ms in order if math.isfinite(ms)]
    left = [c for c, ms in order if not math.isfinite(ms)]
    assert len(order) == len(joint.configs()) and emulated and left
    assert all(c.variant["VEC"] == 1 for c in emulated) and order[: len(emulated)] == [
        (c, joint.ms(c)) for c in emulated
    ]
    # the nearest unemulated to the author's configuration (VEC=1, EPT=1, 256 threads) first
    first = left[0]
    assert dict(first.variant.items()) == {"VEC": 2, "EPT": 1} and first.block == (256, 1, 1)
    assert left == neighbourhood_order(spec, joint.default, left, joint.blocks_of)


def test_the_walk_records_every_configuration_it_emulated() -> None:
    path = _walk("throughput")
    emulated = dict(path.emulated)
    assert len(emulated) == path.configurations_emulated
    assert all(s.config in emulated and emulated[s.config] == s.ms for s in path.steps)


def _configs(spec, variants, blocks):  # noqa: ANN001, ANN202
    from klaraptor.core.types import Config

    return [Config(spec.param_values(v), b) for v in variants for b in blocks]


def test_prior_order_ranks_configurations_by_emulated_time() -> None:
    spec = suite.get(GSMAP)
    variants = [{"VEC": 1, "EPT": 1}, {"VEC": 2, "EPT": 4}, {"VEC": 4, "EPT": 8}]
    cands = _configs(spec, variants, [(64, 1, 1), (128, 1, 1)])

    def emulator_of(pv, blocks):  # noqa: ANN001, ANN202
        if pv["VEC"] == 4:  # as a variant whose trip counts need the kernel's data
            raise SearchError("an exit depends on data")
        return FakeEmulator(pv, tuple(blocks))

    got = prior_order(
        spec,
        "N=1048576",
        cands,
        recorded_profile("h200"),
        lambda pv: ATTRS,
        emulator_of=emulator_of,
    )
    assert sorted(map(id, got)) == sorted(map(id, cands))
    emulated = [c for c in got if dict(c.params.items())["VEC"] != 4]
    costs = [_cycles(c.params, c.block) for c in emulated]
    assert costs == sorted(costs) and got[0].block == (128, 1, 1)
    # the two that cannot be emulated (a third of them) interleaved by share, in given order
    assert [i for i, c in enumerate(got) if dict(c.params.items())["VEC"] == 4] == [1, 4]
    with pytest.raises(SearchError, match="none can be emulated.*exit depends on data"):
        prior_order(
            spec,
            "N=1048576",
            cands[4:],
            recorded_profile("h200"),
            lambda pv: ATTRS,
            emulator_of=emulator_of,
        )


def test_saake_is_a_prior_for_kernels_with_program_parameters() -> None:
    from klaraptor.models import model_tags, priors

    assert "saake" in priors() and "snowpack" in priors()
    assert model_tags("saake").ranks_params and not model_tags("snowpack").ranks_params


def test_a_budgeted_plan_sweeps_in_the_saake_order(monkeypatch) -> None:  # noqa: ANN001
    from klaraptor.assemble.planned import make_plan
    from klaraptor.models.saake.model import SaakeModel

    spec = suite.get(GSMAP)
    cands = _configs(spec, [{"VEC": 1, "EPT": 1}, {"VEC": 2, "EPT": 4}], [(64, 1, 1), (128, 1, 1)])

    def rank(self, spec, D, candidates, *, device, store):  # noqa: ANN001, ANN202
        return prior_order(
            spec,
            D,
            candidates,
            device,
            lambda pv: ATTRS,
            emulator_of=lambda pv, b: FakeEmulator(pv, tuple(b)),
        )

    monkeypatch.setattr(SaakeModel, "rank", rank)
    plan, _ = make_plan(
        spec,
        recorded_profile("h200"),
        cands,
        [spec.size(n) for n in spec.meta["train_sizes"]],
        prior="saake",
        prior_keep=2,
    )
    # The fake emulator's cheapest: VEC=2, EPT=4 at 128 threads, then at 64.
    assert plan.sweep() == [3, 2]
    with pytest.raises(KlaraptorError, match="unknown prior 'nope'.*saake"):
        make_plan(
            spec,
            recorded_profile("h200"),
            cands,
            [spec.size(n) for n in spec.meta["train_sizes"]],
            prior="nope",
        )


@needs_tools
def test_prior_order_on_a_compiled_kernel() -> None:
    spec = suite.get("tunables.transpose.transpose_tiles")
    cands = _configs(
        spec, [{"TILE": 32, "RPT": 4}, {"TILE": 32, "RPT": 1}], [(32, 8, 1), (32, 2, 1), (32, 4, 1)]
    )
    got = prior_order(spec, "N=1024", cands, recorded_profile("h200"))
    assert sorted(map(id, got)) == sorted(map(id, cands))
    from klaraptor.models.saake.search import JointSpace

    joint = JointSpace(spec, "N=1024", recorded_profile("h200"))
    ms = [joint.ms(SearchConfig(c.params, c.block)) for c in got]
    assert all(math.isfinite(t) for t in ms) and ms == sorted(ms)
