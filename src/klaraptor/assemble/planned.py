"""The budgeted build: which (block, size) points a build measures, hot or L2-flushed.

`make_plan` turns a kernel's training sizes into a `klaraptor.collect.plan.MeasurementPlan`: the
largest size L (every candidate, hot: tune-once's own sweep), the ladder of smaller sizes (the
largest ≤ L/2, then the largest ≤ half of that, by the product of the data parameters), and
whether cold timings are needed: the argument footprint fits in the L2 at L but not at the upper
end of the spec's data ranges (the sizes of use are unknown at build time; the ranges are what
the spec allows). `planned_training` runs the plan over measurements already in a store (no GPU:
the recorded datasets hold every candidate at every training size, so this is the plan's
sub-sample of them) and returns the training points it used. `format_plan` describes a build
plan (`klaraptor.assemble.pipeline.BuildPlan`, what `plan()` returns): the points, the plan's
steps and, where the store has the kernel's measurements, the executed plan with its cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from klaraptor.collect.plan import CostModel, MeasurementPlan, PlanResult, ReplayMeasurer
from klaraptor.core.errors import BuildError
from klaraptor.core.types import Block, Config, DataSize, ParamValues
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit.training import TrainingSet
from klaraptor.space.configspace import PlannedPoint, format_dry_run
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

DEFAULT_BUDGET = 1.5

__all__ = [
    "DEFAULT_BUDGET",
    "format_plan",
    "ladder_sizes",
    "make_plan",
    "plan_keys",
    "plan_repr",
    "planned_training",
    "replay_from_store",
]


def _scalar(D: DataSize) -> float:
    return float(np.prod(np.asarray(D.values(), dtype=np.float64)))


def ladder_sizes(sizes: Sequence[DataSize]) -> tuple[DataSize, list[DataSize]]:
    """(L, smaller): the largest size, then the largest ≤ L/2 and the largest ≤ half of that
    (by the product of the data parameters)."""
    by = sorted(set(sizes), key=lambda D: (_scalar(D), D.values()))
    L = by[-1]
    out: list[DataSize] = []
    top = _scalar(L)
    for _ in range(2):
        below = [D for D in by if _scalar(D) <= top / 2]
        if not below:
            break
        out.append(below[-1])
        top = _scalar(below[-1])
    return L, out


def needs_cold(
    spec: KernelSpec, L: DataSize, arg_bytes: Sequence[tuple[DataSize, int]], l2_bytes: float
) -> tuple[bool, str]:
    """Whether the footprint crosses the L2 between L and the top of the spec's ranges, and why."""
    from klaraptor.models.scaling_model import argument_footprint

    fp = argument_footprint(spec.data_names, arg_bytes)
    if fp is None:
        return True, "argument bytes unknown: cold timings planned in case"
    top = [float(p.hi) for p in spec.data]
    at_L, at_top = (float(v) for v in fp.bytes([L.values(), top]))
    if at_L > l2_bytes:
        return False, f"the arguments ({at_L / 1e6:.0f} MB) exceed the L2 already at L"
    if at_top <= l2_bytes:
        return False, "the arguments fit in the L2 over the whole data range"
    return (
        True,
        f"arguments {at_L / 1e6:.1f} MB at L, beyond the L2 ({l2_bytes / 1e6:.0f} MB) later",
    )


def setup_scale(
    spec: KernelSpec,
    L: DataSize,
    smaller: Sequence[DataSize],
    arg_bytes: Sequence[tuple[DataSize, int]],
) -> tuple[float, ...]:
    """Each smaller size's argument bytes over L's (what bounds its set-up's cost over L's;
    `MeasurementPlan.setup_scale`), () when the bytes are unknown."""
    from klaraptor.models.scaling_model import argument_footprint

    fp = argument_footprint(spec.data_names, arg_bytes) if smaller else None
    if fp is None:
        return ()
    at = [float(v) for v in fp.bytes([L.values(), *(D.values() for D in smaller)])]
    if not (at[0] > 0 and all(math.isfinite(v) and v > 0 for v in at)):
        return ()
    return tuple(min(1.0, v / at[0]) for v in at[1:])


def make_plan(
    spec: KernelSpec,
    device: DeviceProfile,
    candidates: Sequence[Block | Config],
    sizes: Sequence[DataSize],
    *,
    arg_bytes: Sequence[tuple[DataSize, int]] = (),
    budget: float = DEFAULT_BUDGET,
    cost: CostModel | None = None,
    counters: bool = False,
    prior: str | None = None,
    prior_keep: int | None = None,
    store: Store | None = None,
) -> tuple[MeasurementPlan, str]:
    """The plan of a budgeted build (module docstring) and why it does or skips cold timings.
    `prior="snowpack"`: sweep the largest training size in SNOWPACK's order (no measurement
    needed; the store's model for this GPU, else the shipped one), only its first `prior_keep`
    candidates when given; `prior="saake"`: in order of emulated time there (program parameters
    included); any model tagged `ranks_without_measuring` (`models.priors()`)."""
    L, smaller = ladder_sizes(sizes)
    order: tuple[int, ...] = ()
    if prior is not None:
        from klaraptor.models import get_model, priors

        if prior not in priors():
            raise BuildError(
                f"unknown prior {prior!r}: a prior is a model that ranks candidates without "
                f"measuring ({', '.join(priors())})"
            )
        model = get_model(prior)
        if spec.params and not model.tags.ranks_params:
            raise BuildError(
                f"{spec.name}: the {prior} prior ranks blocks of one compiled kernel; a kernel "
                "with program parameters is planned without it"
            )
        ranked = model.rank(spec, L, list(candidates), device=device, store=store)

        def key(c: Block | Config) -> Any:  # a Config is its own key; a block its tuple
            return c if isinstance(c, Config) else tuple(c)

        index = {key(c): i for i, c in enumerate(candidates)}
        order = tuple(index[key(c)] for c in ranked)
    elif prior_keep is not None:
        from klaraptor.models import priors

        raise BuildError(f"prior_keep needs a prior (prior= one of {', '.join(priors())})")
    cold, why = needs_cold(spec, L, arg_bytes, float(device.l2_bytes))
    kw: dict[str, Any] = {} if cost is None else {"cost": cost}
    scale = setup_scale(spec, L, smaller, arg_bytes)
    if scale:
        kw["setup_scale"] = scale
    plan = MeasurementPlan(
        n_cfg=len(candidates),
        L=L.values(),
        smaller=tuple(D.values() for D in smaller),
        budget=float(budget),
        needs_cold=cold,
        counters=counters,
        prior=order,
        prior_keep=prior_keep,
        **kw,
    )
    return plan, why


