"""The static coalescing analysis and the L1's cost per request (`l1_wavefronts`), against the
recorded SASS of the suite and the H200's measured cost of strided loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klaraptor.models.saake import coalescing
from klaraptor.models.saake.isa_source import recorded_isa

ROOT = Path(__file__).resolve().parents[2]
L1_SLOTS = ROOT / "benchmarks" / "results" / "h200" / "resources" / "l1_slots.json"


def _sectors(stride_floats: int) -> set[int]:
    return {lane * stride_floats * 4 // 32 for lane in range(32)}


@pytest.mark.parametrize(
    ("stride", "want"),
    [(1, 1), (2, 2), (8, 8), (32, 32), (33, 8), (34, 8), (40, 8), (48, 16), (64, 32), (1025, 8)],
)
def test_a_request_costs_its_busiest_sector_slot(stride: int, want: int) -> None:
    assert coalescing.l1_wavefronts(_sectors(stride)) == want


def test_the_rule_predicts_the_measured_l1_cost_of_strided_loads() -> None:
    rows = json.loads(L1_SLOTS.read_text())["rows"]
    assert len(rows) >= 15
    for r in rows:
        w = coalescing.l1_wavefronts(_sectors(r["stride_floats"]))
        assert w == r["wavefronts_rule"]
        # One cycle a wavefront, plus at most two cycles of the request's own overhead; the
        # old rule (a cycle per line) is off by up to 4x for the strides that spread slots.
        assert w <= r["cycles_per_request"] <= w + 2.0, r
    spread = [r for r in rows if r["lines"] == 32 and r["wavefronts_rule"] == 8]
    assert spread and all(r["cycles_per_request"] < 32 / 3 for r in spread)


def test_strided_columns_spread_over_slots_row_walks_do_not() -> None:
    # kmeans.swap reads point p's features at p x 34 floats: 32 lines a request, 8 per slot.
    swap = coalescing.warp_access(recorded_isa("rodinia.kmeans.swap"), (64, 1, 1))
    assert coalescing.Access(32, 32, 8) in swap.values()
    # atax.k1 walks one row of N floats per thread: every line at the same offset.
    atax = coalescing.warp_access(recorded_isa("polybench.atax.k1"), (256, 1, 1))
    assert coalescing.Access(32, 32, 32) in atax.values()
    assert coalescing.Access(1, 1, 1) in atax.values()  # x[j]: the same word for every lane


@pytest.mark.parametrize(
    ("stride_words", "lanes", "want"),
    [(1, 32, 1), (2, 32, 2), (17, 32, 1), (16, 32, 16), (32, 32, 32), (0, 32, 1), (16, 16, 8)],
)
def test_a_shared_request_costs_its_busiest_bank(stride_words: int, lanes: int, want: int) -> None:
    # Lanes reading the same word share it (stride 0: a broadcast).
    assert coalescing.bank_wavefronts(k * stride_words for k in range(lanes)) == want


def test_shared_bank_conflicts_of_the_suite() -> None:
    # LUD internal reads its L panel at ty x 16 + m: a warp of 8-wide rows holds 4 of them,
    # 2 per bank; 4-wide rows 8 of them, 4 per bank. 32-wide rows: one row, a broadcast.
    def worst(kernel: str, block: tuple[int, int, int]) -> int:
        isa = recorded_isa(kernel)
        acc = coalescing.warp_access(isa, block)
        return max(
            a.wavefronts
            for i, a in acc.items()
            if a is not None and isa.instructions[i].opcode in coalescing.SHARED_OPCODES
        )

    assert worst("rodinia.lud.internal", (32, 32, 1)) == 1
    assert worst("rodinia.lud.internal", (8, 8, 1)) == 2
    assert worst("rodinia.lud.internal", (4, 64, 1)) == 4
    # NW walks a tile's anti-diagonal at (d - c) x 17 + c = 17 d - 16 c: 16 lanes of a tile
    # fall in two banks (the analysis does not see that lanes past 16 skip the loop).
    assert worst("rodinia.nw.diagonal", (16, 16, 1)) == 8
    # Pathfinder's row buffers are read at consecutive words.
    assert worst("rodinia.pathfinder.dynproc", (256, 1, 1)) == 1


def test_the_emulator_charges_a_shared_access_its_bank_conflicts() -> None:
    import numpy as np

    from klaraptor.models.saake import ops

    lat = np.full(len(ops.RESOURCES), 10.0)
    shared = [ops.StaticOp(ops.SHARED, -1)]
    mem = ops.MemoryParams()
    _, conflicted = ops.op_costs(shared, lat, mem, {0: (16, 0, 8)})
    _, unknown = ops.op_costs(shared, lat, mem, None)
    assert conflicted[0, ops.R["smem"]] == 8 and unknown[0, ops.R["smem"]] == 1
