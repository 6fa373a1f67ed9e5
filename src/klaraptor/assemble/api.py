"""build(): collect → fit → helper program, kept in the store; load(): bring a build back;
plan(): what a build would measure, without a GPU.

A build measures under a budget by default (`budget=1.5`: at most 1.5 × the cost of one sweep of
every candidate at the largest training size, counters included; `klaraptor.assemble.planned`).
`budget=None` collects every candidate at every training size, as KLARAPTOR does."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from klaraptor.assemble.arguments import check_device, check_spec, check_store
from klaraptor.assemble.kernel import BuildReport, Kernel
from klaraptor.assemble.model_selection import select_model
from klaraptor.assemble.planned import (
    DEFAULT_BUDGET,
    BuildPlan,
    ladder_sizes,
    make_plan,
    planned_training,
    replay_from_store,
)
from klaraptor.backends.cupy_backend import gpu_available
from klaraptor.collect.plan import CostModel, PlanResult
from klaraptor.core.errors import BuildError, DeviceWarning, KlaraptorError, StoreError
from klaraptor.core.types import Block, Config, DataSize, KernelAttributes, ParamValues
from klaraptor.core.validate import (
    check_bool,
    check_budget,
    check_instance,
    check_int,
    check_kernel_name,
    check_sizes,
    check_text,
)
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit.training import FitOptions, TrainingSet, training_set
from klaraptor.helper.program import HelperProgram
from klaraptor.models import HelperJob, get_model, is_budgeted
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

DEFAULT_MODEL = "auto"


def current_profile(store: Store, *, measure: bool = True, device_id: int = 0) -> DeviceProfile:
    """This machine's GPU profile: cached in the store, else measured (microbenchmarks)."""
    from klaraptor.device.profile import query_device

    found = query_device(device_id)
    cached = store.cached_profile(found.key)
    # The models' own inputs decide; resource fields a failed microbenchmark left out do not
    # make every later build measure again.
    if cached is not None and not cached.missing_model_inputs:
        return cached
    if not measure:
        raise BuildError(f"no measured device profile for {found.key!r} in {store.path}")
    from klaraptor.collect.microbench import measure_profile

    profile = measure_profile(device_id, store)
    store.save_profile(profile)
    return profile


