"""The build pipeline: every build is the same sequence of steps.

1. `resolve_device`: the GPU the build is for (given, the Dask workers', or this machine's).
2. `make_build_plan`: what to measure, a `BuildPlan` (what `klaraptor.plan` returns too):
   `FullSweep` (budget=None: every candidate at every training size, as KLARAPTOR does) or
   `BudgetedPlan` (`klaraptor.assemble.planned`).
3. `BuildPlan.collect`: the plan run on this machine's GPU, on a Dask cluster's, or replayed over
   the points already in the store (no GPU).
4. `BuildPlan.job`: the model's job (training points and candidates) from the store.
5. `choose_model`: `model="auto"` chooses by a ×2 fold of the training data.
6. `fit`: the model makes the helper program.
7. `store_build`: the helper program and its report go to the store; the Kernel is returned.

A model that needs no measurements (e.g. snowpack) skips steps 2-4 (`build_unmeasured`, in
`klaraptor.assemble.storing` with `store_build`, which `load` shares)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from klaraptor.assemble.jobs import (
    current_profile,
    launchable,
    make_job,
    stored_arg_bytes,
    variant_attributes,
)
from klaraptor.assemble.kernel import Kernel
from klaraptor.assemble.loading import load
from klaraptor.assemble.model_selection import select_model
from klaraptor.assemble.planned import (
    format_plan,
    ladder_sizes,
    make_plan,
    plan_repr,
    planned_training,
    replay_from_store,
)
from klaraptor.assemble.report import (
    BuildReport,
    CollectionSummary,
    ModelSelection,
    PlanSummary,
    PriorOrder,
)
from klaraptor.assemble.storing import store_build
from klaraptor.collect.plan import CostModel, MeasurementPlan, PlanResult
from klaraptor.core.errors import BuildError
from klaraptor.core.types import Block, Config, DataSize, KernelAttributes, ParamValues
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit.training import FitOptions
from klaraptor.models import HelperJob, get_model, is_budgeted
from klaraptor.space.configspace import ConfigSpace, PlannedPoint
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

if TYPE_CHECKING:
    from klaraptor.collect.collector import CollectOptions, CollectReport
    from klaraptor.collect.dask import DaskExecutor

# A warm collection worker's start of a job on the H200 (0.04-0.09 s, bench_cost at b54eaa0).
WARM_SESSION_S = 0.06

# A kernel's attributes: one set, or (with program parameters) one per compiled variant.
Attributes = KernelAttributes | dict[ParamValues, KernelAttributes]


@dataclass(frozen=True)
class BuildRequest:
    """A build's checked arguments (see `klaraptor.assemble.api.build`). `collect_data`: measure
    on a GPU (this machine's, or the Dask cluster's through `executor`); else replay the store's
    points. `budget` None: the full sweep."""

    spec: KernelSpec
    sizes: list[DataSize]
    model: str
    budget: float | None
    store: Store
    device: DeviceProfile | None
    collect_data: bool
    collect_options: CollectOptions | None
    fit: FitOptions | None
    cost: CostModel | None
    progress: bool
    executor: DaskExecutor | None  # collect on a Dask cluster's GPUs
    prior: str | None
    prior_keep: int | None

    def options(self) -> CollectOptions:
        from klaraptor.collect.collector import CollectOptions

        return self.collect_options or CollectOptions()


@dataclass(frozen=True)
class Collected:
    """What the collect step leaves: the device (a GPU query may refine it), the summary for
    the report (None when nothing was measured or planned) and, for a budgeted plan, the plan
    as run."""

    device: DeviceProfile
    summary: CollectionSummary | None
    executed: PlanResult | None = None


@runtime_checkable
class BuildPlan(Protocol):
    """What a build measures, and what `klaraptor.plan` shows: it collects (on a GPU or over the
    store) and makes the job; `plan` is the budgeted measurement plan (None for the full sweep),
    iterating gives the dry run's points (feasible or rejected, at the plan's sizes) and
    `format()` describes it all. `FullSweep` and `BudgetedPlan` are its two forms."""

    @property
    def spec(self) -> KernelSpec: ...
    @property
    def plan(self) -> MeasurementPlan | None: ...
    @property
    def executed(self) -> PlanResult | None: ...
    @property
    def points(self) -> list[PlannedPoint]: ...

    def collect(self, req: BuildRequest, device: DeviceProfile) -> Collected: ...

    def job(self, req: BuildRequest, collected: Collected) -> HelperJob: ...

    def format(self) -> str: ...


def run(req: BuildRequest, t0: float) -> Kernel:
    """The measured build of `req` (module docstring); `t0` is when build() was called."""
    device = resolve_device(req)
    device, plan = make_build_plan(req, device)
    collected = plan.collect(req, device)
    t_fit = time.perf_counter()
    job = plan.job(req, collected)
    model, selection, job = choose_model(req.model, job)
    helper, fits = get_model(model).make_helper(job)
    report = BuildReport(
        sizes=list(req.sizes),
        model=model,
        fit_wall_s=time.perf_counter() - t_fit,
        total_wall_s=time.perf_counter() - t0,
        collect=collected.summary,
        fits=fits,
        device_driver=collected.device.driver,
        selection=selection,
    )
    # also findable as the "auto" build when auto chose it
    names = (model, "auto") if selection is not None else (model,)
    return store_build(
        req.spec, req.store, collected.device, names, helper, report, job.rejected, loader=load
    )


def resolve_device(req: BuildRequest) -> DeviceProfile:
    """The GPU the build is for: the one given, else the Dask workers' GPU model (measured once
    on a worker when the store has no profile), else this machine's."""
    if req.device is not None:
        return req.device
    if not req.collect_data:
        raise BuildError(
            f"{req.spec.name}: no GPU to collect on; pass device= (e.g. recorded_profile('h200')) "
            "to build from measurements already in the store"
        )
    if req.executor is not None:
        return req.executor.device_profile(req.store)
    return current_profile(req.store)


