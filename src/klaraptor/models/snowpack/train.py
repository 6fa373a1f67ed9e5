"""Training SNOWPACK from the store, and the zero-measurement job of a kernel.

`train_from_store` learns from every kernel the store has timed on one GPU (its spec found among
the suites or given), keeps the result in the store (`stat_models`) and says which kernels it
could not use and why. `static_job` is what the `snowpack` model builds from when nothing was
measured: the candidates that can launch, with the attributes the compiler states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.fit.training import TrainingSet
from klaraptor.models.base import HelperJob
from klaraptor.models.snowpack.features import SnowpackError, attributes_from, static_features
from klaraptor.models.snowpack.learner import Corpus, Regressor, kernel_corpus, save_regressor
from klaraptor.models.snowpack.search import SearchSettings, train

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store


def benchmark_of(spec: KernelSpec) -> str:
    """The unit SNOWPACK leaves out for unseen kernels: the benchmark (application)."""
    return f"{spec.name.split('.')[0]}.{spec.meta.get('benchmark', spec.name)}"


def _spec_for(name: str, specs: Mapping[str, KernelSpec] | None) -> KernelSpec:
    if specs is not None and name in specs:
        return specs[name]
    from klaraptor.spec import catalog

    return catalog.get(name)


def corpus_from_store(
    store: Store, device: DeviceProfile, specs: Mapping[str, KernelSpec] | None = None
) -> tuple[Corpus, dict[str, str]]:
    """The rows of every kernel the store has timed on `device`, and the kernels skipped (why)."""
    parts: list[Corpus] = []
    skipped: dict[str, str] = {}
    for rec in store.kernels():
        times = store.measurements(rec.name, device.key, kind="time", status="ok")
        if not times:
            continue
        try:
            spec = _spec_for(rec.name, specs)
        except KlaraptorError:
            skipped[rec.name] = "no KernelSpec found (pass it in specs=)"
            continue
        if spec.fingerprint() != rec.fingerprint:
            skipped[rec.name] = "the spec changed since it was measured (fingerprint differs)"
            continue
        try:
            static = static_features(spec, rec.name, store=store)
            points = {(m.D, m.block): float(m.value["median_ms"]) for m in times}
            parts.append(kernel_corpus(spec, static, device, points, benchmark_of(spec)))
        except SnowpackError as exc:
            skipped[rec.name] = str(exc)
    if not parts:
        raise SnowpackError(
            f"no kernel in {store.path} has timings on {device.key!r} that SNOWPACK can learn "
            f"from (skipped: {skipped or 'none measured'}); `klaraptor import-recorded` brings "
            "the recorded H200 suites"
        )
    return Corpus.concat(parts), skipped


def train_from_store(
    store: Store,
    device: DeviceProfile,
    *,
    specs: Mapping[str, KernelSpec] | None = None,
    settings: SearchSettings | None = None,
) -> tuple[Regressor, dict[str, Any]]:
    """Train on every kernel the store measured on `device` and keep the model in the store."""
    corpus, skipped = corpus_from_store(store, device, specs)
    if len(set(corpus.bench.tolist())) < 2:
        raise SnowpackError(
            "SNOWPACK needs timings of kernels from at least two benchmarks to validate its "
            f"choices; the store has {sorted(set(corpus.kernel.tolist()))}"
        )
    reg, report = train(corpus, device.key, "kernels", settings)
    reg.info["skipped"] = skipped
    report["model_id"] = save_regressor(store, reg)
    report["skipped"] = skipped
    report["kernels"] = reg.info["kernels"]
    return reg, report


def static_job(spec: KernelSpec, device: DeviceProfile, store: Store | None = None) -> HelperJob:
    """A job with no training points: launchable candidates from the compiler's attributes."""
    from klaraptor.space.configspace import ConfigSpace

    static = static_features(spec, spec.name, store=store)
    attrs = attributes_from(static.features, device)
    space = ConfigSpace.for_spec(spec, max_threads=device.max_threads_per_block)
    sizes = spec.meta.get("train_sizes") or [{p.name: p.lo for p in spec.data}]
    candidates, rejected = space.filter_launchable(
        list(space.candidates), spec.size(sizes[0]), attrs, device
    )
    if not candidates:
        raise SnowpackError(f"{spec.name}: no candidate block can launch ({dict(rejected)})")
    empty = TrainingSet(
        spec.data_names,
        np.zeros((0, len(spec.data_names))),
        np.zeros((0, 3)),
        [],
        np.zeros(0),
    )
    return HelperJob(
        spec=spec,
        profile=device,
        attrs=attrs,
        train=empty,
        candidates=tuple(candidates),
        rejected=dict(rejected),
    )


__all__ = ["benchmark_of", "corpus_from_store", "static_job", "train_from_store"]