def training_sizes(spec: KernelSpec, sizes: Iterable[Any] | None) -> list[DataSize]:
    """The training sizes as DataSize: the ones given, else the spec's `meta["train_sizes"]`."""
    if sizes is None:
        sizes = spec.meta.get("train_sizes")
        if sizes is None or (isinstance(sizes, (list, tuple)) and not sizes):
            raise BuildError(
                f"{spec.name}: no training sizes given and the spec has no meta['train_sizes']"
            )
        sizes = check_sizes(sizes, f"{spec.name}: meta['train_sizes']")
    else:
        sizes = check_sizes(sizes, f"{spec.name}: the training sizes")
    out = [spec.size(s) for s in sizes]
    if not out:
        raise BuildError(f"{spec.name}: the list of training sizes is empty")
    seen: set[DataSize] = set()
    for D in out:
        if D in seen:
            raise BuildError(f"{spec.name}: training size {D} is given twice")
        seen.add(D)
    return out


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
    """What a build would measure, or refuse with the reason, without a GPU (iterates over the
    points; `.format()` prints it).

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
    space = space or ConfigSpace.for_spec(spec)
    size_list = training_sizes(spec, sizes)
    if budget is None:
        return BuildPlan(spec, space.dry_run(spec, size_list, device))
    L, smaller = ladder_sizes(size_list)
    facts = None
    if store is not None and device is not None:
        facts = store.collect_facts(spec.name, device.key)
    attrs = None if facts is None else facts.attributes
    points = space.dry_run(spec, [L, *smaller], device, attrs)
    candidates = [p.block for p in points if p.D == L and p.status == "measure"]
    if device is None:
        from klaraptor.device.profile import recorded_profile

        device_for_plan = recorded_profile("h200")
    else:
        device_for_plan = device
    arg_bytes = () if facts is None else _arg_bytes(spec, facts.arg_bytes)
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
    return BuildPlan(spec, points, mplan, why, executed, candidates)


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


def _arg_bytes(
    spec: KernelSpec, stored: Iterable[tuple[tuple[int, ...], int]]
) -> tuple[tuple[DataSize, int], ...]:
    return tuple((DataSize(spec.data_names, tuple(D)), int(b)) for D, b in stored)


def launchable(
    spec: KernelSpec,
    device: DeviceProfile,
    attrs: KernelAttributes | Mapping[ParamValues, KernelAttributes],
    D: DataSize,
    space: ConfigSpace | None = None,
    *,
    admit_at: Sequence[DataSize] | None = None,
) -> tuple[list[Any], dict[Any, str]]:
    """The candidates that satisfy the constraints at one of the sizes `admit_at` at least
    (default: at D) and can launch at D, in canonical order (variant by variant, then block);
    and the others with why. Candidates are blocks, or Configs for a kernel with program
    parameters, whose `attrs` map each compiled variant to its attributes.

    Collection measures only admissible configurations, so one the constraints exclude at every
    training size has no point to fit (a per-configuration model cannot fit it at all)."""
    space = space or ConfigSpace.for_spec(spec, max_threads=device.max_threads_per_block)
    sizes = list(admit_at) if admit_at else [D]
    where = " at every training size" if len(sizes) > 1 else f" at {sizes[0]}"
    candidates: list[Any] = []
    rejected: dict[Any, str] = {}
    for pv in space.variants(spec):
        pv_arg = pv if spec.params else None
        if isinstance(attrs, Mapping):
            a = attrs.get(pv)
            if a is None:
                for b in space.candidates:
                    rejected[Config(pv, b)] = f"the compiled variant {pv} has no attributes"
                continue
        else:
            a = attrs
        admitted: set[Block] = set()
        excluded: dict[Block, str] = {}
        for size in sizes:
            ok, refused = space.admissible(size, spec=spec, params=pv_arg)
            admitted.update(ok)
            for b, why in refused:
                excluded.setdefault(b, why)
        blocks = [b for b in space.candidates if b in admitted]
        ok_blocks, unlaunchable = space.filter_launchable(blocks, D, a, device, params=pv_arg)
        reasons = {b: excluded[b] + where for b in space.candidates if b not in admitted}
        reasons.update(unlaunchable)
        key = (lambda b, pv=pv: Config(pv, b)) if spec.params else (lambda b: b)
        candidates += [key(b) for b in ok_blocks]
        rejected.update({key(b): reasons[b] for b in space.candidates if b in reasons})
    if not candidates:
        raise BuildError(
            f"{spec.name}: no candidate block satisfies the constraints and can launch ({rejected})"
        )
    return candidates, rejected


def job_from_training(
    spec: KernelSpec,
    device: DeviceProfile,
    attrs: KernelAttributes,
    train: TrainingSet,
    *,
    sync_per_warp: float | None = None,
    fit: FitOptions | None = None,
    space: ConfigSpace | None = None,
    arg_bytes: tuple[tuple[DataSize, int], ...] = (),
    launch_size: DataSize | None = None,
    admit_at: Sequence[DataSize] | None = None,
    variant_attrs: Mapping[ParamValues, KernelAttributes] | None = None,
) -> HelperJob:
    """A model's job from training points: the candidates that satisfy the constraints at one
    of the sizes `admit_at` (default: the training sizes) and can launch at `launch_size`
    (default: the smallest training point), the others with why. With program parameters,
    `variant_attrs` holds each compiled variant's attributes."""
    at = launch_size if launch_size is not None else train.size_of(0)
    sizes = admit_at if admit_at is not None else train.sizes()
    candidates, rejected = launchable(
        spec, device, variant_attrs if spec.params else attrs, at, space, admit_at=sizes
    )
    return HelperJob(
        spec=spec,
        profile=device,
        attrs=attrs,
        train=train,
        candidates=tuple(candidates),
        rejected=dict(rejected),
        sync_per_warp=sync_per_warp,
        fit=fit or FitOptions(),
        arg_bytes=arg_bytes,
        variant_attrs=dict(variant_attrs or {}),
    )


