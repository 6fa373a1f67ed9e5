"""metrics.derive on real H200 ncu rows (tests/data, kernels of tests/data/ncu_target.py).

What is exactly derivable from the kernels:
- mv_row (one thread per row i, loop j < n: loads A[i*n + j] and x[j], stores y[i]): every active
  warp executes 2n global loads and 1 store. A[i*n + j] is strided by n across the warp (32
  sectors per request), x[j] is one address (1 sector): 16.5 sectors per load request on
  average; y[i] is contiguous (4 sectors). Warps with no active thread (i >= n) execute none.
- conv2 (2D, 3 loads and 1 store per interior thread, one __syncthreads): 3 loads and 1 store
  per warp with any interior thread.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from klaraptor.collect import ncu
from klaraptor.core import metrics
from klaraptor.core.types import Config, ParamValues
from klaraptor.fit.training import collected
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store

DATA = Path(__file__).parents[1] / "data"
ROWS = ncu.parse_raw_csv((DATA / "ncu_raw_nvtx.csv").read_text())


def derived(i: int, **kw: float) -> dict[str, float]:
    r = ROWS[i]
    return metrics.derive(ncu.raw_values(r), ncu.row_block(r), ncu.row_grid(r), **kw)


def test_expected_warps_matches_the_counter_on_every_row() -> None:
    for r in ROWS:
        assert (
            metrics.expected_warps(ncu.row_block(r), ncu.row_grid(r))
            == r["smsp__warps_launched.sum"]
        )


def test_mv_row_block_32_n_256() -> None:
    d = derived(0)  # n = 256, block 32, grid 8
    assert d["warps"] == 8
    assert d["gld_per_warp"] == 2 * 256
    assert d["gst_per_warp"] == 1
    assert d["gld_sectors_per_req"] == pytest.approx((32 + 1) / 2)
    assert d["gst_sectors_per_req"] == 4
    assert d["inst_per_warp"] == pytest.approx(7768 / 8)
    assert d["shared_per_warp"] == 0
    assert d["dram_bytes"] == 268_544
    assert d["l2_sectors_per_warp"] == pytest.approx((8280 + 32) / 8)
    assert d["achieved_occupancy"] == pytest.approx(0.0156)
    assert d["ncu_duration_ms"] == pytest.approx(16_608e-6)
    assert d["regs_per_thread"] == 30
    assert "time_ms" not in d and "sync_per_warp" not in d


def test_mv_row_other_sizes() -> None:
    d = derived(2)  # n = 768, block 96, grid 8: 24 warps, all active
    assert d["warps"] == 24 and d["gld_per_warp"] == 2 * 768
    d = derived(4)  # n = 256, block 160, grid 2: 10 warps, 8 of them active
    assert d["warps"] == 10
    assert d["gld_per_warp"] == pytest.approx(2 * 256 * 8 / 10)
    assert d["gst_per_warp"] == pytest.approx(8 / 10)


def test_conv2_passes_sync_and_time_through() -> None:
    d = derived(1, sync_per_warp=1, time_ms=0.0123)  # n = 512, block (16, 2), grid (32, 256)
    assert d["warps"] == 32 * 256
    assert d["gld_per_warp"] == 3 and d["gst_per_warp"] == 1
    assert d["sync_per_warp"] == 1.0
    assert d["time_ms"] == 0.0123
    for name in metrics.CANONICAL:
        assert name in d, name


def test_missing_counters_are_left_out_and_warps_fall_back() -> None:
    d = metrics.derive({}, (128, 1, 1), (10, 1, 1))
    assert d == {"warps": 40.0}
    d = metrics.derive(
        {
            "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 0,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 0,
        },
        (32, 1, 1),
        (1, 1, 1),
    )
    assert d["gst_sectors_per_req"] == 0.0  # no stores at all: 0, not NaN
    assert not any(isinstance(v, float) and math.isnan(v) for v in d.values())


def make_args(D, rng):  # noqa: ANN001, ANN201 - a spec needs a top-level factory
    return ()


def test_collected_joins_time_and_counters(tmp_path: Path) -> None:
    spec = KernelSpec(
        name="test.conv2",
        source='extern "C" __global__ void conv2(const float* A, float* B, int n) {}',
        kernel="conv2",
        data=(DataParam("n", arg=2),),
        dim=2,
        grid=("ceil(n / bx)", "ceil(n / by)", "1"),
        make_args=make_args,
    )
    dev = "H200|test"
    r = ROWS[1]
    with Store(tmp_path / "s.sqlite") as store:
        store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
        store.put_collect_facts(spec.name, dev, CollectFacts(sync_per_warp=1.0))
        n512 = spec.size(512)
        store.put_measurements(
            [
                Measurement(
                    spec.name,
                    dev,
                    n512,
                    (16, 2, 1),
                    "time",
                    "ok",
                    {"median_ms": 0.01, "grid": [32, 256, 1]},
                ),
                Measurement(spec.name, dev, n512, (32, 1, 1), "time", "ok", {"median_ms": 0.02}),
                Measurement(
                    spec.name,
                    dev,
                    n512,
                    (16, 2, 1),
                    "ncu",
                    "ok",
                    {**ncu.raw_values(r), "grid": [32, 256, 1]},
                ),
                Measurement(spec.name, dev, n512, (8, 4, 1), "time", "failed", {}, "crash"),
            ]
        )
        got = collected(store, spec, dev)
    n512 = spec.size(512)
    c16, c32 = Config(ParamValues.NONE, (16, 2, 1)), Config(ParamValues.NONE, (32, 1, 1))
    assert set(got) == {(n512, c16), (n512, c32)}
    full = got[(n512, c16)]
    assert full["time_ms"] == 0.01 and full["sync_per_warp"] == 1 and full["gld_per_warp"] == 3
    assert got[(n512, c32)] == {"time_ms": 0.02, "warps": 16 * 512.0}


# ---------------------------------------------------------------------------------------------
# sync_per_warp: a static count of barriers in the kernel's PTX

PTX = """\
.version 8.8
.target sm_90
.address_size 64