def make_build_plan(req: BuildRequest, device: DeviceProfile) -> tuple[DeviceProfile, BuildPlan]:
    """The full sweep without a budget; with one, the budgeted plan (which needs the kernel's
    attributes: a GPU query that may refine the device)."""
    if req.budget is None:
        return device, FullSweep(req.spec, tuple(req.sizes), device)
    return BudgetedPlan.make(req, device, req.budget)


class _Shown:
    """What both forms of a BuildPlan show (`klaraptor.plan`, `klaraptor build --dry-run`)."""

    spec: KernelSpec
    plan: MeasurementPlan | None
    executed: PlanResult | None
    cold_reason: str

    @property
    def points(self) -> list[PlannedPoint]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[PlannedPoint]:
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)

    def __repr__(self) -> str:
        return plan_repr(self.spec, self.points, self.plan)

    def format(self) -> str:
        return format_plan(self.spec, self.points, self.plan, self.cold_reason, self.executed)


@dataclass(frozen=True, repr=False)
class FullSweep(_Shown):
    """Every candidate at every training size (budget=None), as KLARAPTOR collects. `device`
    (None: no device limits) and `space` (None: the spec's) give the dry run's points."""

    spec: KernelSpec
    sizes: tuple[DataSize, ...]
    device: DeviceProfile | None = None
    space: ConfigSpace | None = None
    plan: None = None  # no budgeted measurement plan: every point is timed
    executed: None = None
    cold_reason: str = ""

    @functools.cached_property
    def points(self) -> list[PlannedPoint]:  # type: ignore[override]
        space = self.space or ConfigSpace.for_spec(self.spec)
        return space.dry_run(self.spec, list(self.sizes), self.device)

    def collect(self, req: BuildRequest, device: DeviceProfile) -> Collected:
        if not req.collect_data:
            return Collected(device, None)
        from klaraptor.collect.collector import collect

        rep = collect(
            req.spec,
            req.sizes,
            store=req.store,
            device=device,
            options=req.options(),
            progress=req.progress,
            executor=req.executor,
        )
        return Collected(device, CollectionSummary(rep.wall_s, rep.counts, rep.ncu_status))

    def job(self, req: BuildRequest, collected: Collected) -> HelperJob:
        job = make_job(req.spec, req.store, collected.device, req.sizes, fit=req.fit)
        # a per-configuration model fits each candidate from that candidate's points
        return job if is_budgeted(req.model) else job.measured_only()