def make_job(
    spec: KernelSpec,
    store: Store,
    device: DeviceProfile,
    sizes: Sequence[DataSize],
    *,
    fit: FitOptions | None = None,
    space: ConfigSpace | None = None,
    launch_size: DataSize | None = None,
    admit_at: Sequence[DataSize] | None = None,
) -> HelperJob:
    """The training data and candidates of `spec` on `device` (admissible at one of the sizes
    `admit_at`, default `sizes`, and launchable), from the store."""
    facts = store.collect_facts(spec.name, device.key)
    if facts is None or facts.attributes is None:
        raise BuildError(
            f"{spec.name}: the store has no kernel attributes for {device.key!r}; collect first"
        )
    return job_from_training(
        spec,
        device,
        facts.attributes,
        training_set(store, spec, device.key, sizes),
        sync_per_warp=facts.sync_per_warp,
        fit=fit,
        space=space,
        arg_bytes=_arg_bytes(spec, facts.arg_bytes),
        launch_size=launch_size,
        admit_at=admit_at if admit_at is not None else sizes,
        variant_attrs=variant_attributes(spec, facts),
    )


def variant_attributes(spec: KernelSpec, facts: Any) -> dict[ParamValues, KernelAttributes]:
    """Each compiled variant's attributes from the collection facts (empty without program
    parameters); a variant never compiled is absent."""
    if not spec.params:
        return {}
    out = {}
    for pv in spec.variants():
        a = facts.attributes_of(pv)
        if a is not None:
            out[pv] = a
    return out


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
    (`experiments/snowpack_prior.py` measures what that loses).
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
    if spec.params and model != "auto" and not get_model(model).supports_params:
        raise BuildError(
            f"{spec.name} has program parameters {list(spec.param_names)}, which model {model!r} "
            "does not model; use model='auto', 'scaling' or 'time_fit'"
        )
    if model != "auto" and not get_model(model).needs_measurements:
        return _build_unmeasured(spec, model, store, device, t0)
    if not is_budgeted(model):
        budget = None  # a per-configuration model needs every candidate at every size
    if (prior is not None or prior_keep is not None) and budget is None:
        raise BuildError(
            f"{spec.name}: prior= orders a budgeted plan's sweep; model {model!r} with budget "
            f"{budget!r} measures every candidate at every size (use model='auto' or 'scaling' "
            "with a budget)"
        )
    size_list = training_sizes(spec, sizes)
    executor = None
    if client is not None:
        from klaraptor.collect.dask import DaskExecutor

        executor = (
            client if isinstance(client, DaskExecutor) else DaskExecutor(client, device=device)
        )
        collect_data = True if collect_data is None else collect_data
    if collect_data is None:
        collect_data = gpu_available()
    collect_info: dict[str, Any] | None = None
    if collect_data and executor is not None and budget is None:
        from klaraptor.collect.collector import CollectOptions, collect

        device = device or executor.device_profile(store)
        rep = collect(
            spec,
            size_list,
            store=store,
            device=device,
            options=collect_options or CollectOptions(),
            progress=progress,
            executor=executor,
        )
        collect_info = {"wall_s": rep.wall_s, "counts": rep.counts, "ncu": rep.ncu_status}
        collect_data = False  # collected: what follows works over the store's points
    if not collect_data and device is None:
        raise BuildError(
            f"{spec.name}: no GPU to collect on; pass device= (e.g. recorded_profile('h200')) to "
            "build from measurements already in the store"
        )
    executed: PlanResult | None = None
    if budget is None:
        if collect_data:
            from klaraptor.collect.collector import CollectOptions, collect

            device = device or current_profile(store)
            rep = collect(
                spec,
                size_list,
                store=store,
                device=device,
                options=collect_options or CollectOptions(),
                progress=progress,
            )
            collect_info = {"wall_s": rep.wall_s, "counts": rep.counts, "ncu": rep.ncu_status}
        assert device is not None
        t_fit = time.perf_counter()
        job = make_job(spec, store, device, size_list, fit=fit)
        if not is_budgeted(model):
            job = job.measured_only()  # it fits each candidate from that candidate's points
    else:
        if collect_data and executor is not None:
            device = device or executor.device_profile(store)
        device, executed, planned_info = _run_budgeted(
            spec,
            size_list,
            store,
            device,
            collect_data,
            collect_options,
            budget,
            cost,
            progress,
            executor,
            prior=prior,
            prior_keep=prior_keep,
        )
        collect_info = planned_info if collect_info is None else {**collect_info, **planned_info}
        t_fit = time.perf_counter()
        used = {DataSize(spec.data_names, tuple(p["D"])) for p in executed.points}
        job = make_job(
            spec,
            store,
            device,
            sorted(used, key=DataSize.values),
            fit=fit,
            launch_size=min(size_list, key=DataSize.values),
            admit_at=size_list,  # the plan's candidates: its cfg indices point into them
        )
        job.train = planned_training(job.train, executed, job.candidates)
    selection = None
    if model == "auto":
        model, selection = select_model(job)
        if not is_budgeted(model):
            # A per-configuration model chosen over a plan's points: only the candidates the
            # plan timed can be fitted (a prior's cut leaves the others without any point).
            job = job.measured_only()
    helper, fits = get_model(model).make_helper(job)
    if selection is not None:
        fits["model_selection"] = selection
    report = BuildReport(
        sizes=list(size_list),
        model=model,
        fit_wall_s=time.perf_counter() - t_fit,
        total_wall_s=time.perf_counter() - t0,
        collect=collect_info,
        fits=fits,
        device_driver=device.driver,
    )
    # also findable as the "auto" build when auto chose it
    names = (model, "auto") if selection is not None else (model,)
    return _stored(spec, store, device, names, helper, report, job.rejected)


