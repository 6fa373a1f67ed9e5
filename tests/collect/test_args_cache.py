"""The worker's argument cache: a plan alternating between sizes builds each size once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from klaraptor.collect.argcache import ArgsCache as _ArgsCache
from klaraptor.core.types import DataSize


class _HostBackend:
    """The two backend calls the cache makes, on host arrays (the cache logic needs no GPU)."""

    def __init__(self) -> None:
        self.frees = 0

    def free_memory(self) -> None:
        self.frees += 1

    @staticmethod
    def to_host(args: Any) -> Any:
        return args

    @staticmethod
    def clone_args(args: Any) -> tuple[Any, ...]:
        return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


class _Spec:
    def __init__(self, fail_beside_others: bool = False) -> None:
        self.made: list[int] = []
        self.references: list[int] = []
        self.fail_beside_others = fail_beside_others
        self.cache: _ArgsCache | None = None

    def make_args(self, D: DataSize, rng: np.random.Generator) -> tuple[Any, ...]:
        n = D.values()[0]
        if self.fail_beside_others and self.cache is not None and self.cache._entries:
            raise MemoryError(f"no room for N={n} beside the other sizes")
        self.made.append(n)
        return (rng.random(n), np.zeros(n))

    def reference(self, D: DataSize, host_args: Any) -> dict[int, Any]:
        self.references.append(D.values()[0])
        return {1: 2.0 * host_args[0]}


def _D(n: int) -> DataSize:
    return DataSize(("N",), (n,))


def test_alternating_sizes_build_each_size_once() -> None:
    spec, be = _Spec(), _HostBackend()
    cache = _ArgsCache(spec, 0, be, keep=3)
    for _ in range(5):
        for n in (768, 256):
            cache.get(_D(n))
            cache.expected(_D(n))
    assert spec.made == [768, 256]
    assert spec.references == [768, 256]
    assert be.frees == 0


def test_least_recently_used_size_is_dropped_and_memory_freed() -> None:
    spec, be = _Spec(), _HostBackend()
    cache = _ArgsCache(spec, 0, be, keep=2)
    a = cache.get(_D(1))
    cache.get(_D(2))
    cache.get(_D(1))  # 1 is now the most recent
    cache.get(_D(3))  # drops 2
    assert be.frees == 1
    assert cache.get(_D(1)) is a
    cache.get(_D(2))
    assert spec.made == [1, 2, 3, 2]


def test_arguments_are_reproducible_per_size() -> None:
    spec, be = _Spec(), _HostBackend()
    one = _ArgsCache(spec, 7, be).get(_D(16))[0]
    two = _ArgsCache(spec, 7, be).get(_D(16))[0]
    np.testing.assert_array_equal(one, two)


def test_a_size_that_does_not_fit_beside_others_is_retried_alone() -> None:
    spec, be = _Spec(fail_beside_others=True), _HostBackend()
    cache = _ArgsCache(spec, 0, be, keep=3)
    spec.cache = cache
    cache.get(_D(8))
    cache.get(_D(4))  # fails beside 8, succeeds once 8 is freed
    assert spec.made == [8, 4]
    assert list(cache._entries) == [_D(4)]
    assert be.frees == 1


def test_a_failure_with_nothing_else_resident_is_raised() -> None:
    class Broken(_Spec):
        def make_args(self, D: DataSize, rng: np.random.Generator) -> tuple[Any, ...]:
            raise MemoryError("too large")

    with pytest.raises(MemoryError, match="too large"):
        _ArgsCache(Broken(), 0, _HostBackend()).get(_D(8))


def test_check_case_references_each_size_once_and_hands_out_pristine_copies() -> None:
    """A kernel that changes its inputs is checked at every configuration of a sweep: its
    inputs and reference are made once per size, and each check gets unchanged inputs."""
    spec, be = _Spec(), _HostBackend()
    cache = _ArgsCache(spec, 0, be, keep=3)
    first, expected = cache.check_case(_D(64))
    pristine = first[0].copy()
    first[0][:] = -1.0  # what an in-place kernel does to its inputs
    for _ in range(3):
        again, expected_again = cache.check_case(_D(64))
        np.testing.assert_array_equal(again[0], pristine)
        assert expected_again is expected
        again[0][:] = -1.0
    assert spec.made == [64]
    assert spec.references == [64]
    # Its own random stream: not the timed arguments of the same size.
    assert not np.array_equal(cache.get(_D(64))[0], pristine)


class _NamedSpec(_Spec):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def fingerprint(self) -> str:
        return self.name


def test_arguments_handed_to_the_next_job_are_the_ones_it_would_make() -> None:
    # The info job makes the arguments at the largest size and hands them to the plan, which
    # must get exactly what it would have made (same seed, size and stream), and only once.
    from klaraptor.collect.argcache import hand_over

    info_spec, plan_spec = _NamedSpec("k"), _NamedSpec("k")
    made = _ArgsCache(info_spec, 7, _HostBackend()).fresh(_D(1024))
    hand_over(info_spec, 7, _D(1024), made)
    plan = _ArgsCache(plan_spec, 7, _HostBackend())
    got = plan.get(_D(1024))
    assert got is made and plan_spec.made == []
    again = _ArgsCache(_NamedSpec("k"), 7, _HostBackend()).fresh(_D(1024))
    assert again is not made and np.array_equal(again[0], made[0])  # taken once, then made


def test_handed_arguments_of_another_kernel_seed_or_size_are_dropped() -> None:
    from klaraptor.collect import argcache

    for spec, seed, n in (
        (_NamedSpec("other"), 7, 1024),
        (_NamedSpec("k"), 8, 1024),
        (_NamedSpec("k"), 7, 512),
    ):
        argcache.hand_over(_NamedSpec("k"), 7, _D(1024), (np.ones(3),))
        args = _ArgsCache(spec, seed, _HostBackend()).fresh(_D(n))
        assert spec.made == [n] and len(args[0]) == n
        assert argcache._HANDED == {}  # the entry is gone: no GPU memory held for nothing