@dataclass(frozen=True, repr=False)
class BudgetedPlan(_Shown):
    """A measurement plan within a budget (`klaraptor.assemble.planned`), over `candidates`
    (its cfg indices point into them), run in one session on one GPU. Its points are the dry
    run at the plan's sizes (`device` None: without device limits); `executed`, for a plan
    shown by `klaraptor.plan`, is the plan run over the store's measurements when it has any."""

    spec: KernelSpec
    sizes: tuple[DataSize, ...]
    plan: MeasurementPlan
    candidates: list[Block | Config]
    attrs: Attributes | None
    info: CollectReport | None  # the GPU query that gave the attributes, when measured
    summary: CollectionSummary  # the budget, the cold-timing decision, the prior's order
    t0: float  # when planning began (the plan's wall time counts from there)
    device: DeviceProfile | None = None
    space: ConfigSpace | None = None
    executed: PlanResult | None = None
    known_points: list[PlannedPoint] | None = None  # the dry run, where already made

    @property
    def cold_reason(self) -> str:  # type: ignore[override]
        return self.summary.cold_timings or ""

    @functools.cached_property
    def points(self) -> list[PlannedPoint]:  # type: ignore[override]
        if self.known_points is not None:
            return self.known_points
        L, smaller = ladder_sizes(self.sizes)
        space = self.space or ConfigSpace.for_spec(self.spec)
        return space.dry_run(self.spec, [L, *smaller], self.device, self.attrs)

    @classmethod
    def make(
        cls, req: BuildRequest, device: DeviceProfile, budget: float
    ) -> tuple[DeviceProfile, BudgetedPlan]:
        t0 = time.perf_counter()
        device, attrs, info = kernel_attributes(req, device)
        facts = req.store.collect_facts(req.spec.name, device.key)
        arg_bytes = () if facts is None else stored_arg_bytes(req.spec, facts.arg_bytes)
        smallest = min(req.sizes, key=DataSize.values)
        candidates, _ = launchable(req.spec, device, attrs, smallest, admit_at=req.sizes)
        plan, why = make_plan(
            req.spec,
            device,
            candidates,
            req.sizes,
            arg_bytes=arg_bytes,
            budget=budget,
            cost=req.cost if req.cost is not None else session_cost(req.executor is None),
            prior=req.prior,
            prior_keep=req.prior_keep,
            store=req.store,
        )
        prior = None
        if req.prior is not None:
            sweep = plan.sweep()
            blocks = [  # a configuration with program parameters: its values and block
                {"params": dict(c.params.items()), "block": list(c.block)}
                if isinstance(c := candidates[i], Config)
                else list(c)
                for i in sweep
            ]
            prior = PriorOrder(req.prior, req.prior_keep, list(sweep), blocks)
        summary = CollectionSummary(budget=budget, cold_timings=why, prior=prior)
        sizes = tuple(req.sizes)
        return device, cls(req.spec, sizes, plan, candidates, attrs, info, summary, t0, device)

    def collect(self, req: BuildRequest, device: DeviceProfile) -> Collected:
        if req.collect_data:
            executed, summary = self._measured(req, device)
        else:
            executed = replay_from_store(
                self.plan, req.spec, req.store, device.key, self.candidates
            )
            summary = replace(self.summary, measured=False)
        if not executed.points:
            raise BuildError(
                f"{req.spec.name}: no candidate could be timed at the largest training size "
                f"{ladder_sizes(req.sizes)[0]} (see the store's failed points)"
            )
        summary = replace(
            summary, plan=PlanSummary.of(executed), plan_wall_s=time.perf_counter() - self.t0
        )
        return Collected(device, summary, executed)

    def _measured(
        self, req: BuildRequest, device: DeviceProfile
    ) -> tuple[PlanResult, CollectionSummary]:
        """The plan run on the GPU, in one session (this machine's, or one Dask worker's)."""
        from klaraptor.collect.collector import collect_plan

        # a measured build queried the GPU for the attributes
        assert self.info is not None and self.attrs is not None
        rep, executed = collect_plan(
            req.spec,
            self.plan,
            self.candidates,
            store=req.store,
            device=device,
            attrs=self.attrs,
            options=req.options(),
            progress=req.progress,
            executor=req.executor,
        )
        rep.wall_s["info"] = self.info.wall_s.get("info", 0.0)
        summary = replace(
            self.summary,
            wall_s=rep.wall_s,
            counts=rep.counts,
            ncu=rep.ncu_status,
            measured=True,
            worker={"info": dict(self.info.worker), "plan": dict(rep.worker)},  # where time went
        )
        return executed, summary

    def job(self, req: BuildRequest, collected: Collected) -> HelperJob:
        executed = collected.executed
        assert executed is not None  # collect() ran the plan
        used = {DataSize(req.spec.data_names, tuple(p["D"])) for p in executed.points}
        job = make_job(
            req.spec,
            req.store,
            collected.device,
            sorted(used, key=DataSize.values),
            fit=req.fit,
            launch_size=min(req.sizes, key=DataSize.values),
            admit_at=req.sizes,  # the plan's candidates: its cfg indices point into them
        )
        job.train = planned_training(job.train, executed, job.candidates)
        return job