def plan_keys(
    plan: MeasurementPlan, names: Sequence[str], candidates: Sequence[Block | Config]
) -> dict[tuple[DataSize, Config, bool], tuple[tuple[int, ...], int, bool]]:
    """(D, configuration, cold) → the plan's key, for every point the plan could ask for."""
    out = {}
    sizes = [plan.L, *plan.smaller]
    for D in sizes:
        for i, b in enumerate(candidates):
            c = b if isinstance(b, Config) else Config(ParamValues.NONE, tuple(b))  # type: ignore[arg-type]
            for cold in (False, True) if D == plan.L else (False,):
                out[(DataSize(tuple(names), tuple(D)), c, cold)] = (tuple(D), i, cold)
    return out  # type: ignore[return-value]


def replay_from_store(
    plan: MeasurementPlan,
    spec: KernelSpec,
    store: Store,
    device_key: str,
    candidates: Sequence[Block | Config],
) -> PlanResult:
    """The plan run over the measurements in `store` (a point it asks for that the store does
    not hold counts as one that did not run)."""
    from klaraptor.collect.collector import known_plan_results

    known = known_plan_results(
        store, spec, device_key, plan_keys(plan, spec.data_names, candidates)
    )
    return plan.run(ReplayMeasurer(known, exists=set(known)))


def planned_training(
    train: TrainingSet, result: PlanResult, candidates: Sequence[Block | Config]
) -> TrainingSet:
    """The points of `train` the plan used: its hot points, with the cold timing only where the
    plan took it and counters only where it profiled (the store may hold more)."""
    hot = {(tuple(p["D"]), int(p["cfg"])) for p in result.points if p["kind"] == "time"}
    cold = {(tuple(p["D"]), int(p["cfg"])) for p in result.points if p["kind"] == "cold"}
    profiled = {(tuple(int(v) for v in p["D"]), int(p["cfg"])) for p in result.counters}
    index = {b: i for i, b in enumerate(candidates)}
    rows, keep_cold = [], []
    for i in range(train.n):
        key = (tuple(int(v) for v in train.D[i]), index.get(train.key(i), -1))
        if key in hot:
            rows.append(i)
            keep_cold.append(key in cold)
    out = train.take(rows)
    for j, i in enumerate(rows):
        if (tuple(int(v) for v in train.D[i]), index[train.key(i)]) not in profiled:
            d = train.derived[i]
            out.derived[j] = {k: d[k] for k in ("time_ms", "warps") if k in d}
    assert out.cold_ms is not None and out.cold_spread is not None
    mask = ~np.array(keep_cold, dtype=bool)
    out.cold_ms[mask] = math.nan
    out.cold_spread[mask] = math.nan
    return out


def plan_repr(
    spec: KernelSpec, points: Sequence[PlannedPoint], plan: MeasurementPlan | None
) -> str:
    """A build plan in one line (`klaraptor.assemble.pipeline.BuildPlan`'s repr)."""
    feasible = sum(p.status == "measure" for p in points)
    sizes = len({p.D for p in points})
    how = "full collection" if plan is None else f"budget {plan.budget:g}×"
    return (
        f"<BuildPlan {spec.name}: {feasible} feasible points over {sizes} sizes, "
        f"{len(points) - feasible} rejected; {how} (.format() shows it)>"
    )


def format_plan(
    spec: KernelSpec,
    points: Sequence[PlannedPoint],
    plan: MeasurementPlan | None,
    cold_reason: str,
    executed: PlanResult | None,
) -> str:
    """What a build plan measures, in full: the dry run's points and, for a budgeted plan, its
    steps, why it does or skips cold timings, and its cost over the store's measurements."""
    text = format_dry_run(
        list(points), title=spec.name, show_measured=plan is None, budgeted=plan is not None
    )
    if plan is None:
        return text + "\nfull collection: every point above is timed (no budget)"
    lines = [text, "", "budgeted plan:", plan.describe(), f"cold timings: {cold_reason}"]
    if executed is None:
        lines.append(
            "estimated cost: unknown until the kernel's times are known (no measurement of it "
            "in the store); the plan never spends more than the budget"
        )
    else:
        r = executed
        c = r.counts()
        lines.append(
            f"executed over the store's measurements: {c.get('time', 0)} hot and "
            f"{c.get('cold', 0)} cold timings, {r.spent_s:.2f} s estimated against "
            f"tune-once's {r.tune_once_s:.2f} s ({r.ratio:.2f}×, budget {plan.budget:g}×)"
        )
        lines += [f"  {n}" for n in r.notes]
    return "\n".join(lines)
