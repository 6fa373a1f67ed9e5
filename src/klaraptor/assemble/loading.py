"""load(): a built kernel back from the store, matched to this machine's GPU and driver,
without touching the GPU (nor creating a store).

A build is found for the GPU asked for (this machine's by default); one made on another GPU is
refused unless forced, one made under another driver is used with a warning, and a name the
store does not know is told apart from a kernel without a build (with close matches)."""

from __future__ import annotations

import difflib
import time
import warnings

from klaraptor.assemble.arguments import check_spec, check_store
from klaraptor.assemble.kernel import Kernel
from klaraptor.assemble.report import BuildReport
from klaraptor.assemble.storing import build_unmeasured, profile_of
from klaraptor.backends.cupy_backend import gpu_available
from klaraptor.core.errors import BuildError, DeviceWarning, KlaraptorError, StoreError
from klaraptor.core.validate import check_bool, check_kernel_name, check_text
from klaraptor.device.profile import DeviceProfile
from klaraptor.helper.program import HelperProgram
from klaraptor.models import get_model
from klaraptor.spec import KernelSpec, catalog
from klaraptor.store import BuildRecord, Store


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
    store, spec = _checked_arguments(name, store, device, model, spec, force)
    here = None
    if device is None and gpu_available():
        from klaraptor.device.profile import query_device

        here = query_device()
        device = here.key
    rec = store.latest_build(name, device, model)
    if rec is None and model is not None and _unmeasured(model):
        spec = spec or catalog.find(name)
        if spec is not None:  # the zero-measurement path: built now from the spec alone
            prof = profile_of(store, device) if device is not None or here is None else here
            return build_unmeasured(spec, model, store, prof, time.perf_counter(), loader=load)
    if rec is None:
        rec = _forced_build(store, name, device, model, force)
    elif device is None:
        warnings.warn(
            DeviceWarning(
                f"no GPU here and no device named: using the build of {name} made on "
                f"{rec.device!r}; its choices are for that GPU"
            ),
            stacklevel=2,
        )
    helper, report = _decoded(store, name, rec)
    if here is not None:
        _check_driver(name, report, here)
    if spec is None:
        spec = catalog.find(name)  # a catalogued kernel's spec; others need spec= to launch
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


def _checked_arguments(
    name: str,
    store: Store | None,
    device: str | None,
    model: str | None,
    spec: KernelSpec | None,
    force: bool,
) -> tuple[Store, KernelSpec | None]:
    """load()'s arguments checked: the store (which must exist) and the spec (of `name`)."""
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
    return store, spec


def _forced_build(
    store: Store, name: str, device: str | None, model: str | None, force: bool
) -> BuildRecord:
    """With no build of `name` for `device`: the build made on another GPU when `force` (with a
    DeviceWarning), else the BuildError that says which builds exist."""
    builds = store.builds(name)
    if not builds:
        raise not_built(store, name)
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
        DeviceWarning(f"using the build of {name} made on {others[0]!r} for {device!r} (forced)"),
        stacklevel=3,
    )
    rec = store.latest_build(name, others[0], model)
    assert rec is not None  # one of `builds`
    return rec


def _decoded(store: Store, name: str, rec: BuildRecord) -> tuple[HelperProgram, BuildReport]:
    """The stored build's helper program and report; StoreError when either is malformed."""
    try:
        helper = HelperProgram.from_dict(rec.helper)
        report = BuildReport.from_dict(rec.report, helper.data_schema)
    except Exception as exc:  # noqa: BLE001 - any failure to decode a stored build is its fault
        raise StoreError(
            f"build {rec.id} of {name!r} in {store.path} is malformed "
            f"({type(exc).__name__}: {exc}); build the kernel again"
        ) from None
    return helper, report


def _check_driver(name: str, report: BuildReport, here: DeviceProfile) -> None:
    """A DeviceWarning when the build was measured under another driver than this GPU runs."""
    if report.device_driver and report.device_driver != here.driver:
        warnings.warn(
            DeviceWarning(
                f"{name} was built under driver {report.device_driver}; this GPU runs driver "
                f"{here.driver}. Choices rarely depend on the driver: rebuild if timings look off"
            ),
            stacklevel=3,
        )


def _unmeasured(model: str) -> bool:
    """Whether `model` is a registered model built without measurements (an unknown name is
    not: `load` then says which builds exist)."""
    try:
        return not get_model(model).needs_measurements
    except KlaraptorError:
        return False


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


def not_built(store: Store, name: str) -> BuildError:
    """'no build' for a kernel the store or the suites know, else 'unknown kernel' with the
    closest names."""
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
