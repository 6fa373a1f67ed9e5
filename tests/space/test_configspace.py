"""ConfigSpace: default candidates, user edits, constraints, launch feasibility, dry run."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from klaraptor.core.errors import SpecError
from klaraptor.device.profile import recorded_profile
from klaraptor.space.configspace import (
    CUDA_MAX_BLOCK_DIM,
    ConfigSpace,
    KernelAttributes,
    PlannedPoint,
    block_order,
    default_candidates,
    format_dry_run,
)
from klaraptor.spec import DataParam, KernelSpec

# The committed H200 profile (the device limits are what matter here).
H200 = recorded_profile("h200")

PLAIN = KernelAttributes(
    num_regs=32,
    static_smem=0,
    const_size=0,
    local_size=0,
    max_threads_per_block=1024,
    max_dynamic_smem=49152,
)

SRC2 = 'extern "C" __global__ void k2(float* a, int N) {}'
SRC1 = 'extern "C" __global__ void k1(float* a, int n) { extern __shared__ float s[]; }'


def make_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    return ()


def spec2(**kw: Any) -> KernelSpec:
    base: dict[str, Any] = dict(
        name="test.k2",
        source=SRC2,
        kernel="k2",
        data=(DataParam("N", arg=1),),
        dim=2,
        grid=("ceil(N / bx)", "ceil(N / by)", "1"),
        make_args=make_args,
    )
    base.update(kw)
    return KernelSpec(**base)


def spec1(**kw: Any) -> KernelSpec:
    base: dict[str, Any] = dict(
        name="test.k1",
        source=SRC1,
        kernel="k1",
        data=(DataParam("n", arg=1),),
        dim=1,
        grid=("ceil(n / bx)", "1", "1"),
        make_args=make_args,
        dynamic_smem="bx * 64",
    )
    base.update(kw)
    return KernelSpec(**base)


# -- defaults --------------------------------------------------------------------------------------


def test_default_1d() -> None:
    c = ConfigSpace(1).candidates
    assert c == tuple((t, 1, 1) for t in range(32, 1025, 32))
    assert len(c) == 32
    assert ConfigSpace(1, max_threads=500).candidates[-1] == (480, 1, 1)


def test_default_2d_has_51_shapes() -> None:
    c = ConfigSpace(2).candidates
    assert len(c) == 51
    assert len(set(c)) == 51
    for bx, by, bz in c:
        assert bz == 1 and 32 <= bx * by <= 1024
        assert bx & (bx - 1) == 0 and by & (by - 1) == 0
    assert c[:6] == ((32, 1, 1), (16, 2, 1), (8, 4, 1), (4, 8, 1), (2, 16, 1), (1, 32, 1))
    assert c[-1] == (1, 1024, 1)
    assert len(ConfigSpace(2, max_threads=256).candidates) == 6 + 7 + 8 + 9  # 2^5 .. 2^8


def test_default_3d_respects_the_z_limit() -> None:
    c = ConfigSpace(3).candidates
    assert all(bz <= CUDA_MAX_BLOCK_DIM[2] and 32 <= bx * by * bz <= 1024 for bx, by, bz in c)
    assert max(b[2] for b in c) == 64
    # count: for 2^k threads, shapes (i, j, z) with i + j + z = k and z <= 6
    expected = sum(1 for k in range(5, 11) for i in range(k + 1) for z in range(min(k - i, 6) + 1))
    assert len(c) == expected


def test_order_is_deterministic() -> None:
    for dim in (1, 2, 3):
        c = list(ConfigSpace(dim).candidates)
        assert c == sorted(c, key=block_order)
        assert c == default_candidates(dim)


def test_bad_space_arguments() -> None:
    with pytest.raises(SpecError, match="dim"):
        ConfigSpace(4)
    with pytest.raises(SpecError, match="below one warp"):
        ConfigSpace(1, max_threads=16)
    with pytest.raises(SpecError, match="beyond dim=1"):
        ConfigSpace(1, add=[(32, 2, 1)])
    with pytest.raises(SpecError, match="not a block shape"):
        ConfigSpace(2, add=["32x8"])
    with pytest.raises(SpecError, match="no candidate blocks left"):
        ConfigSpace(1, candidates=[64], remove=[64])
    with pytest.raises(SpecError, match="differs"):
        ConfigSpace(1, spec=spec2())


# -- user edits ------------------------------------------------------------------------------------


def test_candidates_add_remove() -> None:
    s = ConfigSpace(2, candidates=[(16, 16), (32, 8, 1), 64], add=[(24, 8)], remove=[(64, 1, 1)])
    assert s.candidates == ((24, 8, 1), (32, 8, 1), (16, 16, 1))
    d = ConfigSpace(1, add=[48, (1000,)], remove=[(32, 1, 1)])
    assert (48, 1, 1) in d and (1000, 1, 1) in d and (32, 1, 1) not in d
    assert len(d) == 33
    bx, by, bz = d.arrays()
    assert bx.dtype == np.int64 and len(bx) == 33 and (by == 1).all()


def test_user_constraints() -> None:
    sp = ConfigSpace.for_spec(spec2(), constraints=("bx >= 16", lambda D, b: b[1] <= 16))
    ok, rejected = sp.admissible({"N": 4096})
    assert all(b[0] >= 16 and b[1] <= 16 for b in ok)
    assert len(ok) + len(rejected) == 51
    reasons = dict(rejected)
    assert "'bx >= 16'" in reasons[(8, 4, 1)]
    assert "<lambda>" in reasons[(32, 32, 1)]
    both = reasons[(1, 1024, 1)]
    assert "'bx >= 16'" in both and "<lambda>" in both
    with pytest.raises(SpecError, match="user constraints"):
        ConfigSpace.for_spec(spec2(), constraints=("bx < M",))
    # without a spec, names are bound when D is known
    free = ConfigSpace(1, constraints=("bx <= n",))
    ok, _ = free.admissible({"n": 100})
    assert ok == [(32, 1, 1), (64, 1, 1), (96, 1, 1)]


def test_spec_constraints_depend_on_d() -> None:
    sp = ConfigSpace.for_spec(spec2(constraints=("bx * by <= N * N",)))
    ok, rejected = sp.admissible(8)
    assert all(b[0] * b[1] <= 64 for b in ok) and len(ok) == 6 + 7  # 32 and 64 threads
    assert all("'bx * by <= N * N'" in r for _, r in rejected)
    ok, rejected = sp.admissible({"N": 4096})
    assert len(ok) == 51 and rejected == []
    with pytest.raises(SpecError, match="missing"):
        sp.admissible({"M": 3})


# -- launch feasibility ----------------------------------------------------------------------------


def test_filter_launchable_accepts_the_defaults_of_a_plain_kernel() -> None:
    sp = ConfigSpace.for_spec(spec2())
    ok, rejected = sp.filter_launchable(sp.candidates, {"N": 4096}, PLAIN, H200)
    assert len(ok) == 51 and rejected == []


def test_filter_launchable_reasons() -> None:
    sp = ConfigSpace.for_spec(spec2(), add=[(2048, 1, 1)])
    heavy = dataclasses.replace(PLAIN, num_regs=128, max_threads_per_block=512)
    ok, rejected = sp.filter_launchable(sp.candidates, {"N": 4096}, heavy, H200)
    reasons = dict(rejected)
    assert all(b[0] * b[1] * b[2] <= 512 for b in ok)
    assert "max_threads_per_block 512 (register-limited)" in reasons[(32, 32, 1)]
    assert "128 registers × 1024 threads = 131072 > 65536" in reasons[(32, 32, 1)]
    assert "2048 threads > the device's max 1024" in reasons[(2048, 1, 1)]
    assert "block x = 2048 > the device's max 1024" in reasons[(2048, 1, 1)]
    z = ConfigSpace(3, candidates=[(1, 1, 128), (1, 1, 64)])
    ok, rejected = z.filter_launchable(z.candidates, {}, None, H200)
    assert ok == [(1, 1, 64)]
    assert rejected == [((1, 1, 128), "block z = 128 > the device's max 64")]


def test_filter_launchable_grid_limits() -> None:
    sp = ConfigSpace.for_spec(spec2())
    # N = 2^21: by = 1 or 2 needs more than 65535 blocks along y
    ok, rejected = sp.filter_launchable(sp.candidates, {"N": 2**21}, PLAIN, H200)
    reasons = dict(rejected)
    assert "grid y = 2097152 > the device's max 65535" in reasons[(32, 1, 1)]
    assert "grid y = 1048576" in reasons[(16, 2, 1)]
    assert "grid y = 65536 > the device's max 65535" in reasons[(1, 32, 1)]
    assert (1, 64, 1) in ok and (2, 512, 1) in ok
    assert all(-(-(2**21) // b[1]) <= 65535 for b in ok)


def test_filter_launchable_shared_memory() -> None:
    sp = ConfigSpace.for_spec(spec1())  # dynamic smem = 64 B per thread
    attrs = dataclasses.replace(PLAIN, static_smem=4096, max_dynamic_smem=49152 - 4096)
    ok, rejected = sp.filter_launchable(sp.candidates, 1 << 20, attrs, H200)
    # 4096 + 64·bx <= 48 KiB  ⇔  bx <= 704
    assert ok[-1] == (704, 1, 1)
    reasons = dict(rejected)
    assert "4096 static + 45056 dynamic = 49152 B" not in reasons.get((704, 1, 1), "")
    assert "> 49152 B per block (default limit (kernel did not opt in))" in reasons[(736, 1, 1)]
    # opted in: the function allows 200 KiB of dynamic smem, the device 227 KiB per block
    optin = dataclasses.replace(attrs, max_dynamic_smem=200 * 1024)
    ok, rejected = sp.filter_launchable(sp.candidates, 1 << 20, optin, H200)
    assert len(ok) == 32
    big = ConfigSpace.for_spec(spec1(dynamic_smem="bx * 256"))
    ok, rejected = big.filter_launchable(big.candidates, 1 << 20, optin, H200)
    reasons = dict(rejected)
    # 256·bx <= 200 KiB (the function's limit) ⇔ bx <= 800
    assert ok[-1] == (800, 1, 1)
    assert "the kernel's max_dynamic_smem 204800 B" in reasons[(832, 1, 1)]
    # 4096 + 256·bx > 227 KiB ⇔ bx > 893
    assert "(opt-in maximum)" in reasons[(896, 1, 1)]


def test_filter_launchable_rejects_bad_formula_values() -> None:
    sp = ConfigSpace.for_spec(spec2(grid=("N / bx", "ceil(N / by)", "1")))
    ok, rejected = sp.filter_launchable(sp.candidates, {"N": 96}, PLAIN, H200)
    reasons = dict(rejected)
    assert (32, 1, 1) in ok and (1, 32, 1) in ok
    assert "grid[0] = 'N / bx' gives 1.5, not a positive integer" in reasons[(64, 1, 1)]
    assert "gives 0.09375" in reasons[(1024, 1, 1)]
    neg = ConfigSpace.for_spec(spec1(dynamic_smem="64 * (bx - 100)"))
    ok, rejected = neg.filter_launchable(neg.candidates, 4096, None, H200)
    assert "dynamic_smem '64 * (bx - 100)' gives -4352" in dict(rejected)[(32, 1, 1)]
    assert ok[0] == (128, 1, 1)


def test_filter_launchable_without_attrs_uses_device_limits_only() -> None:
    sp = ConfigSpace.for_spec(spec1(dynamic_smem="bx * 64"))
    ok, rejected = sp.filter_launchable(sp.candidates, 4096, None, H200)
    assert ok[-1] == (768, 1, 1)  # 64·768 = 48 KiB
    assert len(rejected) == 8


# -- dry run ----------------------------------------------------------------------------------------


def test_dry_run_and_format() -> None:
    sp = ConfigSpace.for_spec(spec1(constraints=("bx <= n",)))
    plan = sp.dry_run(None, [64, {"n": 1024}], device=H200)
    assert all(isinstance(p, PlannedPoint) for p in plan)
    assert len(plan) == 2 * 32
    small = [p for p in plan if p.D == {"n": 64}]
    assert [p.block for p in small if p.status == "measure"] == [(32, 1, 1), (64, 1, 1)]
    m = small[1]
    assert m.grid == (1, 1, 1) and m.dynamic_smem == 4096 and m.threads == 64
    rej = small[2]
    assert rej.status == "rejected" and "'bx <= n'" in rej.reason
    big = [p for p in plan if p.D == {"n": 1024}]
    assert sum(p.status == "measure" for p in big) == 24  # smem: 64·bx <= 48 KiB
    text = format_dry_run(plan, title="dry run: test.k1 on NVIDIA H200")
    assert "D: n=64  —  2 to measure, 30 rejected" in text
    assert "D: n=1024  —  24 to measure, 8 rejected" in text
    assert "26 points to measure over 2 sizes; 38 rejected before any launch" in text
    assert "dry run: test.k1" in text and "shared memory" in text
    short = format_dry_run(plan, show_measured=False)
    assert "measure  " not in short.split("\n", 2)[2]


def test_dry_run_without_device_applies_constraints_only() -> None:
    sp = ConfigSpace(2)
    plan = sp.dry_run(spec2(constraints=("by <= 4",)), [(128,)])
    assert len(plan) == 51
    measured = [p for p in plan if p.status == "measure"]
    assert len(measured) == 6 * 3  # by in {1, 2, 4} for each of the 6 thread counts
    assert all(p.grid is not None for p in measured)


def test_kernel_attributes_round_trip() -> None:
    assert KernelAttributes.from_dict(PLAIN.to_dict()) == PLAIN
    with pytest.raises(SpecError, match="num_regs"):
        KernelAttributes.from_dict({"static_smem": 0})
