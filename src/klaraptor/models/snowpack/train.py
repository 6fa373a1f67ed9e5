"""Training SNOWPACK from the store, and the zero-measurement job of a kernel.

`train_from_corpus` learns from any training corpus (`corpus.TrainingCorpus`); `train_from_store`
from every kernel the store has timed on one GPU (its spec found in the kernel catalog or given),
keeping the result in the store (`stat_models`) and saying which kernels it could not use and why.
`static_job` is what the `snowpack` model builds from when nothing was measured: the candidates
that can launch, with the attributes the compiler states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.fit.training import TrainingSet
from klaraptor.models.base import HelperJob
from klaraptor.models.snowpack.corpus import StoreCorpus, TrainingCorpus, corpus_rows
from klaraptor.models.snowpack.features import SnowpackError, attributes_from, static_features
from klaraptor.models.snowpack.learner import Corpus, Regressor, save_regressor
from klaraptor.models.snowpack.search import SearchSettings, train

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store


def corpus_from_store(
    store: Store, device: DeviceProfile, specs: Mapping[str, KernelSpec] | None = None
) -> tuple[Corpus, dict[str, str]]:
    """The rows of every kernel the store has timed on `device`, and the kernels skipped (why)."""
    return corpus_rows(StoreCorpus(store, device, specs), where=f"{store.path} on {device.key!r}")


def train_from_corpus(
    source: TrainingCorpus,
    device: DeviceProfile,
    *,
    settings: SearchSettings | None = None,
    where: str = "the corpus",
) -> tuple[Regressor, dict[str, Any]]:
    """Train on every kernel of `source` (timed on `device`); the model is not stored."""
    corpus, skipped = corpus_rows(source, where=where)
    if len(set(corpus.bench.tolist())) < 2:
        raise SnowpackError(
            "SNOWPACK needs timings of kernels from at least two benchmarks to validate its "
            f"choices; {where} has {sorted(set(corpus.kernel.tolist()))}"
        )
    reg, report = train(corpus, device.key, "kernels", settings)
    reg.info["skipped"] = skipped
    report["skipped"] = skipped
    report["kernels"] = reg.info["kernels"]
    return reg, report


def train_from_store(
    store: Store,
    device: DeviceProfile,
    *,
    specs: Mapping[str, KernelSpec] | None = None,
    settings: SearchSettings | None = None,
) -> tuple[Regressor, dict[str, Any]]:
    """Train on every kernel the store measured on `device` and keep the model in the store."""
    reg, report = train_from_corpus(
        StoreCorpus(store, device, specs),
        device,
        settings=settings,
        where=f"{store.path} on {device.key!r}",
    )
    report["model_id"] = save_regressor(store, reg)
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


__all__ = ["corpus_from_store", "static_job", "train_from_corpus", "train_from_store"]
