"""Trip counts from the kernel's parameters (SAAKE without counters): the SASS control flow run
for sampled warps, checked against the recorded Nsight Compute counters."""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.models.saake import interp
from klaraptor.models.saake.isa_source import kernel_isa
from klaraptor.models.saake.tripcounts import COUNTERS, block_counters, count_classes
from tests.isa.helpers import needs_tools


def _per_warp(name: str, D: int, block: tuple[int, int, int]) -> float:
    spec = suite.get(name)
    isa, _ = kernel_isa(spec)
    runner = interp.WarpInterpreter(isa)
    Dm = {spec.data_names[0]: D}
    gx, gy, gz = (int(v) for v in spec.grid_arrays(Dm, *map(float, block)))
    args = spec.make_args(spec.size(Dm), np.random.default_rng(0), device=False)
    launch = interp.Launch(block, (gx, gy, gz), interp.param_words(args))
    wpb = -(-(block[0] * block[1] * block[2]) // 32)
    picks = interp.sample_warps((gx, gy, gz), wpb)
    run = runner.run(launch, [(c, w) for c, w, _ in picks], [w for _, _, w in picks])
    a = np.array([[c[key] for c in block_counters(isa)] for key in COUNTERS])
    return float((a @ (run.counts / sum(w for _, _, w in picks)))[0])


def test_kernel_parameters_fill_the_constant_bank() -> None:
    spec = suite.get("polybench.gramschm.k3")
    args = spec.make_args(spec.size(256), np.random.default_rng(0), device=False)
    words = interp.param_words(args)
    # a, r, q (pointers, 8 bytes each from 0x210), then k and N (4 bytes each).
    assert sorted(words) == [0x210, 0x214, 0x218, 0x21C, 0x220, 0x224, 0x228, 0x22C]
    assert words[0x22C] == 256 and words[0x228] == int(args[3])


@pytest.mark.parametrize(
    ("name", "N", "block"),
    [
        ("polybench.atax.k1", 1024, (256, 1, 1)),
        ("polybench.gemm.gemm", 512, (1024, 1, 1)),  # half the block past the matrix's edge
        ("polybench.gramschm.k3", 1024, (64, 1, 1)),  # half the warps exit at once
    ],
)
def test_instructions_per_warp_match_the_counters(recorded, name: str, N: int, block) -> None:  # noqa: ANN001
    kd = recorded.kernels[name]
    raw = next(r[-1] for r in kd.ncu if r[0] == N and tuple(r[1:4]) == block)
    measured = raw["smsp__inst_executed.sum"] / raw["smsp__warps_launched.sum"]
    assert _per_warp(name, N, block) == pytest.approx(measured, rel=0.02)


def test_fast_forwarding_a_loop_counts_what_running_it_counts() -> None:
    spec = suite.get("polybench.corr.k4")  # a triangular loop inside a loop
    isa, _ = kernel_isa(spec)
    classes = count_classes(isa)
    got = [
        interp.counts_from_parameters(
            interp.WarpInterpreter(isa, fast_forward=ff), classes, spec, spec.size(96), (32, 1, 1)
        )
        for ff in (True, False)
    ]
    assert got[0].counts is not None and np.allclose(got[0].counts, got[1].counts)
    assert got[0].fast_forwarded > 0 and got[1].fast_forwarded == 0


def test_a_kernel_whose_loops_follow_its_data_needs_counters() -> None:
    spec = suite.get("rodinia.bfs.expand")
    isa, _ = kernel_isa(spec)
    got = interp.counts_from_parameters(
        interp.WarpInterpreter(isa),
        count_classes(isa),
        spec,
        spec.size(spec.meta["train_sizes"][0]),
        (256, 1, 1),
    )
    assert got.counts is None and "data" in got.reason


@needs_tools
def test_a_loop_whose_lanes_diverge_inside_is_fast_forwarded_exactly() -> None:
    # n-body's tile loop at TILE = 32 with 64 threads: only the first 32 threads stage the tile,
    # so every iteration diverges inside. The probe follows both sides; before, it gave up, and
    # every tile iteration was interpreted (1,024 at N = 32768: 15 s a block).
    spec = suite.get("tunables.nbody.nbody_tiles")
    pv = spec.param_values({"TILE": 32, "UNROLL": 1})
    isa, _ = kernel_isa(spec, variant=pv)
    classes = count_classes(isa)
    got = [
        interp.counts_from_parameters(
            interp.WarpInterpreter(isa, fast_forward=ff),
            classes,
            spec,
            spec.size(2048),
            (64, 1, 1),
            variant=pv,
        )
        for ff in (True, False)
    ]
    assert got[0].counts is not None and np.allclose(got[0].counts, got[1].counts)
    # The blocks run do not grow with N: the tile loop itself is skipped (580 and 2,308 blocks
    # at N = 2048 and 8192 when only the loops inside it were).
    steps = []
    for n in (2048, 8192):
        gx, gy, gz = (int(v) for v in spec.grid_arrays({"N": n}, 64.0, 1.0, 1.0, pv))
        words = dict(interp.param_words(spec.make_args(spec.size(n), np.random.default_rng(0),
                                                        device=False)))  # fmt: skip
        launch = interp.Launch((64, 1, 1), (gx, gy, gz), words)
        picks = interp.sample_warps((gx, gy, gz), 2)
        run = interp.WarpInterpreter(isa).run(
            launch, [(c, w) for c, w, _ in picks], [w for _, _, w in picks]
        )
        steps.append(run.steps)
    assert steps[0] == steps[1] < 200
