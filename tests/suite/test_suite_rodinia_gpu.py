"""The Rodinia suite's CUDA kernels on a real GPU, checked as collection checks them.

For every kernel, at a small size that is not a multiple of any block dimension (and at a tiny
one), with the default block and the extreme shapes the ConfigSpace admits (fewest and most
threads, widest and tallest, a 1D width that is not a power of two):
- in this process, with the collection worker's own functions (compile, opt in to the shared
  memory maximum, poison the fully written outputs with NaN, launch, compare with `reference`),
  on fresh arguments per block; inputs must come back unchanged;
- then through `collect()` itself (worker subprocess, cached arguments, output check at every
  point), which must report every point ok;
- each kernel launched twice gives bit-identical outputs (every kernel is idempotent);
- the default block at the largest training size passes the check with the spec's tolerance.

Run on the GPU machine:  PYTHONPATH=src python3 -m pytest -q -m gpu tests/test_suite_rodinia_gpu.py
About 2-3 minutes: the collect() test starts two worker processes per kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.backends.cupy_backend import CupyBackend
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import Block, KernelSpec

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

SPECS = suite.all_specs("rodinia")
IDS = [s.name for s in SPECS]
N_GRID = 67  # prime: never a multiple of a block dimension (and 5 tiles for nw, the last partial)
N_VEC = 5003  # prime


def _sizes(spec: KernelSpec) -> list[int]:
    """A small size and a tiny one (below most block widths), within the spec's range."""
    small = N_GRID if spec.meta["layout"] == "NxN" else N_VEC
    return [small, max(5, spec.data[0].lo)]


def _blocks(spec: KernelSpec, n: int) -> list[Block]:
    """The default block and the extreme admissible shapes."""
    ok, _ = ConfigSpace.for_spec(spec).admissible({"N": n})
    threads = [b[0] * b[1] for b in ok]
    aspect = [b[0] / b[1] for b in ok]
    picks = [
        spec.default_block,
        ok[int(np.argmin(threads))],
        ok[int(np.argmax(threads))],
        ok[int(np.argmax(aspect))],
        ok[int(np.argmin(aspect))],
    ]
    if spec.dim == 1:
        picks += [b for b in ok if b[0] & (b[0] - 1)][:1]  # e.g. 96: not a power of two
    out: list[Block] = []
    for b in picks:
        if b not in out:
            out.append(b)
    assert all(b in ok for b in out)
    return out


def _function(spec: KernelSpec) -> Any:
    """The compiled kernel, opted in to the device's shared memory maximum (as the worker does)."""
    be = CupyBackend()
    fn = be.compile(spec.source, spec.kernel, spec.options)
    if spec.dynamic_smem is not None:
        optin = be.max_dynamic_smem_optin(0)
        be.opt_in_dynamic_smem(fn, optin - be.attributes(fn).static_smem)
    return fn


def _check(spec: KernelSpec, n: int, block: Block, seed: int) -> dict[str, Any]:
    """One launch on fresh arguments through the worker's check; inputs must not change."""
    be = CupyBackend()
    fn = _function(spec)
    D = spec.size(n)
    args = spec.make_args(D, np.random.default_rng(seed))
    host = be.to_host(args)
    expected = spec.reference(D, host)
    grid = spec.grid_for(D, block)
    smem = spec.dynamic_smem_for(D, block)
    result = be.check_outputs(
        lambda a: be.launch(fn, grid, block, a, smem),
        args,
        expected,
        poison_indices=tuple(spec.meta["overwrites"]),
        rtol=spec.rtol,
    )
    after = be.to_host(args)
    for i, a in enumerate(after):
        if isinstance(a, np.ndarray) and i not in spec.outputs:
            np.testing.assert_array_equal(a, host[i], err_msg=f"{block}: input {i} changed")
    return result


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kernel_matches_reference(spec: KernelSpec) -> None:
    failures = []
    for n in _sizes(spec):
        for block in _blocks(spec, n):
            res = _check(spec, n, block, seed=n)
            if not res["ok"]:
                failures.append(f"N={n} block={block}: errors {res['errors']}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_collect_checks_every_point(spec: KernelSpec, tmp_path: Path) -> None:
    from klaraptor.collect.collector import CollectOptions, collect
    from klaraptor.store import Store

    n = _sizes(spec)[0]
    blocks = _blocks(spec, n)
    space = ConfigSpace(spec.dim, candidates=blocks, spec=spec)
    opts = CollectOptions(
        counters=False,
        check=True,
        warmup=1,
        min_time_ms=0.05,
        min_repeats=1,
        max_repeats=2,
        target_sample_ms=0.01,
        timeout_s=60.0,
    )
    with Store(tmp_path / "s.sqlite") as store:
        rep = collect(spec, [{"N": n}], store=store, space=space, options=opts, progress=False)
        reasons = [f"{f.block}: {f.reason}" for f in rep.failures]
        assert rep.count("time", "ok") == len(blocks), reasons
        for m in store.measurements(spec.name, rep.device, kind="time"):
            assert m.status == "ok" and m.value["check"]["ok"], (m.block, m.value.get("check"))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_idempotent(spec: KernelSpec) -> None:
    be = CupyBackend()
    assert spec.idempotent
    fn = _function(spec)
    n = _sizes(spec)[0]
    D = spec.size(n)
    block = spec.default_block
    args = spec.make_args(D, np.random.default_rng(n))
    grid, smem = spec.grid_for(D, block), spec.dynamic_smem_for(D, block)
    outs = []
    for _ in range(2):
        be.launch(fn, grid, block, args, smem)
        be.synchronize()
        outs.append([cp.asnumpy(args[i]) for i in spec.outputs])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_default_block_at_the_largest_training_size(spec: KernelSpec) -> None:
    """Float32 against the float64 reference within rtol where collection checks it."""
    n = max(spec.meta["train_sizes"])
    res = _check(spec, n, spec.default_block, seed=1)
    print(f"\n{spec.name} N={n}: max relative error {res['max_rel_err']:.3g} (rtol {spec.rtol:g})")
    assert res["ok"], res["errors"]
    cp.get_default_memory_pool().free_all_blocks()