def _stored(
    spec: KernelSpec,
    store: Store,
    device: DeviceProfile,
    names: Sequence[str],
    helper: HelperProgram,
    report: BuildReport,
    rejected: dict[Block, str],
) -> Kernel:
    """Store the build under each model name in `names` and return its Kernel."""
    helper_dict, report_dict = helper.to_dict(), report.to_dict()
    for name in names:
        store.put_build(spec.name, device.key, name, helper_dict, report_dict, rejected)
    return Kernel(
        helper,
        spec=spec,
        store=store,
        device_key=device.key,
        rejected=rejected,
        report=report,
        loader=load,
    )


def _run_budgeted(
    spec: KernelSpec,
    sizes: list[DataSize],
    store: Store,
    device: DeviceProfile | None,
    collect_data: bool,
    collect_options: Any | None,
    budget: float,
    cost: CostModel | None,
    progress: bool,
    executor: Any = None,
    *,
    prior: str | None = None,
    prior_keep: int | None = None,
) -> tuple[DeviceProfile, PlanResult, dict[str, Any]]:
    """Make the plan and run it: on the GPU in one session (this machine's, or one Dask
    worker's with `executor`), else over the store's points."""
    t0 = time.perf_counter()
    if collect_data:
        from klaraptor.collect.collector import CollectOptions, collect_info, collect_plan

        options = collect_options or CollectOptions()
        device = device or current_profile(store)
        device, attrs, info = collect_info(
            spec, sizes, store=store, device=device, options=options, executor=executor
        )
    else:
        assert device is not None
        facts = store.collect_facts(spec.name, device.key)
        if facts is None or facts.attributes is None:
            raise BuildError(
                f"{spec.name}: the store has no kernel attributes for {device.key!r}; collect first"
            )
        attrs = variant_attributes(spec, facts) if spec.params else facts.attributes
    facts = store.collect_facts(spec.name, device.key)
    arg_bytes = () if facts is None else _arg_bytes(spec, facts.arg_bytes)
    candidates, _ = launchable(spec, device, attrs, min(sizes, key=DataSize.values), admit_at=sizes)
    plan, why = make_plan(
        spec,
        device,
        candidates,
        sizes,
        arg_bytes=arg_bytes,
        budget=budget,
        cost=cost,
        prior=prior,
        prior_keep=prior_keep,
        store=store,
    )
    out: dict[str, Any] = {"budget": budget, "cold_timings": why}
    if prior is not None:
        sweep = plan.sweep()
        out["prior"] = {
            "name": prior,
            "keep": prior_keep,
            "order": list(sweep),
            "blocks": [list(candidates[i]) for i in sweep],
        }
    if collect_data:
        rep, executed = collect_plan(
            spec,
            plan,
            candidates,
            store=store,
            device=device,
            attrs=attrs,
            options=options,
            progress=progress,
            executor=executor,
        )
        rep.wall_s["info"] = info.wall_s.get("info", 0.0)
        out.update(wall_s=rep.wall_s, counts=rep.counts, ncu=rep.ncu_status, measured=True)
        out["worker"] = {"info": dict(info.worker), "plan": dict(rep.worker)}  # where time went
    else:
        executed = replay_from_store(plan, spec, store, device.key, candidates)
        out["measured"] = False
    if not executed.points:
        raise BuildError(
            f"{spec.name}: no candidate could be timed at the largest training size "
            f"{ladder_sizes(sizes)[0]} (see the store's failed points)"
        )
    out["plan"] = executed.summary()
    out["plan_wall_s"] = time.perf_counter() - t0
    return device, executed, out


