"""Occupancy: hand-computed cases from cuda_occupancy.h's logic for every CC, the rational program
against the NumPy function, and the recorded H200 cudaOccupancyMaxActiveBlocksPerMultiprocessor
fixture."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor.device.occupancy import (
    ARCHS,
    HW_INPUTS,
    active_blocks_per_sm,
    arch_params,
    hw_values,
    occupancy_limits,
    occupancy_program,
)

KB = 1024

# (cc, threads, regs, smem, expected active blocks), each worked out by hand from the header:
# warps = ceil(t/32); regs/warp = ceil(32 r / 256) * 256; warps per SM by registers =
# floor(16384 / regs_per_warp) * 4; smem allocation = ceil((smem + reserved) / unit) * unit.
HAND_CASES = [
    # 9.0: 8 warps; 64/8 = 8 by warps; 1024 regs/warp -> 16*4 = 64 warps -> 8; smem 228 -> 8.
    ((9, 0), 256, 32, 0, 8),
    # 9.0: 88 regs -> 2816/warp -> floor(16384/2816) = 5 -> 20 warps -> 5 blocks of 4 warps.
    ((9, 0), 128, 88, 0, 5),
    # 9.0: 65 regs -> 2304/warp * 32 warps = 73728 > 65536 registers per block: cannot launch.
    ((9, 0), 1024, 65, 0, 0),
    # 9.0: 64 regs -> 2048/warp -> 8 warps per sub-partition -> 32 warps: one 32-warp block.
    ((9, 0), 1024, 64, 0, 1),
    # 9.0: 48 KB + 1 KB reserved = 50176 -> floor(233472 / 50176) = 4.
    ((9, 0), 32, 16, 48 * KB, 4),
    # 9.0: 227 KB is the opt-in maximum (one block); one byte more cannot launch.
    ((9, 0), 32, 16, 227 * KB, 1),
    ((9, 0), 32, 16, 227 * KB + 1, 0),
    # 9.0: 255 regs -> 8192/warp -> 2 warps per sub-partition -> 8 blocks of one warp.
    ((9, 0), 32, 255, 0, 8),
    ((9, 0), 32, 257, 0, 0),
    ((9, 0), 1025, 16, 0, 0),
    ((9, 0), 32, 0, 0, 32),
    # 8.0: warps 8; regs 64 -> 2048/warp -> 8*4 = 32 warps -> 4; smem 20000+1024 -> 21120 -> 7.
    ((8, 0), 256, 64, 20000, 4),
    ((8, 0), 32, 16, 100 * KB, 1),
    # 8.0: 164 KB per SM / (40 KB + 1 KB) = 4.
    ((8, 0), 64, 16, 40 * KB, 4),
    # 8.6: 48 warps per SM, a 32-warp block -> 1.
    ((8, 6), 1024, 32, 0, 1),
    # 8.6: 2 warps -> 24 by warps; 512 regs/warp -> 128 warps -> 64; 16 blocks per SM.
    ((8, 6), 64, 16, 0, 16),
    ((8, 6), 64, 16, 99 * KB + 1, 0),
    # 8.9: same block, 24 blocks per SM.
    ((8, 9), 64, 16, 0, 24),
    # 8.9: 100 KB per SM / (24 KB + 1 KB) = 4.
    ((8, 9), 64, 16, 24 * KB, 4),
    # 7.5: 32 warps per SM -> 16 by warps, 16 blocks per SM.
    ((7, 5), 64, 16, 0, 16),
    # 7.5: 3 warps -> floor(32 / 3) = 10.
    ((7, 5), 96, 16, 0, 10),
    # 7.5: 64 KB per SM, no reserve, 256-B unit: 10000 -> 10240 -> 6.
    ((7, 5), 32, 16, 10000, 6),
    # 7.0: smem 0 gives no shared-memory limit; 32 blocks per SM.
    ((7, 0), 32, 8, 0, 32),
    # 7.0: 96 KB / 24 KB = 4; no per-block reserve before Ampere.
    ((7, 0), 32, 8, 24 * KB, 4),
    # 7.0: 1 warp with 128 regs -> 4096 -> 4 warps per sub-partition -> 16 blocks.
    ((7, 0), 32, 128, 0, 16),
]


@pytest.mark.parametrize(("cc", "threads", "regs", "smem", "expected"), HAND_CASES)
def test_hand_computed_cases(
    cc: tuple[int, int], threads: int, regs: int, smem: int, expected: int
) -> None:
    assert int(active_blocks_per_sm(threads, regs, smem, cc)) == expected
    prog = occupancy_program(cc)
    out = prog.evaluate(threads=threads, regs=regs, smem=smem)
    assert float(out["active_blocks"]) == expected
    warps = -(-threads // 32)
    assert float(out["occupancy"]) == expected * warps / arch_params(cc).max_warps_per_sm


def test_worked_example_block_is_register_limited_to_five() -> None:
    lim = occupancy_limits(128, 88, 0, "9.0")
    assert int(lim["regs"]) == 5 and int(lim["warps"]) == 16 and int(lim["blocks"]) == 32


def test_carveout_preference_follows_the_header() -> None:
    # 9.0, 20 KB + 1 KB per block: preference 64 KB -> 3 blocks; a preference of 50 KB is aligned
    # up to 64 KB; a block larger than the preference gets the next size that fits (32 KB -> 1).
    assert int(active_blocks_per_sm(32, 16, 20 * KB, (9, 0), smem_per_sm=64 * KB)) == 3
    assert int(active_blocks_per_sm(32, 16, 20 * KB, (9, 0), smem_per_sm=50 * KB)) == 3
    assert int(active_blocks_per_sm(32, 16, 20 * KB, (9, 0), smem_per_sm=16 * KB)) == 1
    # Carveout 0 with a tiny block: AlignUp(1152 B) = 8 KB holds 7 blocks.
    assert int(active_blocks_per_sm(32, 16, 100, (9, 0), smem_per_sm=0)) == 7
    # A function whose dynamic-smem attribute stays at its default is limited to 48 KB.
    assert int(active_blocks_per_sm(32, 16, 60 * KB, (9, 0), smem_per_block=48 * KB)) == 0
    with pytest.raises(KlaraptorError, match="exceeds"):
        active_blocks_per_sm(32, 16, 0, (9, 0), smem_per_sm=300 * KB)


def test_vectorised_and_input_errors() -> None:
    threads = np.array([32, 64, 128, 256, 512, 1024])
    out = active_blocks_per_sm(threads, 32, 0, (9, 0))
    assert out.tolist() == [32, 32, 16, 8, 4, 2]
    assert active_blocks_per_sm(threads[:, None], np.array([16, 128]), 0, (9, 0)).shape == (6, 2)
    with pytest.raises(KlaraptorError, match="non-negative integers"):
        active_blocks_per_sm(32.5, 16, 0, (9, 0))
    with pytest.raises(KlaraptorError, match="unsupported compute capability"):
        arch_params((6, 1))
    assert arch_params("8.6") is arch_params(8.6) is ARCHS[(8, 6)]


@pytest.mark.parametrize("cc", sorted(ARCHS))
def test_program_matches_numpy_on_a_grid(cc: tuple[int, int]) -> None:
    threads = np.array([1, 31, 32, 33, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024, 1025])
    regs = np.array([0, 1, 16, 24, 32, 40, 48, 64, 72, 88, 96, 128, 168, 200, 255, 256, 257])
    smem = np.array(
        [
            0,
            1,
            1000,
            4096,
            9000,
            20000,
            48 * KB,
            70000,
            99 * KB,
            120000,
            163 * KB,
            227 * KB,
            228 * KB,
        ]
    )
    t, r, s = (a.ravel() for a in np.meshgrid(threads, regs, smem, indexing="ij"))
    want = active_blocks_per_sm(t, r, s, cc)
    arch = arch_params(cc)
    generic = occupancy_program()
    assert set(HW_INPUTS) <= set(generic.inputs)
    got_generic = generic.evaluate(threads=t, regs=r, smem=s, **arch.hw_inputs())
    got_bound = occupancy_program(cc).evaluate(threads=t, regs=r, smem=s)
    np.testing.assert_array_equal(got_generic["active_blocks"], want)
    np.testing.assert_array_equal(got_bound["active_blocks"], want)
    np.testing.assert_array_equal(got_bound["active_warps"], want * -(-t // 32))
    # The specialised fast path agrees as well.
    fn = generic.specialize({"threads": t, "regs": r, **arch.hw_inputs()})
    for smem_bytes in (0.0, 20000.0, 300000.0):
        np.testing.assert_array_equal(
            fn(smem=smem_bytes)["active_blocks"], active_blocks_per_sm(t, r, int(smem_bytes), cc)
        )


def test_hw_values_overrides() -> None:
    values = hw_values((9, 0), {"hw_smem_per_sm": 100 * KB})
    assert values["hw_smem_per_sm"] == 100 * KB and values["hw_max_threads_per_sm"] == 2048
    with pytest.raises(KlaraptorError, match="unknown"):
        hw_values((9, 0), {"hw_bogus": 1})


# Test-only data (issue 31): in tests/data, not in the wheel.
H200_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "occupancy_h200.json"


def load_h200_fixture() -> dict:
    return json.loads(H200_FIXTURE.read_text())


def test_occupancy_matches_h200_fixture() -> None:
    data = load_h200_fixture()
    cc = tuple(data["cc"])
    cases = data["cases"]
    assert cases
    t = np.array([c["threads"] for c in cases])
    r = np.array([c["regs"] for c in cases])
    s = np.array([c["smem_static"] + c["smem_dynamic"] for c in cases])
    want = np.array([c["active_blocks"] for c in cases])
    got = active_blocks_per_sm(t, r, s, cc)
    bad = [(c, int(g)) for c, g in zip(cases, got) if g != c["active_blocks"]]
    assert not bad, f"{len(bad)} of {len(cases)} cases differ, e.g. {bad[:5]}"
    prog = occupancy_program(cc)
    np.testing.assert_array_equal(prog.evaluate(threads=t, regs=r, smem=s)["active_blocks"], want)


def test_fixture_covers_every_limit() -> None:
    data = load_h200_fixture()
    cases = data["cases"]
    lim = occupancy_limits(
        [c["threads"] for c in cases],
        [c["regs"] for c in cases],
        [c["smem_static"] + c["smem_dynamic"] for c in cases],
        tuple(data["cc"]),
    )
    active = np.minimum.reduce(list(lim.values()))
    for name, values in lim.items():
        assert np.any((values == active) & (active > 0)), f"no fixture case is limited by {name}"
    assert np.any(active == 0)
    assert len({(c["threads"], c["regs"]) for c in cases}) > 50
    assert all(
        k >= 0 for k in itertools.chain.from_iterable((c["threads"], c["regs"]) for c in cases)
    )
