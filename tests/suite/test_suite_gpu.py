"""The PolyBench-style suite's CUDA kernels on a real GPU: compile with NVRTC, launch, compare with `reference`.

Every kernel runs at a size that is not a multiple of any block dimension, with its default block
and two other shapes (one with bx < 32), so the bounds checks and the index mapping are exercised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.core.types import Block
from klaraptor.spec import KernelSpec

cp = pytest.importorskip("cupy")


def _device_count() -> int:
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver / no device: skip, whatever the error type
        return 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_device_count() == 0, reason="no CUDA device"),
]

SPECS = suite.all_specs("polybench")  # Rodinia: tests/test_suite_rodinia_gpu.py
IDS = [s.name for s in SPECS]
N = 67  # prime: never a multiple of a block dimension

OTHER_BLOCKS: dict[int, tuple[Block, Block]] = {
    1: ((16, 1, 1), (96, 1, 1)),
    2: ((8, 4, 1), (64, 16, 1)),
    3: ((4, 4, 4), (16, 8, 8)),
}


def _blocks(spec: KernelSpec) -> list[Block]:
    assert spec.default_block is not None
    return [spec.default_block, *OTHER_BLOCKS[spec.dim]]


_MODULES: dict[str, Any] = {}


def _function(spec: KernelSpec) -> Any:
    key = spec.source + "\0" + " ".join(spec.options)
    if key not in _MODULES:
        _MODULES[key] = cp.RawModule(code=spec.source, options=spec.options)
    return _MODULES[key].get_function(spec.kernel)


def _host(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(cp.asnumpy(a) if isinstance(a, cp.ndarray) else a for a in args)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kernel_matches_reference(spec: KernelSpec) -> None:
    fn = _function(spec)
    D = spec.size(N)
    for block in _blocks(spec):
        args = spec.make_args(D, np.random.default_rng(N))
        host = _host(args)
        expected = spec.reference(D, host)
        for i in spec.meta["overwrites"]:
            args[i].fill(np.nan)  # fully overwritten: any element left unwritten stays NaN
        grid = spec.grid_for(D, block)
        fn(grid, block, args, shared_mem=spec.dynamic_smem_for(D, block))
        cp.cuda.runtime.deviceSynchronize()
        after = _host(args)
        for i, a in enumerate(after):
            if i in spec.outputs or not isinstance(a, np.ndarray):
                continue
            np.testing.assert_array_equal(a, host[i], err_msg=f"block {block}: input {i} changed")
        for i in spec.outputs:
            out = after[i].astype(np.float64)
            assert np.all(np.isfinite(out)), f"block {block}: output {i} has non-finite values"
            rel = np.linalg.norm(out - expected[i]) / np.linalg.norm(expected[i])
            assert rel <= spec.rtol, f"block {block}: output {i} relative error {rel:.3g}"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_idempotent_flag(spec: KernelSpec) -> None:
    """idempotent=True: a second launch on the same arrays leaves the outputs bit-identical;
    False: it changes them (the kernel reads what it writes)."""
    fn = _function(spec)
    D = spec.size(N)
    block = spec.default_block
    args = spec.make_args(D, np.random.default_rng(N))
    grid = spec.grid_for(D, block)
    smem = spec.dynamic_smem_for(D, block)
    outs = []
    for _ in range(2):
        fn(grid, block, args, shared_mem=smem)
        cp.cuda.runtime.deviceSynchronize()
        outs.append([cp.asnumpy(args[i]) for i in spec.outputs])
    same = all(np.array_equal(a, b) for a, b in zip(*outs))
    assert same == spec.idempotent