def _build_unmeasured(
    spec: KernelSpec, model: str, store: Store, device: DeviceProfile | None, t0: float
) -> Kernel:
    """A model that needs no measurements (e.g. snowpack): no collection, no training sizes."""
    from klaraptor.store import KernelRecord

    mdl = get_model(model)
    if device is None:
        device = current_profile(store) if gpu_available() else _profile_of(store, None)
    if store.kernel(spec.name) is None:
        store.put_kernel(
            KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
        )
    if store.cached_profile(device.key) is None:
        store.save_profile(device)
    job = mdl.static_job(spec, device, store)
    helper, fits = mdl.make_helper(job)
    report = BuildReport(
        sizes=[],
        model=model,
        fit_wall_s=time.perf_counter() - t0,
        total_wall_s=time.perf_counter() - t0,
        fits=fits,
        device_driver=device.driver,
    )
    return _stored(spec, store, device, (model,), helper, report, job.rejected)


def _unmeasured(model: str) -> bool:
    """Whether `model` is a registered model built without measurements (an unknown name is
    not: `load` then says which builds exist)."""
    try:
        return not get_model(model).needs_measurements
    except KlaraptorError:
        return False


def _profile_of(store: Store, key: str | None) -> DeviceProfile:
    """The profile of GPU `key` (the store's, else the recorded H200's); None: the GPU the
    shipped SNOWPACK model was trained on."""
    from klaraptor.device.profile import recorded_profile
    from klaraptor.models.snowpack.model import load_regressor

    if key is None:
        key = load_regressor(store).device
    found = store.cached_profile(key)
    if found is not None:
        return found
    h200 = recorded_profile("h200")
    if h200.key == key:
        return h200
    raise BuildError(f"no device profile {key!r} in {store.path}; measure it (klaraptor device)")


