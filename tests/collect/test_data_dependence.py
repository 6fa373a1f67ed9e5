"""The data-dependence check: its verdict from timings (CPU) and, on the GPU, a kernel whose work
follows its data (Rodinia BFS: the frontier of a random graph) against data-oblivious ones.

GPU part: PYTHONPATH=src python3 -m pytest -s -m gpu tests/collect/test_data_dependence.py
(about 20 s on an H200: three small checks, one in a worker subprocess).
"""

from __future__ import annotations

import warnings

import pytest

from klaraptor import suite
from klaraptor.collect.data_dependence import FLOOR, check_data_dependence, judge
from klaraptor.collect.worker import spread_blocks
from klaraptor.core.errors import DataDependenceWarning, KlaraptorError, KlaraptorWarning
from klaraptor.core.types import DataSize

D = DataSize(("N",), (1024,))


def _timing(block: list[int], a: list[float], b: list[float], spread: float = 0.005) -> dict:
    return {
        "block": block,
        "a": [{"median_ms": x, "spread": spread} for x in a],
        "b": [{"median_ms": x, "spread": spread} for x in b],
    }


def test_inputs_that_differ_beyond_the_noise_make_a_kernel_data_dependent() -> None:
    v = judge(
        "k",
        D,
        (0, 1),
        [
            _timing([32, 1, 1], [1.00, 1.01], [1.20, 1.21]),
            _timing([256, 1, 1], [0.50, 0.50], [0.60, 0.61]),
            _timing([1024, 1, 1], [0.70, 0.70], [0.70, 0.71]),
        ],
    )
    assert v.dependent and [b.differs for b in v.blocks] == [True, True, False]
    assert v.blocks[0].effect == pytest.approx((1.205 - 1.005) / 1.005)
    assert v.blocks[0].noise == pytest.approx(0.01 / 1.005)
    assert "not data-oblivious" in v.message() and "may not transfer" in v.message()
    assert v.to_dict()["dependent"] is True


def test_differences_within_the_noise_or_the_floor_do_not() -> None:
    noisy = judge("k", D, (0, 1), [_timing([32, 1, 1], [1.0, 1.3], [1.35, 1.05])])
    assert not noisy.dependent  # 20 % apart, but its own rounds are 30 % apart
    small = judge("k", D, (0, 1), [_timing([32, 1, 1], [1.0, 1.0], [1.02, 1.02], spread=0.0)])
    assert small.blocks[0].effect < FLOOR and not small.dependent
    assert "data-oblivious" in small.message()
    one_of_three = judge(
        "k",
        D,
        (0, 1),
        [
            _timing([32, 1, 1], [1.0, 1.0], [2.0, 2.0]),
            _timing([64, 1, 1], [1.0, 1.0], [1.0, 1.0]),
            _timing([96, 1, 1], [1.0, 1.0], [1.0, 1.0]),
        ],
    )
    assert not one_of_three.dependent  # a majority of the blocks must differ


def test_bad_timings_and_arguments_are_clear_errors() -> None:
    with pytest.raises(KlaraptorError, match="no block was timed"):
        judge("k", D, (0, 1), [])
    with pytest.raises(KlaraptorError, match="no usable timing"):
        judge("k", D, (0, 1), [_timing([32, 1, 1], [0.0], [1.0])])
    spec = suite.get("rodinia.bfs.expand")
    with pytest.raises(KlaraptorError, match="two different seeds"):
        check_data_dependence(spec, 131072, seeds=(3, 3))
    with pytest.raises(KlaraptorError, match="n_blocks"):
        check_data_dependence(spec, 131072, n_blocks=0)
    with pytest.raises(KlaraptorError):
        check_data_dependence(spec, -5)
    with pytest.raises(KlaraptorError, match=r"a block is \(bx, by, bz\), got \(32, 1\)"):
        check_data_dependence(spec, 131072, blocks=[(32, 1)])
    assert issubclass(DataDependenceWarning, KlaraptorWarning)


def test_blocks_spread_over_the_thread_counts() -> None:
    cands = [(x, 1, 1) for x in range(32, 1025, 32)]
    assert spread_blocks(cands, 3) == [(32, 1, 1), (544, 1, 1), (1024, 1, 1)]
    assert spread_blocks(cands, 3, default=(256, 1, 1)) == [(256, 1, 1), (32, 1, 1), (544, 1, 1)]
    assert spread_blocks(cands, 3, default=(7, 7, 7))[0] == (32, 1, 1)
    assert spread_blocks(cands, 1) == [(32, 1, 1)]
    assert spread_blocks([(64, 1, 1)], 3) == [(64, 1, 1)]


@pytest.mark.gpu
def test_bfs_is_flagged_in_a_worker() -> None:
    spec = suite.get("rodinia.bfs.expand")
    with pytest.warns(DataDependenceWarning, match="rodinia.bfs.expand"):
        v = check_data_dependence(spec, spec.meta["train_sizes"][0])
    assert v.dependent, v.to_dict()
    print(v.to_dict())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["polybench.atax.k1", "rodinia.srad.k1"])
def test_data_oblivious_kernels_are_not_flagged(name: str) -> None:
    spec = suite.get(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataDependenceWarning)
        v = check_data_dependence(spec, spec.meta["train_sizes"][0], in_process=True)
    assert not v.dependent, v.to_dict()
    print(v.to_dict())
