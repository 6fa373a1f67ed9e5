"""build(): plan → collect → fit → helper program, kept in the store; load(): bring a build
back (`klaraptor.assemble.loading`); plan(): what a build would measure, without a GPU.

A build measures under a budget by default (`budget=1.5`: at most 1.5 × the cost of one sweep of
every candidate at the largest training size, counters included; `klaraptor.assemble.planned`).
`budget=None` collects every candidate at every training size, as KLARAPTOR does. Every build
runs the same steps (`klaraptor.assemble.pipeline`)."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from klaraptor.assemble.arguments import check_device, check_spec, check_store
from klaraptor.assemble.jobs import (
    current_profile,
    job_from_training,
    launchable,
    make_job,
    stored_arg_bytes,
    training_sizes,
    variant_attributes,
)
from klaraptor.assemble.kernel import Kernel
from klaraptor.assemble.loading import load
from klaraptor.assemble.pipeline import BudgetedPlan, BuildPlan, BuildRequest, FullSweep, run
from klaraptor.assemble.planned import (
    DEFAULT_BUDGET,
    ladder_sizes,
    make_plan,
    replay_from_store,
)
from klaraptor.assemble.report import CollectionSummary
from klaraptor.assemble.storing import build_unmeasured, check_params_model
from klaraptor.backends.cupy_backend import gpu_available
from klaraptor.collect.plan import CostModel
from klaraptor.core.errors import BuildError
from klaraptor.core.types import Block, Config
from klaraptor.core.validate import check_bool, check_budget, check_instance, check_int, check_text
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit.training import FitOptions
from klaraptor.models import get_model, is_budgeted
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

if TYPE_CHECKING:
    from klaraptor.collect.dask import DaskExecutor

__all__ = [
    "DEFAULT_MODEL",
    "build",
    "current_profile",
    "job_from_training",
    "launchable",
    "load",
    "make_job",
    "plan",
    "training_sizes",
    "variant_attributes",
]

DEFAULT_MODEL = "auto"


def plan(
    spec: KernelSpec,
    sizes: Iterable[Any] | None = None,
    *,
    device: DeviceProfile | None = None,
    space: ConfigSpace | None = None,
    budget: float | None = DEFAULT_BUDGET,
    store: Store | None = None,
    prior: str | None = None,
    prior_keep: int | None = None,
    model: str = DEFAULT_MODEL,
) -> BuildPlan:
    """What a build would measure, or refuse with the reason, without a GPU: the pipeline's own
    plan (`FullSweep` or `BudgetedPlan`; iterates over the points; `.format()` prints it).

    Device limits apply when `device` is given (e.g. `recorded_profile("h200")`). With a budget,
    the points are those at the plan's sizes and the plan's steps are described; when `store`
    holds measurements of the kernel on `device`, the plan is executed over them and its
    estimated cost shown. `budget=None`: every point of every training size. `prior`,
    `prior_keep`, `model`: as `build` (a model that fits each configuration, such as time_fit,
    measures every point whatever the budget, so its plan is the full collection)."""
    spec, budget, store = check_spec(spec), check_budget(budget), check_store(store)
    device = check_device(device)
    check_instance(space, ConfigSpace, "space=", "ConfigSpace.for_spec(spec)")
    _check_prior(prior, prior_keep)
    if _model_measures_all(model):
        budget = None
    size_list = tuple(training_sizes(spec, sizes))
    if budget is None:
        return FullSweep(spec, size_list, device, space)
    space = space or ConfigSpace.for_spec(spec)
    t0 = time.perf_counter()
    L, smaller = ladder_sizes(size_list)
    facts = None
    if store is not None and device is not None:
        facts = store.collect_facts(spec.name, device.key)
    attrs = None if facts is None else facts.attributes
    points = space.dry_run(spec, [L, *smaller], device, attrs)
    candidates: list[Block | Config] = [  # configurations (variant, block) with parameters
        Config(p.params, p.block) if spec.params else p.block
        for p in points
        if p.D == L and p.status == "measure"
    ]
    if device is None:
        from klaraptor.device.profile import recorded_profile

        device_for_plan = recorded_profile("h200")
    else:
        device_for_plan = device
    arg_bytes = () if facts is None else stored_arg_bytes(spec, facts.arg_bytes)
    mplan, why = make_plan(
        spec,
        device_for_plan,
        candidates,
        size_list,
        arg_bytes=arg_bytes,
        budget=budget,
        prior=prior,
        prior_keep=prior_keep,
        store=store,
    )
    executed = None
    if store is not None and device is not None and store.kernel(spec.name) is not None:
        result = replay_from_store(mplan, spec, store, device.key, candidates)
        executed = result if result.points else None
    return BudgetedPlan(
        spec=spec,
        sizes=size_list,
        plan=mplan,
        candidates=candidates,
        attrs=attrs,
        info=None,
        summary=CollectionSummary(budget=budget, cold_timings=why),
        t0=t0,
        device=device,
        space=space,
        executed=executed,
        known_points=points,
    )


def _check_prior(prior: Any, prior_keep: Any) -> None:
    """prior is None or a name; prior_keep None or a positive int, and only with a prior."""
    if prior is not None:
        check_text(prior, "prior", BuildError)
    if prior_keep is not None:
        check_int(prior_keep, "prior_keep", minimum=1, error=BuildError)


def _model_measures_all(model: Any) -> bool:
    """Whether `model` fits each configuration (so measures every candidate at every size);
    an unknown name is refused naming the registered ones."""
    check_text(model, "model")
    if is_budgeted(model):
        return False
    return get_model(model).needs_measurements


def build(
    spec: KernelSpec,
    sizes: Iterable[Any] | None = None,
    *,
    model: str = DEFAULT_MODEL,
    budget: float | None = DEFAULT_BUDGET,
    store: Store | None = None,
    device: DeviceProfile | None = None,
    collect_options: Any | None = None,
    collect_data: bool | None = None,
    fit: FitOptions | None = None,
    cost: CostModel | None = None,
    progress: bool = True,
    client: Any | None = None,
    prior: str | None = None,
    prior_keep: int | None = None,
) -> Kernel:
    """Collect (where needed), fit and store the helper program of `spec`; returns the Kernel.

    `budget` (default 1.5): measure under a plan costing at most that multiple of one sweep of
    every candidate at the largest training size (`klaraptor.assemble.planned`; `cost` prices it,
    default the H200-fitted `klaraptor.collect.plan.H200_COST`); None: every candidate at every
    training size. The plan serves `auto` and `scaling`; the other measured models (`time_fit`,
    `mwp_cwp`, `saake`) fit each configuration, so they always measure every candidate at every
    training size; a candidate without a successful measurement there is left out of their
    build (recorded in `rejected`, as are the blocks the constraints exclude at every training
    size), and UnmeasuredError says when no candidate is left. Builds are incremental: points
    already in the store are not measured again.
    Without a GPU (`collect_data=False`, or none found), the points must already be in the
    store (e.g. imported from a recorded dataset) and `device` given; a budgeted build then uses
    the points its plan picks from them.
    `client`: a `distributed.Client` (or a `klaraptor.collect.dask.DaskExecutor`) to collect on
    the GPUs of a Dask cluster; this process writes the store, and the device profile is that of
    the workers' GPU model (measured once, on one worker, when the store has none). The budgeted
    plan is sequential, so it runs in one session on one worker's GPU (the other GPUs serve a
    build without a budget, whose points are spread over every worker).
    `prior="snowpack"` (budgeted builds): time the candidates at the largest training size in
    SNOWPACK's predicted order, which needs no measurement; `prior_keep=k` times only its first
    k there, so the build costs about k / n of tune-once's sweep and the others are never chosen
    (`experiments/snowpack_prior.py` measures what that loses). `prior="saake"`: in order of
    SAAKE's emulated time there, each compiled variant's SASS emulated without measuring (a
    kernel with program parameters too); any registered model that ranks without measuring.
    """
    t0 = time.perf_counter()
    spec, budget, device = check_spec(spec), check_budget(budget), check_device(device)
    _check_prior(prior, prior_keep)
    check_text(model, "model")
    check_instance(fit, FitOptions, "fit=", "klaraptor.fit.training.FitOptions()")
    check_bool(progress, "progress=")
    if collect_data is not None:
        check_bool(collect_data, "collect_data=")
    store = check_store(store) or Store()
    check_params_model(spec, model)
    if model != "auto" and not get_model(model).needs_measurements:
        return build_unmeasured(spec, model, store, device, t0, loader=load)
    executor = _executor(client, device)
    if executor is None and collect_data is not False:
        _prestart_worker()
    if collect_data is not False:
        _preimport_fit()
    budget = _budget_for(spec, model, budget, prior, prior_keep)
    size_list = training_sizes(spec, sizes)
    if executor is not None:
        collect_data = True if collect_data is None else collect_data
    request = BuildRequest(
        spec=spec,
        sizes=size_list,
        model=model,
        budget=budget,
        store=store,
        device=device,
        collect_data=gpu_available() if collect_data is None else collect_data,
        collect_options=collect_options,
        fit=fit,
        cost=cost,
        progress=progress,
        executor=executor,
        prior=prior,
        prior_keep=prior_keep,
    )
    return run(request, t0)


def _prestart_worker() -> None:
    """Start the warm measuring worker now where a GPU driver is present: its imports and CUDA
    context (about a second) overlap this process's own preparation (model registry, CuPy,
    SciPy) instead of following it. Unused, it exits by itself when idle."""
    from klaraptor.collect import warm

    if os.path.exists("/dev/nvidiactl"):
        warm.prestart()


def _preimport_fit() -> None:
    """Import SciPy's optimize package (the fits' least squares) on a thread while the GPU
    measures: 0.3-0.8 s that a process's first measured build paid on its critical path. An
    import under way holds its module's lock, so the fit that needs it later waits for it rather
    than importing it twice."""
    if "scipy.optimize" in sys.modules:
        return
    threading.Thread(
        target=importlib.import_module, args=("scipy.optimize",), name="klaraptor-preimport"
    ).start()


def _executor(client: Any, device: DeviceProfile | None) -> DaskExecutor | None:
    """The Dask executor of `client` (a distributed.Client or a DaskExecutor), None without."""
    if client is None:
        return None
    from klaraptor.collect.dask import DaskExecutor

    return client if isinstance(client, DaskExecutor) else DaskExecutor(client, device=device)


def _budget_for(
    spec: KernelSpec,
    model: str,
    budget: float | None,
    prior: str | None,
    prior_keep: int | None,
) -> float | None:
    """The build's budget: None for a per-configuration model, which needs every candidate at
    every size (a prior, which orders a budgeted plan's sweep, is then refused)."""
    if not is_budgeted(model):
        budget = None
    if (prior is not None or prior_keep is not None) and budget is None:
        raise BuildError(
            f"{spec.name}: prior= orders a budgeted plan's sweep; model {model!r} with budget "
            f"{budget!r} measures every candidate at every size (use model='auto' or 'scaling' "
            "with a budget)"
        )
    return budget