def load(
    name: str,
    *,
    store: Store | None = None,
    device: str | None = None,
    model: str | None = None,
    spec: KernelSpec | None = None,
    force: bool = False,
) -> Kernel:
    """A built kernel from the store, without touching the GPU (nor creating a store).

    `device` is the profile key of the GPU the choices are for; it defaults to this machine's GPU
    when there is one, else to any build (with a DeviceWarning naming the GPU it was made on). A
    build made on another GPU is refused with BuildError (its choices may not suit this GPU)
    unless `force`, which uses it with a warning. A build made on this GPU under another driver
    is used with a DeviceWarning. An unknown kernel name, a kernel without a build and a build
    with another model are told apart, with close matches for a misspelt name.
    """
    name = check_kernel_name(name)
    store = check_store(store, must_exist=True) or Store(must_exist=True)
    if spec is not None:
        spec = check_spec(spec, "spec=")
        if spec.name != name:
            raise BuildError(
                f"load({name!r}, spec=...): the spec is that of kernel {spec.name!r}, not of "
                f"{name!r}; pass the spec the kernel was built from"
            )
    for value, what in ((device, "device="), (model, "model=")):
        if value is not None:
            check_text(value, what)
    check_bool(force, "force=")
    here = None
    if device is None and gpu_available():
        from klaraptor.device.profile import query_device

        here = query_device()
        device = here.key
    rec = store.latest_build(name, device, model)
    if rec is None and model is not None and _unmeasured(model):
        spec = spec or _find_spec(name)
        if spec is not None:  # the zero-measurement path: built now from the spec alone
            prof = _profile_of(store, device) if device is not None or here is None else here
            return build(spec, model=model, store=store, device=prof)
    if rec is None:
        builds = store.builds(name)
        if not builds:
            raise _not_built(store, name)
        if model is not None:
            if not any(b.model == model for b in builds):
                raise BuildError(
                    f"kernel {name!r} has no build with model {model!r} in {store.path}; it was "
                    f"built with {sorted({b.model for b in builds})} (pick one with --model / "
                    "model=, or build it with this model)"
                )
            builds = [b for b in builds if b.model == model]
        others = sorted({b.device for b in builds})
        if not force:
            raise BuildError(
                f"{name} was built on {others}, not on {device!r}; its choices may not suit this GPU. "
                "Rebuild here, or pass force=True (--force) to use it anyway"
            )
        warnings.warn(
            DeviceWarning(
                f"using the build of {name} made on {others[0]!r} for {device!r} (forced)"
            ),
            stacklevel=2,
        )
        rec = store.latest_build(name, others[0], model)
        assert rec is not None
    elif device is None:
        warnings.warn(
            DeviceWarning(
                f"no GPU here and no device named: using the build of {name} made on "
                f"{rec.device!r}; its choices are for that GPU"
            ),
            stacklevel=2,
        )
    try:
        helper = HelperProgram.from_dict(rec.helper)
        report = BuildReport.from_dict(rec.report, helper.data_schema)
    except Exception as exc:  # noqa: BLE001 - any failure to decode a stored build is its fault
        raise StoreError(
            f"build {rec.id} of {name!r} in {store.path} is malformed "
            f"({type(exc).__name__}: {exc}); build the kernel again"
        ) from None
    if here is not None and report.device_driver and report.device_driver != here.driver:
        warnings.warn(
            DeviceWarning(
                f"{name} was built under driver {report.device_driver}; this GPU runs driver "
                f"{here.driver}. Choices rarely depend on the driver: rebuild if timings look off"
            ),
            stacklevel=2,
        )
    if spec is None:
        spec = _find_spec(name)
    else:
        _check_fingerprint(store, name, spec)
    return Kernel(
        helper,
        spec=spec,
        store=store,
        device_key=rec.device,
        rejected=rec.rejected,
        report=report,
        loader=load,
    )


def _check_fingerprint(store: Store, name: str, spec: KernelSpec) -> None:
    """A spec given to load() must be the version the kernel was built from: a stale build
    (source, options, grid, constraints, dim or data names changed since) is refused."""
    known = store.kernel(name)
    if known is None or not known.fingerprint or known.fingerprint == spec.fingerprint():
        return
    raise BuildError(
        f"the build of {name!r} in {store.path} was made from another version of its spec "
        f"(fingerprint {known.fingerprint[:12]} stored, {spec.fingerprint()[:12]} given: the "
        "source, options, grid, constraints, dim or data parameters changed); its choices are "
        "stale. Build it again (klaraptor.build(spec, ...)), or load it without spec="
    )


def _not_built(store: Store, name: str) -> BuildError:
    """'no build' for a kernel the store or the suites know, else 'unknown kernel' with the
    closest names."""
    import difflib

    from klaraptor.spec import catalog

    built = {b.kernel for b in store.builds()}
    known = built | {k.name for k in store.kernels()}
    suite_names = set(catalog.names())
    if name in known or name in suite_names:
        hint = (
            "`klaraptor import-recorded` adds the recorded H200 builds of the suites"
            if name in suite_names
            else f"build it first (`klaraptor build` on a GPU; the store has {len(built)} builds)"
        )
        return BuildError(f"no build of kernel {name!r} in {store.path}: {hint}")
    close = difflib.get_close_matches(name, sorted(built) or sorted(known | suite_names), n=3)
    if not close:
        close = difflib.get_close_matches(name, sorted(known | suite_names), n=3)
    maybe = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return BuildError(
        f"unknown kernel {name!r}: {store.path} has no kernel of that name{maybe} "
        "(`klaraptor list` shows the builds)"
    )


def _find_spec(name: str) -> KernelSpec | None:
    """The spec of a catalogued kernel by name, if it is one (others need spec= to launch)."""
    from klaraptor.spec import catalog

    return catalog.find(name)
