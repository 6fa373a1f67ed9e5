"""The measuring worker's launch arguments and reference outputs per data size
(`klaraptor.collect.worker`): built once per size, a few sizes kept, and pristine copies for the
output checks of kernels that change their inputs."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from klaraptor.core.types import DataSize

__all__ = ["ArgsCache", "hand_over"]

# Arguments one job made and never launched on, for the next job of the same kernel in this
# (warm) worker process: a build's info job makes them at every training size to count their
# bytes, then its plan starts by timing at the largest; making them twice cost 0.05-0.15 s of a
# build. One entry, taken by the first `ArgsCache.fresh` of any job (and dropped if not asked).
_HANDED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _handed_key(spec: Any, seed: int, D: DataSize) -> tuple[Any, ...]:
    return (spec.fingerprint(), int(seed), tuple(D.values()))


def hand_over(spec: Any, seed: int, D: DataSize, args: tuple[Any, ...]) -> None:
    """Keep `args` (made by `ArgsCache.fresh(D)`, never launched on) for the next job."""
    _HANDED.clear()
    _HANDED[_handed_key(spec, seed, D)] = args


def _take_over(spec: Any, seed: int, D: DataSize) -> tuple[Any, ...] | None:
    """The handed arguments if they are spec's at (seed, D); any other entry is dropped."""
    if not _HANDED:
        return None
    got = _HANDED.pop(_handed_key(spec, seed, D), None)
    _HANDED.clear()
    return got


class ArgsCache:
    """Launch arguments, and their reference outputs, for the last `keep` sizes.

    A measurement plan alternates between its smaller sizes candidate by candidate; rebuilding
    the arguments and the host reference at every switch would cost more than the timing. A few
    training-size argument sets bound GPU memory; a size that cannot be allocated beside the
    others is retried once with them freed."""

    def __init__(self, spec: Any, seed: int, backend: Any, keep: int = 3) -> None:
        self.spec = spec
        self.seed = seed
        self.backend = backend
        self.keep = max(1, int(keep))
        # D -> [arguments, reference outputs or None], least recently used first
        self._entries: OrderedDict[DataSize, list[Any]] = OrderedDict()
        # D -> (pristine check inputs, their reference outputs): `check_case`
        self._checks: OrderedDict[DataSize, tuple[tuple[Any, ...], Any]] = OrderedDict()
        self._setup_s = 0.0  # building arguments and references since the last take_setup()

    def take_setup(self) -> float:
        """Seconds spent building arguments and reference outputs since the last call."""
        out, self._setup_s = self._setup_s, 0.0
        return out

    def fresh(self, D: DataSize, stream: int = 0) -> tuple[Any, ...]:
        """New arguments, reproducible per (seed, D, stream)."""
        import numpy as np

        if stream == 0:
            handed = _take_over(self.spec, self.seed, D)
            if handed is not None:
                return handed
        rng = np.random.default_rng([self.seed, stream, *D.values()])
        return tuple(self.spec.make_args(D, rng))

    def _drop(self, n: int) -> None:
        for _ in range(min(n, len(self._entries))):
            self._entries.popitem(last=False)
        self._checks.clear()  # rebuilt on demand, at most one size at a time
        self.backend.free_memory()

    def get(self, D: DataSize) -> tuple[Any, ...]:
        entry = self._entries.get(D)
        if entry is not None:
            self._entries.move_to_end(D)
            return entry[0]
        if len(self._entries) >= self.keep:
            self._drop(len(self._entries) - self.keep + 1)
        t = time.perf_counter()
        try:
            args = self.fresh(D)
        except Exception:
            if not self._entries:
                raise
            self._drop(len(self._entries))  # perhaps out of memory beside the other sizes
            args = self.fresh(D)
        self._entries[D] = [args, None]
        self._setup_s += time.perf_counter() - t
        return args

    def expected(self, D: DataSize) -> dict[int, Any]:
        """The reference outputs for the cached arguments of D (computed once per D).

        Valid for idempotent kernels only: their inputs never change between launches.
        """
        args = self.get(D)
        entry = self._entries[D]
        if entry[1] is None:
            t = time.perf_counter()
            entry[1] = self.spec.reference(D, self.backend.to_host(args))
            self._setup_s += time.perf_counter() - t
        return entry[1]

    def check_case(self, D: DataSize) -> tuple[tuple[Any, ...], Any]:
        """(inputs, reference) for one output check of a kernel that changes its inputs: made once
        per D (their own random stream), each check on a GPU copy of the pristine inputs (made
        afresh per configuration, they cost tens of milliseconds a point, more than its timing)."""
        entry = self._checks.get(D)
        if entry is None:
            t = time.perf_counter()
            if len(self._checks) >= self.keep:
                self._checks.popitem(last=False)
            pristine = self.fresh(D, stream=1)
            expected = self.spec.reference(D, self.backend.to_host(pristine))
            entry = self._checks[D] = (pristine, expected)
            self._setup_s += time.perf_counter() - t
        else:
            self._checks.move_to_end(D)
        return self.backend.clone_args(entry[0]), entry[1]