def session_cost(local: bool) -> CostModel | None:
    """The plan's cost model when the build does not give one: the default, with a warm
    worker's session start-up where the session will run on one (a local collection with warm
    workers on). The default prices a fresh worker process (0.65 s); a warm worker starts a job
    in 0.04-0.09 s (H200, benchmarks/bench_cost.py at b54eaa0), and the budget, a multiple of
    tune-once's cost, must not multiply a start-up nobody pays."""
    from klaraptor.collect import warm
    from klaraptor.collect.plan import H200_COST

    if not (local and warm.enabled()):
        return None
    return replace(H200_COST, session_s=WARM_SESSION_S)


def kernel_attributes(
    req: BuildRequest, device: DeviceProfile
) -> tuple[DeviceProfile, Attributes, CollectReport | None]:
    """The kernel's attributes: queried on the GPU (which gives the device's final profile and
    a report of the query), else the store's."""
    if req.collect_data:
        from klaraptor.collect.collector import collect_info

        return collect_info(
            req.spec,
            req.sizes,
            store=req.store,
            device=device,
            options=req.options(),
            executor=req.executor,
        )
    facts = req.store.collect_facts(req.spec.name, device.key)
    if facts is None or facts.attributes is None:
        raise BuildError(
            f"{req.spec.name}: the store has no kernel attributes for {device.key!r}; collect first"
        )
    attrs = variant_attributes(req.spec, facts) if req.spec.params else facts.attributes
    return device, attrs, None


def choose_model(model: str, job: HelperJob) -> tuple[str, ModelSelection | None, HelperJob]:
    """The model to fit and, for `model="auto"`, how it was chosen; the job it fits."""
    if model != "auto":
        return model, None, job
    chosen, selection = select_model(job)
    if not is_budgeted(chosen):
        # A per-configuration model chosen over a plan's points: only the candidates the plan
        # timed can be fitted (a prior's cut leaves the others without any point).
        job = job.measured_only()
    return chosen, selection, job
