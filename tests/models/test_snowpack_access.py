"""SNOWPACK's memory access patterns, read from the recorded PTX of the suite kernels."""

from __future__ import annotations

import pytest

from klaraptor.isa import load_recorded
from klaraptor.models.snowpack.access import ACCESS, access_features


@pytest.fixture(scope="module")
def isas():  # noqa: ANN201
    return load_recorded()


def test_row_and_column_walks_are_told_apart(isas) -> None:  # noqa: ANN001
    f = {k: access_features(isas[k]) for k in ("polybench.syrk.syrk", "polybench.gemm.gemm")}
    # SYRK: thread x walks row j of A (A[j*N + k]): strided along x, in the k loop.
    assert f["polybench.syrk.syrk"]["ld_strided_loop"] > 0
    # GEMM: A[i*N + k] is one address per warp row, B[k*N + j] consecutive along x.
    gemm = f["polybench.gemm.gemm"]
    assert gemm["ld_strided"] == 0 and gemm["ld_uniform"] > 0 and gemm["ld_coalesced_loop"] > 0
    assert gemm["st_coalesced"] == 1 and gemm["st_strided"] == 0


def test_a_transposed_pair_mirrors(isas) -> None:  # noqa: ANN001
    # ATAX k1 reads A by rows (one row per thread), k2 by columns.
    k1, k2 = (access_features(isas[f"polybench.atax.k{i}"]) for i in (1, 2))
    assert k1["ld_strided_loop"] > 0 and k1["ld_coalesced_loop"] == 0
    assert k2["ld_coalesced_loop"] > 0 and k2["ld_strided_loop"] == 0


def test_every_suite_kernel_gets_every_feature(isas) -> None:  # noqa: ANN001
    for name, isa in isas.items():
        f = access_features(isa)
        assert set(f) == set(ACCESS) and all(v >= 0 for v in f.values()), name
        # Every load of global memory falls in exactly one class.
        n_loads = sum(1 for r in isa.ptx if r.ins.op == "ld" and r.space in ("global", "generic"))
        assert f["ld_coalesced"] + f["ld_uniform"] + f["ld_strided"] == n_loads, name
