"""The patterns suite's CUDA kernels on a real GPU, checked as collection checks them.

For every kernel, at a small size that is not a multiple of any block dimension (and at a tiny
one), with the default block and the extreme shapes the ConfigSpace admits: one launch on fresh
arguments through the worker's output check (outputs poisoned first where fully written; inputs
must come back unchanged). Idempotent kernels give bit-identical outputs launched twice; the
histogram adds its counts again.

Run on the GPU machine:  PYTHONPATH=src python3 -m pytest -q -m gpu tests/suite/test_suite_patterns_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.backends.cupy_backend import CupyBackend
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import Block, KernelSpec

cp = pytest.importorskip("cupy")
# The Rodinia suite's checks, as collection runs them (compile with the shared-memory opt-in,
# poison, launch, compare; inputs unchanged).
from tests.suite.test_suite_rodinia_gpu import _check, _device_count, _function  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_device_count() == 0, reason="no CUDA device"),
]

SPECS = suite.all_specs("patterns")
IDS = [s.name for s in SPECS]
# Primes: never a multiple of a block dimension.
SMALL = {"N": 5003, "NxN": 67, "N^3": 13}
TINY = 5


def _blocks(spec: KernelSpec, n: int) -> list[Block]:
    """The default block and the extreme admissible shapes (threads, aspect, depth)."""
    ok, _ = ConfigSpace.for_spec(spec).admissible({"N": n})
    threads = [b[0] * b[1] * b[2] for b in ok]
    aspect = [b[0] / b[1] for b in ok]
    picks = [
        spec.default_block,
        ok[int(np.argmin(threads))],
        ok[int(np.argmax(threads))],
        ok[int(np.argmax(aspect))],
        ok[int(np.argmin(aspect))],
        ok[int(np.argmax([b[2] for b in ok]))],
    ]
    if spec.dim == 1:
        picks += [b for b in ok if b[0] & (b[0] - 1)][:1]  # e.g. 96: not a power of two
    return list(dict.fromkeys(picks))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kernel_matches_reference(spec: KernelSpec) -> None:
    failures = []
    for n in (SMALL[spec.meta["layout"]], TINY):
        for block in _blocks(spec, n):
            res = _check(spec, n, block, seed=n)
            if not res["ok"]:
                failures.append(f"N={n} block={block}: errors {res['errors']}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_launched_twice(spec: KernelSpec) -> None:
    be = CupyBackend()
    fn = _function(spec)
    n = SMALL[spec.meta["layout"]]
    D = spec.size(n)
    block = spec.default_block
    args = spec.make_args(D, np.random.default_rng(n))
    first = [cp.asnumpy(args[i]) for i in spec.outputs]
    grid, smem = spec.grid_for(D, block), spec.dynamic_smem_for(D, block)
    outs = []
    for _ in range(2):
        be.launch(fn, grid, block, args, smem)
        be.synchronize()
        outs.append([cp.asnumpy(args[i]) for i in spec.outputs])
    if spec.idempotent:
        for a, b in zip(*outs):
            np.testing.assert_array_equal(a, b)
    else:  # the histogram: each launch adds the same counts
        for a0, a, b in zip(first, *outs):
            np.testing.assert_array_equal(b.astype(np.int64) - a, a.astype(np.int64) - a0)