.extern .func  (.param .b32 func_retval0) vprintf
(
\t.param .b64 vprintf_param_0,
\t.param .b64 vprintf_param_1
)
;
.func  (.param .b32 func_retval0) helper(
\t.param .b32 helper_param_0
)
{
\t.reg .b32 \t%r<3>;
\tbar.sync \t0;
\tret;
}

\t// .globl\tconv2
.visible .entry conv2(
\t.param .u64 conv2_param_0,
\t.param .u32 conv2_param_2
)
.maxntid 256, 1, 1
{
\t.reg .pred \t%p<6>;
\t@%p1 bra \t$L__BB0_2;
\tst.shared.f32 \t[_ZZ5conv2E1t], %r1;
$L__BB0_2:
\tbarrier.sync.aligned \t0;
\tbar.warp.sync \t-1;
\t@!%p2 bar.red.popc.u32 %r5, 0, %p3;
\t{ // callseq 0, 0
\tcall.uni (retval0), helper, (param0);
\t} // callseq 0
\tret;
}

.visible .entry other()
{
\tbar.sync 0;
\tbar.cta.sync 1;
\tbar.arrive 2, 64;
\tret;
}
"""


def test_count_barriers_in_ptx() -> None:
    from klaraptor.backends.cupy_backend import count_barriers
    from klaraptor.core.errors import CollectError

    # barrier.sync + bar.red in conv2, bar.sync in the helper it calls; not bar.warp.sync.
    assert count_barriers(PTX, "conv2") == 3
    assert count_barriers(PTX, "other") == 2  # bar.arrive does not wait
    with pytest.raises(CollectError, match="no function 'missing'"):
        count_barriers(PTX, "missing")
