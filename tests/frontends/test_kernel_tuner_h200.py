"""Acceptance: files written by real Kernel Tuner runs on the H200 (tests/data/kernel_tuner/).

scripts/device_kernel_tuner.py wrote them (see PROVENANCE.json there): the README's 1D `scale`
kernel over block_size_x at several n, PolyBench 2DCONV over power-of-two 2D blocks at several N
(with RegisterObserver), a 2DCONV cache of a run killed part-way, the T4 results of every run,
the T4 metadata and the dumped (results, env) pair of the first scale run. Skipped until the
files are there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.device.profile import recorded_profile
from klaraptor.frontends.kernel_tuner import export_t4, import_kernel_tuner
from klaraptor.store import Store
from klaraptor.suite.recorded import load_recorded
from tests.frontends.test_kernel_tuner import SCALE

DATA = Path(__file__).parents[1] / "data" / "kernel_tuner"
META = DATA / "h200-metadata.json"
CONV = "polybench.conv2d.conv2d"
pytestmark = pytest.mark.skipif(
    not list(DATA.glob("*.cache.json")),
    reason="no Kernel Tuner files from the H200 in tests/data/kernel_tuner/ yet "
    "(the lead runs scripts/device_kernel_tuner.py on the device)",
)


def runs(prefix: str) -> list[tuple[int, Path]]:
    """(size, cache) of the complete runs of one kernel, by size."""
    out = []
    for p in DATA.glob(f"{prefix}*.cache.json"):
        m = re.fullmatch(rf"{prefix}(\d+)\.cache\.json", p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def spec_of(prefix: str):
    return SCALE if prefix == "scale_n" else suite.get(CONV)


@pytest.fixture(scope="module")
def h200():
    return recorded_profile("h200")


def timing(store: Store, spec, key: str) -> dict:
    return {
        (m.D, m.block): (m.status, m.value.get("median_ms"), m.value.get("samples_ms"))
        for m in store.measurements(spec.name, key, kind="time")
    }


@pytest.mark.parametrize("prefix", ["scale_n", "conv2d_N"])
def test_kernel_tuner_h200_cache_and_t4_agree(tmp_path: Path, h200, prefix: str) -> None:
    """The cache and the T4 file of each run import to the same measurements."""
    spec = spec_of(prefix)
    assert runs(prefix), f"no {prefix}* caches"
    for size, cache in runs(prefix):
        a, b = Store(tmp_path / f"a{size}.sqlite"), Store(tmp_path / f"b{size}.sqlite")
        ra = import_kernel_tuner(cache, spec, store=a, device=h200)
        t4 = cache.with_name(cache.name.replace(".cache.json", "-results.json"))
        name = spec.data_names[0]
        rb = import_kernel_tuner(
            t4, spec, store=b, device=h200, metadata=META, mapping={name: size}
        )
        n_records = len(json.loads(cache.read_text())["cache"])
        assert sum(ra.counts.values()) == n_records and ra.counts["ok"] > 0
        assert [D.values() for D in ra.sizes] == [(size,)] and not ra.interrupted
        assert rb.counts == ra.counts
        assert timing(a, spec, h200.key) == timing(b, spec, h200.key)
        assert list(ra.uncovered.values()) == [[]], ra.summary()  # the candidate set, all timed


def _slowdown(store: Store, spec, key: str, sizes: list[int]) -> float:
    """Build time_fit on all sizes but the largest; r = t(choice) / t(best) there."""
    k = build(spec, sizes[:-1], model="time_fit", store=store, device=recorded_profile("h200"),
              collect_data=False, progress=False)  # fmt: skip
    held = spec.size(sizes[-1])
    t = {m.block: m.value["median_ms"] for m in store.measurements(spec.name, key, "time", "ok")
         if m.D == held}  # fmt: skip
    return t[k.select(sizes[-1]).block] / min(t.values())


def test_kernel_tuner_h200_scale_build(tmp_path: Path, h200) -> None:
    """Tuned once with Kernel Tuner, then klaraptor's per-call model without re-measuring."""
    store = Store(tmp_path / "s.sqlite")
    for _, cache in runs("scale_n"):
        r = import_kernel_tuner(cache, SCALE, store=store, device=h200)
        assert "num_regs" in r.attributes_missing  # this run had no RegisterObserver
    sizes = [n for n, _ in runs("scale_n")]
    assert len(sizes) >= 3
    r = _slowdown(store, SCALE, h200.key, sizes)
    print(f"scale: trained on {sizes[:-1]}, at n={sizes[-1]} t(choice)/t(best) = {r:.3f}")
    assert 1.0 <= r < 1.5  # a sanity bound on the model, not a performance claim
    k = build(SCALE, sizes, model="time_fit", store=store, device=h200, collect_data=False,
              progress=False)  # fmt: skip
    sel = k.select(4 * sizes[-1])
    assert sel.block in k.helper.candidates and np.isfinite(sel.predicted_ms)


