"""Storing a build and giving back its Kernel (`store_build`), and the build that measures
nothing (`build_unmeasured`, e.g. snowpack: made from the spec alone).

Shared by the pipeline (every build ends in `store_build`) and by `load` (whose zero-measurement
path builds a kernel that has no build yet), below both so that neither imports the other's
module: the Kernel's loader (`load`) is passed in, not imported."""

from __future__ import annotations

import time
from collections.abc import Callable

from klaraptor.assemble.jobs import current_profile
from klaraptor.assemble.kernel import Kernel
from klaraptor.assemble.report import BuildReport
from klaraptor.backends.cupy_backend import gpu_available
from klaraptor.core.errors import BuildError
from klaraptor.core.types import Block, Config
from klaraptor.device.profile import DeviceProfile
from klaraptor.helper.program import HelperProgram
from klaraptor.models import get_model
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

# `klaraptor.assemble.loading.load`: what Kernel.select(model=...) loads other builds with.
Loader = Callable[..., Kernel]


def build_unmeasured(
    spec: KernelSpec,
    model: str,
    store: Store,
    device: DeviceProfile | None,
    t0: float,
    *,
    loader: Loader,
) -> Kernel:
    """A model that needs no measurements (e.g. snowpack): no collection, no training sizes."""
    from klaraptor.store import KernelRecord

    check_params_model(spec, model)
    mdl = get_model(model)
    if device is None:
        device = current_profile(store) if gpu_available() else profile_of(store, None)
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
    return store_build(spec, store, device, (model,), helper, report, job.rejected, loader=loader)


def store_build(
    spec: KernelSpec,
    store: Store,
    device: DeviceProfile,
    names: tuple[str, ...],
    helper: HelperProgram,
    report: BuildReport,
    rejected: dict[Block | Config, str],
    *,
    loader: Loader,
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
        loader=loader,
    )


def profile_of(store: Store, key: str | None) -> DeviceProfile:
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


def check_params_model(spec: KernelSpec, model: str) -> None:
    """A spec with program parameters needs a model that models them."""
    if spec.params and model != "auto" and not get_model(model).supports_params:
        raise BuildError(
            f"{spec.name} has program parameters {list(spec.param_names)}, which model {model!r} "
            "does not model; use model='auto', 'scaling' or 'time_fit'"
        )
