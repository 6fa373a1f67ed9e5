"""Kernel Tuner interop: import of caches / T4 / results lists, export to T4, round trips.

Parser tests run on tests/data/kernel_tuner_synthetic/ (SYNTHETIC times, real formats: written by
Kernel Tuner in simulation mode, see make_synthetic.py there) and on small variants written in
tmp_path. Round trips and builds use the real recorded H200 dataset. The acceptance tests on
files from real Kernel Tuner runs on the H200 are in test_kernel_tuner_h200.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.core.errors import KlaraptorError
from klaraptor.device.profile import recorded_profile
from klaraptor.frontends.kernel_tuner import (
    KernelTunerFileError,
    KernelTunerImportError,
    export_t4,
    import_kernel_tuner,
)
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import Measurement, Store
from klaraptor.suite.recorded import load_recorded

SYN = Path(__file__).parents[1] / "data" / "kernel_tuner_synthetic"
N = 1 << 20
SCALE_SRC = r"""extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}"""


def scale_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    import cupy as cp

    n = D["n"]
    return cp.asarray(rng.random(n, dtype=np.float32)), cp.empty(n, cp.float32), np.int32(n)


SCALE = KernelSpec(
    name="my.scale",
    source=SCALE_SRC,
    kernel="scale",
    data=(DataParam("n", arg=2),),
    dim=1,
    grid=("ceil(n / bx)", "1", "1"),
    make_args=scale_args,
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "s.sqlite")


@pytest.fixture(scope="module")
def h200():
    return recorded_profile("h200")


def write_cache(path: Path, header: dict[str, Any], records: dict[str, dict], closed=True) -> Path:
    """A cache laid out as Kernel Tuner writes it (header, one record per line, closing)."""
    head = json.dumps({**header, "cache": {}}, indent="")[:-3]
    body = "".join("\n" + json.dumps({k: v})[1:-1] + "," for k, v in records.items())
    text = head + body
    path.write_text(text[:-1] + "}\n}" if closed and records else text)
    return path


def scale_header(**kw: Any) -> dict[str, Any]:
    h = {
        "device_name": "NVIDIA H200",
        "kernel_name": "scale",
        "problem_size": N,
        "tune_params_keys": ["block_size_x"],
        "tune_params": {"block_size_x": [32, 64]},
        "objective": ["time"],
    }
    return {**h, **kw}


def rec(**kw: Any) -> dict[str, Any]:
    return {"time": 0.01, "times": [0.01, 0.011, 0.009], "compile_time": 1.0, **kw}


def rows(store: Store, spec: KernelSpec, key: str) -> dict[tuple, Measurement]:
    return {(m.D.values(), m.block): m for m in store.measurements(spec.name, key, kind="time")}


# ---------------------------------------------------------------------------------------------
# The three formats


def test_kernel_tuner_cache_import(store: Store, h200) -> None:
    r = import_kernel_tuner(SYN / "scale_cache.json", SCALE, store=store, device=h200)
    assert (r.format, r.counts) == ("cache", {"ok": 31, "failed": 1, "rejected": 0})
    assert [D.values() for D in r.sizes] == [(N,)] and r.new == 32 and r.replaced == 0
    assert r.uncovered == {SCALE.size(N): [(1024, 1, 1)]} and r.outside == []
    assert "num_regs" in r.attributes_missing and not r.interrupted
    cache = json.loads((SYN / "scale_cache.json").read_text())["cache"]
    got = rows(store, SCALE, h200.key)
    for key, record in cache.items():
        m = got[((N,), (int(key), 1, 1))]
        assert m.device == h200.key
        if "__error__" in record:
            assert m.status == "failed" and "RuntimeFailedConfig" in m.reason
            continue
        t = np.asarray(record["times"])
        q1, med, q3 = np.percentile(t, [25, 50, 75])
        assert m.value["median_ms"] == pytest.approx(med) and m.value["q1_ms"] == pytest.approx(q1)
        assert m.value["spread"] == pytest.approx((q3 - q1) / med)
        assert m.value["samples_ms"] == record["times"]
        assert m.value["kt_time_ms"] == pytest.approx(record["time"])
        assert m.created == pytest.approx(1796032800.0)  # "2026-11-30 10:00:00+00:00"
    facts = store.collect_facts("my.scale", h200.key)
    assert facts.attributes.num_regs == 0 and "num_regs" in facts.attributes_assumed


def test_kernel_tuner_formats_agree(tmp_path: Path, h200) -> None:
    """The cache, the dumped (results, env) pair and the T4 file of one run give the same rows."""
    got = []
    for i, (name, kw) in enumerate(
        [
            ("scale_cache.json", {}),
            ("scale_results_env.json", {"mapping": {"n": N}}),
            ("scale-results.json", {"mapping": {"n": N}, "device_name": "NVIDIA H200"}),
        ]
    ):
        s = Store(tmp_path / f"{i}.sqlite")
        r = import_kernel_tuner(SYN / name, SCALE, store=s, device=h200, **kw)
        assert r.counts == {"ok": 31, "failed": 1, "rejected": 0}, name
        got.append(
            {
                k: (m.status, m.value.get("median_ms"), m.value.get("samples_ms"))
                for k, m in rows(s, SCALE, h200.key).items()
            }
        )
    assert got[0] == got[1] == got[2]


def test_kernel_tuner_interrupted_cache(tmp_path: Path, store: Store, h200) -> None:
    r = import_kernel_tuner(SYN / "scale_cache_interrupted.json", SCALE, store=store, device=h200)
    assert r.interrupted and r.dropped_partial and r.counts["ok"] == 10
    # Stopped between two records: nothing dropped.
    recs = {str(b): rec(block_size_x=b) for b in (32, 64, 96)}
    p = write_cache(tmp_path / "open.json", scale_header(), recs, closed=False)
    r = import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert r.interrupted and not r.dropped_partial and r.counts["ok"] == 3
    # Killed before the first record: a header alone.
    p = write_cache(tmp_path / "empty.json", scale_header(), {}, closed=False)
    with pytest.raises(KernelTunerFileError, match="no configuration to import"):
        import_kernel_tuner(p, SCALE, store=store, device=h200)


def test_kernel_tuner_upsert(store: Store, h200) -> None:
    import_kernel_tuner(SYN / "scale_cache.json", SCALE, store=store, device=h200)
    r = import_kernel_tuner(SYN / "scale_results_env.json", SCALE, store=store, device=h200,
                            mapping={"n": N})  # fmt: skip
    assert (r.new, r.replaced) == (0, 32)
    assert store.count_measurements("my.scale") == 32
    imports = store.collect_facts("my.scale", h200.key).imports
    assert len(imports) == 2 and all(i["tool"] == "kernel_tuner" for i in imports)


def test_kernel_tuner_error_kinds(tmp_path: Path, store: Store, h200) -> None:
    recs = {
        "32": rec(block_size_x=32),
        "64": {"block_size_x": 64, "time": "InvalidConfig"},  # before Kernel Tuner 1.0
        "96": {"block_size_x": 96, "__error__": "CompilationFailedConfig"},
        "128": {"block_size_x": 128, "__error__": "InvalidConfig"},
        "160": {"block_size_x": 160, "time": 0.02},  # no samples: the mean stands in
    }
    p = write_cache(tmp_path / "c.json", scale_header(), recs)
    r = import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert r.counts == {"ok": 2, "failed": 1, "rejected": 2}
    got = rows(store, SCALE, h200.key)
    assert got[((N,), (64, 1, 1))].status == "rejected"
    assert "InvalidConfig" in got[((N,), (128, 1, 1))].reason
    assert "CompilationFailedConfig" in got[((N,), (96, 1, 1))].reason
    v = got[((N,), (160, 1, 1))].value
    assert v["median_ms"] == v["q1_ms"] == v["q3_ms"] == 0.02 and math.isnan(v["spread"])


# ---------------------------------------------------------------------------------------------
# Mapping, fixed tunables, registers


def test_kernel_tuner_mapping_and_fixed(tmp_path: Path, store: Store, h200) -> None:
    recs = {
        f"{b},{t},{u}": rec(threads=b, tile=t, unroll=u, time=0.01 * t, times=[0.01 * t])
        for b in (32, 64)
        for t in (1, 2, 4)
        for u in (2,)
    }
    head = scale_header(tune_params_keys=["threads", "tile", "unroll"], problem_size=[N, 7])
    p = write_cache(tmp_path / "c.json", head, recs)
    with pytest.raises(KernelTunerFileError, match="no block dimensions") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert e.value.field == "tune_params_keys" and str(p) in str(e.value)
    with pytest.raises(KernelTunerFileError, match=r"tunables \['tile'\]") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"bx": "threads"})
    assert "fixed={'tile': 1}" in str(e.value)
    with pytest.raises(KernelTunerFileError, match=r"no configuration has tile = 3"):
        import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"bx": "threads"},
                            fixed={"tile": 3})  # fmt: skip
    r = import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"bx": "threads"},
                            fixed={"tile": 2})  # fmt: skip
    assert r.counts["ok"] == 2 and r.skipped == 4 and r.fixed == {"tile": 2, "unroll": 2}
    assert any("entry 0" in w for w in r.warnings)  # problem_size [N, 7]: the default took N
    assert all(
        m.value["median_ms"] == pytest.approx(0.02) for m in rows(store, SCALE, h200.key).values()
    )
    # Another variant of the kernel under the same name is refused.
    with pytest.raises(KernelTunerImportError, match="different variants"):
        import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"bx": "threads"},
                            fixed={"tile": 4})  # fmt: skip
    with pytest.raises(KernelTunerImportError, match="neither data parameters"):
        import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"M": 3})


def test_kernel_tuner_problem_size_mapping(tmp_path: Path, store: Store, h200) -> None:
    two = KernelSpec(
        name="my.two", source=SCALE_SRC.replace("scale", "two"), kernel="two",
        data=(DataParam("n", arg=2), DataParam("m", arg=2)), dim=2,
        grid=("ceil(n / bx)", "ceil(m / by)", "1"), make_args=scale_args,
    )  # fmt: skip
    head = scale_header(kernel_name="two", problem_size=[512, 256],
                        tune_params_keys=["block_size_x", "block_size_y"])  # fmt: skip
    recs = {f"{x},{y}": rec(block_size_x=x, block_size_y=y) for x in (32, 64) for y in (1, 2)}
    p = write_cache(tmp_path / "c.json", head, recs)
    with pytest.raises(KernelTunerFileError, match="cannot map data parameter 'n'") as e:
        import_kernel_tuner(p, two, store=store, device=h200)
    assert e.value.field == "problem_size" and "mapping={'n': 'problem_size[0]'}" in str(e.value)
    with pytest.raises(KernelTunerFileError, match="has no entry 2"):
        import_kernel_tuner(p, two, store=store, device=h200,
                            mapping={"n": "problem_size[2]", "m": "problem_size[0]"})  # fmt: skip
    r = import_kernel_tuner(p, two, store=store, device=h200,
                            mapping={"n": "problem_size[1]", "m": "problem_size[0]"})  # fmt: skip
    assert [D.values() for D in r.sizes] == [(256, 512)] and r.counts["ok"] == 4
    # A problem size outside the data parameter's range, and a "callable" one.
    tiny = dataclasses.replace(SCALE, name="my.tiny", data=(DataParam("n", arg=2, hi=1000),))
    p2 = write_cache(tmp_path / "c2.json", scale_header(), {"32": rec(block_size_x=32)})
    with pytest.raises(KernelTunerFileError, match=r"cache\['32'\].*outside its range"):
        import_kernel_tuner(p2, tiny, store=store, device=h200)
    p3 = write_cache(tmp_path / "c3.json", scale_header(problem_size="callable"),
                     {"32": rec(block_size_x=32)})  # fmt: skip
    with pytest.raises(KernelTunerFileError, match="function of the tunables"):
        import_kernel_tuner(p3, SCALE, store=store, device=h200)


def test_kernel_tuner_results_list_needs_metrics_named(tmp_path: Path, store: Store, h200) -> None:
    res = [
        {"block_size_x": b, "GFLOP/s": 100.0 + b, "time": 0.01, "times": [0.01]} for b in (32, 64)
    ]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(res))
    with pytest.raises(KernelTunerFileError, match="ignore="):
        import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"n": N},
                            device_name="NVIDIA H200")  # fmt: skip
    r = import_kernel_tuner(p, SCALE, store=store, device=h200, mapping={"n": N},
                            device_name="NVIDIA H200", ignore=["GFLOP/s"])  # fmt: skip
    assert r.counts["ok"] == 2


def test_kernel_tuner_registers(tmp_path: Path, store: Store, h200) -> None:
    recs = {str(b): rec(block_size_x=b, num_regs=r) for b, r in ((32, 16), (64, 18))}
    p = write_cache(tmp_path / "c.json", scale_header(), recs)
    r = import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert "num_regs" not in r.attributes_missing and any(
        "num_regs differs" in w for w in r.warnings
    )
    assert store.collect_facts("my.scale", h200.key).attributes.num_regs == 18
    # Attributes measured by klaraptor itself are never replaced by assumed ones.
    s2 = Store(tmp_path / "m.sqlite")
    data = load_recorded()
    data.to_store(s2.path, ["polybench.atax.k1"])
    spec = suite.get("polybench.atax.k1")
    before = s2.collect_facts(spec.name, h200.key).attributes
    p = write_cache(tmp_path / "a.json", scale_header(kernel_name="atax_k1", problem_size=4096),
                    {"32": rec(block_size_x=32)})  # fmt: skip
    r = import_kernel_tuner(p, spec, store=s2, device=h200, kernel_name="atax_k1")
    assert r.attributes_missing == []
    assert s2.collect_facts(spec.name, h200.key).attributes == before


# ---------------------------------------------------------------------------------------------
# Bad input: reported by file and field


def test_kernel_tuner_device_checks(tmp_path: Path, store: Store, h200) -> None:
    p = write_cache(tmp_path / "c.json", scale_header(device_name="NVIDIA H100 80GB HBM3"),
                    {"32": rec(block_size_x=32)})  # fmt: skip
    with pytest.raises(KernelTunerImportError, match="never mixes GPUs") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert "NVIDIA H100 80GB HBM3" in str(e.value) and h200.name in str(e.value)
    with pytest.raises(KernelTunerFileError, match="does not name the GPU") as e:
        import_kernel_tuner(SYN / "scale-results.json", SCALE, store=store, device=h200,
                            mapping={"n": N})  # fmt: skip
    assert "metadata=" in str(e.value) and "device_name=" in str(e.value)
    with pytest.raises(KernelTunerFileError, match="the file names the GPU"):
        import_kernel_tuner(SYN / "scale_cache.json", SCALE, store=store, device=h200,
                            device_name="NVIDIA A100")  # fmt: skip
    assert store.count_measurements() == 0


def test_kernel_tuner_kernel_checks(tmp_path: Path, store: Store, h200) -> None:
    p = write_cache(tmp_path / "c.json", scale_header(kernel_name="vector_add"),
                    {"32": rec(block_size_x=32)})  # fmt: skip
    with pytest.raises(KernelTunerFileError, match="'vector_add'") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert e.value.field == "kernel_name"
    import_kernel_tuner(p, SCALE, store=store, device=h200, kernel_name="vector_add")
    edited = dataclasses.replace(SCALE, source=SCALE_SRC.replace("2.0f", "3.0f"))
    with pytest.raises(KernelTunerImportError, match="different version"):
        import_kernel_tuner(p, edited, store=store, device=h200, kernel_name="vector_add")


@pytest.mark.parametrize(
    ("text", "match", "where"),
    [
        ('{"results": [1, 2', "malformed JSON", "line 1 column"),
        ('{"foo": 1}', "unknown format", "top level"),
        ('{"schema_version": "1.0.0", "metadata": {}}', "T4 metadata file", "metadata"),
        ('{"version_number": "1.0", "tunable_parameters": [], "data": []}', "store_results", "data"),
        ('{"schema_version": "1.0.0", "results": [{"configuration": {}, "times": {}, '
         '"invalidity": "bogus", "correctness": 1}]}', "not one of", "results[0].invalidity"),
    ],
)  # fmt: skip
def test_kernel_tuner_bad_files(tmp_path: Path, store: Store, h200, text, match, where) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(KernelTunerFileError, match=match) as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert e.value.field.startswith(where) and e.value.path == p
    assert isinstance(e.value, KlaraptorError)


def test_kernel_tuner_bad_values(tmp_path: Path, store: Store, h200) -> None:
    p = write_cache(
        tmp_path / "c.json", scale_header(), {"32": rec(block_size_x=32, time="fast", times=[])}
    )
    with pytest.raises(KernelTunerFileError, match="expected milliseconds") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert e.value.field == "cache['32'].time"
    p = write_cache(tmp_path / "c.json", scale_header(), {"0": rec(block_size_x=0)})
    with pytest.raises(KernelTunerFileError, match="positive integer") as e:
        import_kernel_tuner(p, SCALE, store=store, device=h200)
    assert e.value.field == "cache['0'].block_size_x"
    with pytest.raises(KernelTunerFileError, match="cannot read"):
        import_kernel_tuner(tmp_path / "missing.json", SCALE, store=store, device=h200)


# ---------------------------------------------------------------------------------------------
# Export and round trips (real recorded H200 measurements)


def _stats(m: Measurement) -> tuple:
    v = m.value
    keys = ("median_ms", "q1_ms", "q3_ms", "spread", "samples_ms", "inner")
    return (m.status, m.reason, tuple(_rounded(v.get(k)) for k in keys))


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else round(x, 12)
    if isinstance(x, list):
        return tuple(_rounded(v) for v in x)
    return x


@pytest.fixture(scope="module")
def recorded():
    return load_recorded()


def _source_store(path: Path, recorded, name: str) -> Store:
    """The recorded kernel, plus a point with samples, a failed and a rejected one."""
    from klaraptor.backends.cupy_backend import summarize

    s = recorded.to_store(path, [name])
    key, D = recorded.device_key, suite.get(name).size(8192)
    s.put_measurements(
        [
            Measurement(name, key, D, (32, 1, 1), "time", "ok",
                        summarize([0.5, 0.52, 0.49, 0.51], inner=3, flush_l2=False)),
            Measurement(name, key, D, (64, 1, 1), "time", "failed", {},
                        "launch failed: too many resources requested"),
            Measurement(name, key, D, (96, 1, 1), "time", "rejected", {}, "constraint bx <= N"),
        ]
    )  # fmt: skip
    return s


@pytest.mark.parametrize("name", ["polybench.atax.k1", "polybench.conv2d.conv2d"])
def test_kernel_tuner_round_trip(tmp_path: Path, recorded, name: str) -> None:
    """klaraptor → T4 → import gives the same rows, and build() chooses the same blocks."""
    spec, prof = suite.get(name), recorded.profile()
    src = _source_store(tmp_path / "a.sqlite", recorded, name)
    (tmp_path / "t4").mkdir()  # export_t4 makes no directory (issue 38)
    out, meta = export_t4(src, spec, prof.key, tmp_path / "t4" / "k-results.json")
    assert meta.name == "k-metadata.json" and meta.is_file()
    dst = Store(tmp_path / "b.sqlite")
    r = import_kernel_tuner(out, spec, store=dst, device=prof)
    assert "num_regs" not in r.attributes_missing  # exported as a measurement, read back
    a = {k: _stats(m) for k, m in rows(src, spec, prof.key).items()}
    b = {k: _stats(m) for k, m in rows(dst, spec, prof.key).items()}
    assert a == b and len(a) == r.counts["ok"] + r.counts["failed"] + r.counts["rejected"]
    created = {k: m.created for k, m in rows(dst, spec, prof.key).items()}
    for k, m in rows(src, spec, prof.key).items():
        assert created[k] == pytest.approx(m.created, abs=1e-5)  # the T4 timestamp: µs
    train = spec.meta["train_sizes"]
    ka = build(spec, train, model="time_fit", store=src, device=prof, collect_data=False,
               progress=False)  # fmt: skip
    kb = build(spec, train, model="time_fit", store=dst, device=prof, collect_data=False,
               progress=False)  # fmt: skip
    for n in spec.meta["eval_sizes"]:
        assert ka.select(n).block == kb.select(n).block


def test_kernel_tuner_export_refuses_empty(tmp_path: Path, store: Store, h200) -> None:
    with pytest.raises(KlaraptorError, match="no timing measurements"):
        export_t4(store, SCALE, h200.key, tmp_path / "x-results.json")


def test_kernel_tuner_export_is_valid_t4(tmp_path: Path, recorded) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    fu = pytest.importorskip(
        "kernel_tuner.file_utils",
        reason="kernel_tuner is not installed (its T4 schemas live in that package)",
    )
    spec = suite.get("polybench.atax.k1")
    src = _source_store(tmp_path / "a.sqlite", recorded, spec.name)
    out, meta = export_t4(src, spec, recorded.device_key, tmp_path / "k-results.json")
    jsonschema.validate(json.loads(out.read_text()), fu.output_file_schema("results")[1])
    jsonschema.validate(json.loads(meta.read_text()), fu.output_file_schema("metadata")[1])
    # The synthetic T4 files Kernel Tuner wrote validate too (the check can fail).
    jsonschema.validate(json.loads((SYN / "scale-results.json").read_text()),
                        fu.output_file_schema("results")[1])  # fmt: skip
    bad = json.loads(out.read_text())
    bad["results"][0]["invalidity"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, fu.output_file_schema("results")[1])
