"""Selector: caching, history in batches, refined choices across processes, explain, D checks;
and the launcher's pure part (`data_reader`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor.core.errors import DataSizeError, KlaraptorError, SpecError
from klaraptor.runtime import selector as selector_mod
from klaraptor.runtime.launcher import data_reader
from klaraptor.runtime.selector import Selection, Selector, format_explain
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import KernelRecord, Store
from tests import helpers as hs


@pytest.fixture(scope="module")
def gemm() -> tuple[Any, Any]:
    spec, helper, _, _ = hs.mwp_helper(hs.KERNEL_2D)
    return spec, helper


# -- selection and the cache --------------------------------------------------------------------
def test_select_matches_the_model_and_caches(gemm: tuple[Any, Any]) -> None:
    spec, helper = gemm
    sel = Selector(helper, spec=spec, topk=4)
    s = sel.select(1000)
    assert isinstance(s, Selection) and s.source == "model" and s.D == spec.size(1000)
    assert s.D.values() == (1000,) and s.D == {"N": 1000}
    p = helper.predict(s.D)
    best = int(p.order[0])
    assert s.block == helper.candidates[best]
    assert s.grid == tuple(int(g) for g in p.grid[best])
    assert s.predicted_ms == float(p.ms[best])
    assert s.topk == tuple((helper.candidates[int(i)], float(p.ms[int(i)])) for i in p.order[:4])
    # A cache hit returns the identical object, whatever form D takes.
    assert sel.select(1000) is s
    assert sel.select((1000,)) is s
    assert sel.select({"N": 1000}) is s
    assert sel.select([1000]) is s
    assert sel.select(np.int64(1000)) is s
    assert sel.select((1000.0,)) is s  # an integral float is the same D
    assert sel.select("1000") is s and sel.select("N=1000") is s
    assert sel.select(spec.size(1000)) is s
    assert sel.select(1001) is not s


def test_select_new_d_is_the_same_as_before_the_fast_path(gemm: tuple[Any, Any]) -> None:
    """Over many D, the selection equals what the full `predict` + `rank` path gives."""
    spec, helper = gemm
    sel = Selector(helper, spec=spec, topk=3)
    for n in [1, 2, 31, 32, 33, 100, 777, 1024, 4099, 10007, 46340]:
        s = sel.select(n)
        p = helper.predict(s.D)
        order = [int(i) for i in p.order]
        assert [b for b, _ in s.topk] == [helper.candidates[i] for i in order[:3]]
        assert [ms for _, ms in s.topk] == [float(p.ms[i]) for i in order[:3]]
        assert s.grid == tuple(int(g) for g in p.grid[order[0]])


# -- D checks -----------------------------------------------------------------------------------
def test_bad_d_gives_clear_errors(gemm: tuple[Any, Any]) -> None:
    spec, helper = gemm
    sel = Selector(helper, spec=spec)
    with pytest.raises(DataSizeError, match=r"D=\(1, 2\) has 2 values; expected 1"):
        sel.select((1, 2))
    with pytest.raises(DataSizeError, match=r"missing \['N'\]"):
        sel.select({})
    with pytest.raises(DataSizeError, match=r"unknown \['M'\]"):
        sel.select({"N": 4, "M": 5})
    with pytest.raises(DataSizeError, match=r"'4096x' is not an integer"):
        sel.select("4096x")
    with pytest.raises(DataSizeError, match="'N' must be an integer, got float 3.5"):
        sel.select(3.5)
    with pytest.raises(DataSizeError, match="'N' must be an integer, got float 3.5"):
        sel.select((3.5,))
    with pytest.raises(DataSizeError, match="'N' must be an integer, got str"):
        sel.select(("64",))
    with pytest.raises(DataSizeError, match="'N' must be an integer, got True"):
        sel.select(True)
    with pytest.raises(DataSizeError, match="'N' must be an integer, got float nan"):
        sel.select(math.nan)
    with pytest.raises(DataSizeError, match="'N' must be an integer, got NoneType"):
        sel.select(None)
    # Outside the spec's DataParam range [1, 46340]:
    with pytest.raises(SpecError, match=r"'N' = 46341 is outside its range \[1, 46340\]"):
        sel.select(46341)
    with pytest.raises(SpecError, match="outside its range"):
        sel.select(0)
    # Without a spec, the helper's recorded ranges apply.
    with pytest.raises(DataSizeError, match=r"'N' = 0 is outside its range \[1, 46340\]"):
        Selector(helper).select(0)
    assert sel._hits == {}  # nothing was cached by the failures


def test_no_admissible_candidate_is_a_clear_error() -> None:
    h = hs.gated_helper()
    sel = Selector(h)
    with pytest.raises(KlaraptorError, match=r"no candidate block is admissible for D=N=63"):
        sel.select(63)
    assert sel.select(64).block in h.candidates
    rows = sel.explain(63)
    assert all(r.rank is None and r.excluded for r in rows)


def test_two_data_parameters_in_order() -> None:
    h = hs.mn_helper()
    sel = Selector(h, spec=hs.mn_spec())
    a, b = sel.select({"M": 3000, "N": 20}), sel.select((20, 3000))
    assert a.D.values() == (3000, 20) and b.D.values() == (20, 3000)
    assert sel.select("M=3000,N=20") is a and sel.select("N=20 M=3000") is a
    assert a.grid == (math.ceil(3000 / a.block[0]), math.ceil(20 / a.block[1]), 1)
    assert sel.select({"N": 20, "M": 3000}) is a


# -- explain ------------------------------------------------------------------------------------
def test_explain_ranks_or_excludes_every_candidate() -> None:
    h = hs.tie_helper()
    spec = hs.tie_spec()
    rejected = {(1024, 1, 1): "uses too many registers"}
    sel = Selector(h, spec=spec, rejected=rejected, topk=5)
    D = 40  # bx <= 56: wide blocks fail the constraint
    rows = sel.explain(D)
    assert len(rows) == len(h.candidates) + len(rejected)
    ranked = sorted((r for r in rows if r.rank is not None), key=lambda r: r.rank)
    assert [r.rank for r in ranked] == list(range(len(ranked)))
    for r in rows:
        assert (r.rank is None) != (r.excluded == ""), r
    reasons = [r.excluded for r in rows if r.rank is None]
    assert any(w == "constraint 'bx <= N + 16' is false" for w in reasons)
    non_finite = [w for w in reasons if w.startswith("prediction is not a finite positive number")]
    assert any("nan" in w for w in non_finite) and any("inf" in w for w in non_finite)
    assert any(w == "rejected at build: uses too many registers" for w in reasons)
    # The ranking is the selection's.
    s = sel.select(D)
    assert [r.block for r in ranked[:5]] == [b for b, _ in s.topk]
    assert ranked[0].block == s.block and ranked[0].grid == s.grid
    assert "occupancy" in ranked[0].outputs
    text = format_explain(rows)
    assert "excluded (1024, 1, 1): rejected at build" in text


# -- history ------------------------------------------------------------------------------------
def test_history_is_written_in_batches_and_on_flush(gemm: tuple[Any, Any], tmp_path: Path) -> None:
    spec, helper = gemm
    store = Store(tmp_path / "h.db")
    store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
    sel = Selector(helper, store=store, device_key="dev", spec=spec)

    def recorded() -> int:
        return len(store.history(helper.kernel, "dev", helper.model_name))

    batch = selector_mod.HISTORY_BATCH
    for n in range(1, batch):
        sel.select(n)
    sel.select(1)  # a cache hit queues nothing
    assert recorded() == 0  # nothing written on the per-call path yet
    sel.select(batch)
    assert recorded() == batch  # the batch is written once full
    for n in range(batch + 1, batch + 6):
        sel.select(n)
    assert recorded() == batch
    sel.flush()
    assert recorded() == batch + 5
    rows = store.history(helper.kernel, "dev", helper.model_name)
    last = {r.D: r for r in rows}[spec.size(batch + 5)]
    s = sel.select(batch + 5)
    assert (last.block, last.grid, last.source) == (s.block, s.grid, "model")
    assert last.predicted_ms == s.predicted_ms
    store.close()


def test_refined_choice_is_persisted_and_wins_in_a_new_process(
    gemm: tuple[Any, Any], tmp_path: Path
) -> None:
    spec, helper = gemm
    path = tmp_path / "r.db"
    store = Store(path)
    store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
    sel = Selector(helper, store=store, device_key="dev", spec=spec, topk=4)
    D = (3000,)
    model = sel.select(D)
    other = model.topk[2][0]
    assert other != model.block
    fixed = sel.fix(D, other, measured_ms=0.125)
    assert fixed.source == "refined" and fixed.block == other and sel.select(D) is fixed
    assert fixed.grid == (math.ceil(3000 / other[0]), math.ceil(3000 / other[1]), 1)
    store.close()
    # A new process: a new Store on the same file and a new Selector.
    store2 = Store(path)
    sel2 = Selector(helper, store=store2, device_key="dev", spec=spec)
    again = sel2.select(D)
    assert again.source == "refined" and again.block == other and again.grid == fixed.grid
    assert again.measured_ms == 0.125
    assert sel2.select((3001,)).source == "model"
    # Another device key does not see it.
    assert Selector(helper, store=store2, device_key="other", spec=spec).select(D).source == "model"
    store2.close()


# -- launcher: reading D from the call's arguments ---------------------------------------------
class Shaped:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


def read_k(args: tuple[Any, ...]) -> int:
    return int(args[2]) * 2


def test_data_reader_arg_shape_and_reader() -> None:
    spec = KernelSpec(
        name="test.reader",
        source=hs.MN_SRC,
        kernel="mn",
        data=(
            DataParam("N", arg=1),
            DataParam("M", shape_of=(0, 1)),
            DataParam("K", reader=read_k),
        ),
        dim=2,
        grid=("ceil(N / bx)", "ceil(M * K / by)", "1"),
        make_args=hs.make_mn_args,
    )
    read = data_reader(spec)
    args = (Shaped(3, 17), np.int32(4096), 5)
    # Raw values: the plan key of the per-call path, hashing like the ints they hold.
    assert read(args) == (4096, 17, 10) and hash(read(args)) == hash((4096, 17, 10))
    one = data_reader(hs.empty_spec())
    assert one((None, np.int64(77))) == 77
    D = spec.read_data(args)
    assert D == {"N": 4096, "M": 17, "K": 10} and all(type(v) is int for v in D.values())
