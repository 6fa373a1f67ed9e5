"""A build's inputs: the device profile, the training sizes, and the job a model fits (the
training points and the candidates that satisfy the constraints and can launch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from klaraptor.core.errors import BuildError
from klaraptor.core.types import Block, Config, DataSize, KernelAttributes, ParamValues
from klaraptor.core.validate import check_sizes
from klaraptor.device.profile import DeviceProfile, query_device
from klaraptor.fit.training import FitOptions, TrainingSet, training_set
from klaraptor.models import HelperJob
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.store import Store


def current_profile(store: Store, *, measure: bool = True, device_id: int = 0) -> DeviceProfile:
    """This machine's GPU profile: cached in the store, else measured (microbenchmarks)."""
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
        meta_sizes = spec.meta.get("train_sizes")
        if meta_sizes is None or (isinstance(meta_sizes, (list, tuple)) and not meta_sizes):
            raise BuildError(
                f"{spec.name}: no training sizes given and the spec has no meta['train_sizes']"
            )
        checked = check_sizes(meta_sizes, f"{spec.name}: meta['train_sizes']")
    else:
        checked = check_sizes(sizes, f"{spec.name}: the training sizes")
    assert checked is not None  # check_sizes returns None only for None
    out = [spec.size(s) for s in checked]
    if not out:
        raise BuildError(f"{spec.name}: the list of training sizes is empty")
    seen: set[DataSize] = set()
    for D in out:
        if D in seen:
            raise BuildError(f"{spec.name}: training size {D} is given twice")
        seen.add(D)
    return out


def stored_arg_bytes(
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
        spec, device, (variant_attrs or {}) if spec.params else attrs, at, space, admit_at=sizes
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
        arg_bytes=stored_arg_bytes(spec, facts.arg_bytes),
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
