"""What SNOWPACK learns from: the training-corpus interface.

SNOWPACK learns from kernels timed on one GPU. A source of them implements `TrainingCorpus`: it
gives each kernel's spec, static features, device and measured times (`TimedKernel`), or says
why it cannot (`SkippedKernel`). SNOWPACK never asks where they came from: a store's
measurements (`StoreCorpus`), the recorded H200 suites (`klaraptor.suite.recorded.RecordedCorpus`)
or a user's own collection are all the same to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block, DataSize
from klaraptor.models.snowpack.features import SnowpackError, static_features
from klaraptor.models.snowpack.learner import Corpus, kernel_corpus

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store
    from klaraptor.store.records import StaticFeatures


@dataclass(frozen=True)
class TimedKernel:
    """One kernel's measured times on one GPU, with what SNOWPACK reads beside them."""

    spec: KernelSpec
    static: StaticFeatures
    device: DeviceProfile
    points: Mapping[tuple[DataSize, Block], float]  # (D, block) -> median ms


@dataclass(frozen=True)
class SkippedKernel:
    """A kernel a source has times of but cannot give, and why."""

    name: str
    reason: str


class TrainingCorpus(Protocol):
    """A source of kernels SNOWPACK can learn from."""

    def timed_kernels(self) -> Iterable[TimedKernel | SkippedKernel]:
        """Every kernel of the source, in a fixed order."""
        ...


def benchmark_of(spec: KernelSpec) -> str:
    """The unit SNOWPACK leaves out for unseen kernels: the benchmark (application)."""
    return f"{spec.name.split('.')[0]}.{spec.meta.get('benchmark', spec.name)}"


def kernel_rows(kernel: TimedKernel) -> Corpus:
    """The rows of one timed kernel (SnowpackError when none can be learned from)."""
    return kernel_corpus(
        kernel.spec, kernel.static, kernel.device, kernel.points, benchmark_of(kernel.spec)
    )


def corpus_rows(
    source: TrainingCorpus, *, where: str = "the corpus"
) -> tuple[Corpus, dict[str, str]]:
    """The rows of every kernel of `source`, and the kernels skipped (why); SnowpackError when
    no kernel gives a row."""
    parts: list[Corpus] = []
    skipped: dict[str, str] = {}
    for kernel in source.timed_kernels():
        if isinstance(kernel, SkippedKernel):
            skipped[kernel.name] = kernel.reason
            continue
        try:
            parts.append(kernel_rows(kernel))
        except SnowpackError as exc:
            skipped[kernel.spec.name] = str(exc)
    if not parts:
        raise SnowpackError(
            f"no kernel in {where} has timings that SNOWPACK can learn from (skipped: "
            f"{skipped or 'none measured'}); `klaraptor import-recorded` brings the recorded "
            "H200 suites"
        )
    return Corpus.concat(parts), skipped


@dataclass
class StoreCorpus:
    """Every kernel a store has timed on `device`, its spec found in the kernel catalog (or in
    `specs`) and unchanged since it was measured."""

    store: Store
    device: DeviceProfile
    specs: Mapping[str, KernelSpec] | None = None

    def timed_kernels(self) -> Iterator[TimedKernel | SkippedKernel]:
        for rec in self.store.kernels():
            times = self.store.measurements(rec.name, self.device.key, kind="time", status="ok")
            if not times:
                continue
            try:
                spec = self._spec_for(rec.name)
            except KlaraptorError:
                yield SkippedKernel(rec.name, "no KernelSpec found (pass it in specs=)")
                continue
            if spec.fingerprint() != rec.fingerprint:
                yield SkippedKernel(
                    rec.name, "the spec changed since it was measured (fingerprint differs)"
                )
                continue
            try:
                static = static_features(spec, rec.name, store=self.store)
            except SnowpackError as exc:
                yield SkippedKernel(rec.name, str(exc))
                continue
            points = {(m.D, m.block): float(m.value["median_ms"]) for m in times}
            yield TimedKernel(spec, static, self.device, points)

    def _spec_for(self, name: str) -> KernelSpec:
        if self.specs is not None and name in self.specs:
            return self.specs[name]
        from klaraptor.spec import catalog

        return catalog.get(name)


__all__ = [
    "SkippedKernel",
    "StoreCorpus",
    "TimedKernel",
    "TrainingCorpus",
    "benchmark_of",
    "corpus_rows",
    "kernel_rows",
]