def test_kernel_tuner_h200_conv2d(tmp_path: Path, h200) -> None:
    """2D blocks, registers from RegisterObserver, and Kernel Tuner's times against klaraptor's
    own H200 times of the same kernel (same units, same kernel: ratios near 1)."""
    spec = suite.get(CONV)
    store = Store(tmp_path / "s.sqlite")
    for _, cache in runs("conv2d_N"):
        r = import_kernel_tuner(cache, spec, store=store, device=h200)
        assert "num_regs" not in r.attributes_missing
    regs = store.collect_facts(CONV, h200.key).attributes.num_regs
    assert 0 < regs <= 255
    sizes = [n for n, _ in runs("conv2d_N")]
    print(f"conv2d: num_regs {regs}; t(choice)/t(best) at N={sizes[-1]}: "
          f"{_slowdown(store, spec, h200.key, sizes):.3f}")  # fmt: skip
    recorded = load_recorded().kernels[CONV].times()
    ratios = [
        m.value["median_ms"] / recorded[(m.D, m.block)][0]
        for m in store.measurements(CONV, h200.key, "time", "ok")
        if (m.D, m.block) in recorded
    ]
    assert ratios, "no size in common with the recorded dataset"
    print(f"Kernel Tuner / klaraptor median time: median ratio {np.median(ratios):.3f} "
          f"over {len(ratios)} points")  # fmt: skip
    assert 0.5 < float(np.median(ratios)) < 2.0


def test_kernel_tuner_h200_interrupted(tmp_path: Path, h200) -> None:
    cache = DATA / "conv2d_interrupted.cache.json"
    text = cache.read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # really unterminated
    r = import_kernel_tuner(cache, suite.get(CONV), store=Store(tmp_path / "s.sqlite"), device=h200)
    complete = text[text.index('"cache": {') :].count('},\n"') + text.rstrip().endswith(",")
    assert r.interrupted and r.counts["ok"] >= 1
    assert sum(r.counts.values()) in (complete, complete + 1), r.summary()


def test_kernel_tuner_h200_results_env(tmp_path: Path, h200) -> None:
    """The dumped (results, env) pair of a run imports to the cache's measurements."""
    (pair,) = list(DATA.glob("scale_n*.results_env.json"))
    n = int(re.search(r"scale_n(\d+)", pair.name).group(1))
    a, b = Store(tmp_path / "a.sqlite"), Store(tmp_path / "b.sqlite")
    import_kernel_tuner(DATA / f"scale_n{n}.cache.json", SCALE, store=a, device=h200)
    import_kernel_tuner(pair, SCALE, store=b, device=h200, mapping={"n": n})
    ok = {k: v for k, v in timing(a, SCALE, h200.key).items() if v[0] == "ok"}
    assert ok == {k: v for k, v in timing(b, SCALE, h200.key).items() if v[0] == "ok"}


def test_kernel_tuner_h200_export_valid_t4(tmp_path: Path, h200) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    fu = pytest.importorskip("kernel_tuner.file_utils", reason="kernel_tuner is not installed")
    spec = suite.get(CONV)
    store = Store(tmp_path / "s.sqlite")
    for _, cache in runs("conv2d_N"):
        import_kernel_tuner(cache, spec, store=store, device=h200)
    out, meta = export_t4(store, spec, h200.key, tmp_path / "conv2d-results.json")
    jsonschema.validate(json.loads(out.read_text()), fu.output_file_schema("results")[1])
    jsonschema.validate(json.loads(meta.read_text()), fu.output_file_schema("metadata")[1])
    # Kernel Tuner's own T4 files from the device validate as well.
    for t4 in DATA.glob("*-results.json"):
        jsonschema.validate(json.loads(t4.read_text()), fu.output_file_schema("results")[1])
