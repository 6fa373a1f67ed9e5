"""SNOWPACK's training-corpus interface (`models/snowpack/corpus.py`): any source of timed kernels
is learned from alike; a store and the recorded suites give the same rows for the same kernels;
kernels a source cannot give, or that give no row, are reported with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.models.snowpack.corpus import (
    SkippedKernel,
    StoreCorpus,
    TimedKernel,
    TrainingCorpus,
    corpus_rows,
)
from klaraptor.models.snowpack.features import SnowpackError, load_recorded_features
from klaraptor.suite.recorded import RecordedCorpus, load_recorded, recorded_path

KERNELS = ("rodinia.srad.k1", "rodinia.hotspot.temp", "rodinia.nn.euclid")


def _rodinia(kernels: tuple[str, ...] = KERNELS):  # noqa: ANN202
    data = load_recorded(recorded_path("rodinia"))
    data.kernels = {k: data.kernels[k] for k in kernels}
    return data


def test_a_store_and_the_recorded_suites_give_the_same_rows(tmp_path: Path) -> None:
    data = _rodinia()
    from_recorded, skipped = corpus_rows(RecordedCorpus([data]))
    assert not skipped
    with data.to_store(tmp_path / "s.sqlite") as store:
        from_store, skipped = corpus_rows(StoreCorpus(store, data.profile()))
    assert not skipped
    assert sorted(set(from_store.kernel.tolist())) == sorted(KERNELS)
    # The same rows, in their sources' orders (the store's and the dataset's by name).
    for c in (from_recorded, from_store):
        assert set(c.bench.tolist()) == {"rodinia.srad", "rodinia.hotspot", "rodinia.nn"}
    key = np.lexsort((from_recorded.ms, from_recorded.kernel))
    key2 = np.lexsort((from_store.ms, from_store.kernel))
    assert np.array_equal(from_recorded.ms[key], from_store.ms[key2])
    assert np.allclose(from_recorded.X[key], from_store.X[key2], equal_nan=True)


class _Source:
    """A user's own source: one kernel timed, one it cannot give, one with no usable time."""

    def timed_kernels(self) -> Iterator[TimedKernel | SkippedKernel]:
        data = _rodinia(("rodinia.srad.k1",))
        spec = suite.get("rodinia.srad.k1")
        static = load_recorded_features()[spec.name]
        points = {k: v[0] for k, v in data.kernels[spec.name].times().items()}
        yield TimedKernel(spec, static, data.profile(), points)
        yield SkippedKernel("mine.kernel", "no KernelSpec found")
        nn = suite.get("rodinia.nn.euclid")
        nothing = {k: float("nan") for k in points}
        yield TimedKernel(nn, load_recorded_features()[nn.name], data.profile(), nothing)


def test_any_source_is_learned_from_and_says_what_it_skipped() -> None:
    source: TrainingCorpus = _Source()
    rows, skipped = corpus_rows(source)
    assert set(rows.kernel.tolist()) == {"rodinia.srad.k1"}
    assert skipped["mine.kernel"] == "no KernelSpec found"
    assert "no measured time" in skipped["rodinia.nn.euclid"]


def test_a_source_with_nothing_to_learn_from_is_refused() -> None:
    class Empty:
        def timed_kernels(self) -> list[SkippedKernel]:
            return [SkippedKernel("a.b", "why not")]

    with pytest.raises(SnowpackError, match="no kernel in my corpus .*a.b"):
        corpus_rows(Empty(), where="my corpus")
