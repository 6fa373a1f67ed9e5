"""Offline replay of the tunables suite (issue 32): rebuild each kernel's model from the
training rows a `benchmarks/bench_tunables.py` run recorded, choose at each evaluation size and
score the choice against that run's ground truth. No GPU.

    PYTHONPATH=src:plugins/klaraptor-bench/src python3 benchmarks/tunables_replay.py \
        --out OUT.json SOURCE [SOURCE ...] [--models auto scaling time_fit ...] [--kernels ...]

Each SOURCE is a run's output folder (its `stores/*.sqlite`, and `bench_tunables.json`, whose
provenance names the source data's GPU, date and commit) or a .tgz of it; several runs (e.g.
the suite split over GPUs) are replayed together. For each kernel:
1. its store is copied with every row outside the training sizes deleted (the rows at the
   evaluation sizes are ground truth: they never reach a fit) and its builds dropped;
2. `klaraptor.build(spec, model=m, budget=1.5, collect_data=False)` rebuilds the model from that
   copy, as the run's own build did (the budgeted plan replayed over the recorded points);
3. at each evaluation size the methods are scored by r = t(choice) / t(best), both from the
   ground truth of the original store: each model by name (`auto` is `klaraptor`, the default
   build), its online top-k (`<method>_topk`: the best measured among the candidates online
   refinement tries), and `tune_once` (the configuration measured fastest at the largest
   training size).

Writes OUT.json with provenance (this replay's, and the source run's), per kernel and pair the
choices and r of every method, each build's model selection, and a summary per method (geomean
and max r, against tune-once).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sqlite3
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_MODELS = ("auto", "scaling", "time_fit")


def config_key(params: Any, block: Any) -> str:
    """The configuration as bench_tunables keys it: `A=1,B=2|bx x by x bz`."""
    return f"{','.join(f'{k}={v}' for k, v in dict(params).items())}|{'x'.join(map(str, block))}"


def method_name(model: str) -> str:
    return "klaraptor" if model == "auto" else model


def _source_dir(source: Path, tmp: Path) -> Path:
    """The folder holding `stores/` (a .tgz is unpacked into `tmp`)."""
    if source.is_file():
        with tarfile.open(source) as tf:
            tf.extractall(tmp, filter="data")
        source = tmp
    hits = sorted(source.rglob("stores"))
    if (source / "stores").is_dir():
        return source
    if hits:
        return hits[0].parent
    raise SystemExit(f"{source}: no stores/ folder (the output of bench_tunables.py)")


def _source_provenance(root: Path) -> dict[str, Any]:
    """The source run's provenance (GPU, date, command, commit) from its bench_tunables.json."""
    for p in [root / "bench_tunables.json", *sorted(root.rglob("bench_tunables*.json"))]:
        if p.is_file():
            data = json.loads(p.read_text())
            return {"file": p.name, **data.get("provenance", {})}
    return {"file": None}


def training_copy(src: Path, dst: Path, spec: Any) -> int:
    """A copy of the store with only the training sizes' rows of `spec` (and of nothing else
    at other sizes), without builds. Returns the rows deleted."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    train = {json.dumps([int(n)]) for n in spec.meta["train_sizes"]}
    con = sqlite3.connect(dst)
    try:
        rows = con.execute("SELECT id, d FROM measurements").fetchall()
        gone = [(i,) for i, d in rows if json.dumps(json.loads(d)) not in train]
        con.executemany("DELETE FROM measurements WHERE id = ?", gone)
        con.execute("DELETE FROM builds")
        con.commit()
    finally:
        con.close()
    return len(gone)


def truth_of(store: Any, spec: Any, device_key: str) -> dict[int, dict[str, float]]:
    """{eval N: {config key: hot median ms}} of the original store."""
    evals = {int(n) for n in spec.meta["eval_sizes"]}
    out: dict[int, dict[str, float]] = {}
    for m in store.measurements(spec.name, device_key, kind="time", status="ok"):
        n = int(m.D.values()[0])
        if n in evals:
            out.setdefault(n, {})[config_key(m.params, m.block)] = float(m.value["median_ms"])
    return out


def tune_once_of(store: Any, spec: Any, device_key: str) -> str | None:
    """The configuration measured fastest (hot) at the largest training size."""
    L = max(int(n) for n in spec.meta["train_sizes"])
    best, t_best = None, math.inf
    for m in store.measurements(spec.name, device_key, kind="time", status="ok"):
        if int(m.D.values()[0]) == L and float(m.value["median_ms"]) < t_best:
            best, t_best = config_key(m.params, m.block), float(m.value["median_ms"])
    return best


def _device(store: Any, name: str) -> tuple[Any, str]:
    from klaraptor.device.profile import recorded_profile

    keys = store.collect_devices(name)
    if not keys:
        raise SystemExit(f"{name}: the store has no collect facts")
    prof = store.cached_profile(keys[0]) or recorded_profile("h200")
    return prof, keys[0]


def replay_kernel(path: Path, models: list[str], tmp: Path) -> dict[str, Any]:
    """One kernel's store: every model rebuilt from its training rows, scored on the truth."""
    from klaraptor.assemble import build
    from klaraptor.spec import catalog
    from klaraptor.store import Store

    name = path.stem
    spec = catalog.get(name)
    original = Store(path)
    device, dev_key = _device(original, name)
    truth = truth_of(original, spec, dev_key)
    once = tune_once_of(original, spec, dev_key)
    work = tmp / f"{name}.train.sqlite"
    deleted = training_copy(path, work, spec)
    store = Store(work)
    rec: dict[str, Any] = {"kernel": name, "deleted_rows": deleted, "builds": {}}
    chosen: dict[str, dict[int, str | None]] = {"tune_once": {n: once for n in truth}}
    for model in models:
        meth = method_name(model)
        t0 = time.perf_counter()
        try:
            kern = build(spec, model=model, store=store, device=device, collect_data=False,
                         progress=False)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded: the other models go on
            rec["builds"][meth] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        rep = kern.report
        sel = None if rep is None or rep.selection is None else rep.selection.to_dict()
        fits = {} if rep is None else rep.fits
        rec["builds"][meth] = {
            "model": None if rep is None else rep.model,
            "fit_s": time.perf_counter() - t0,
            "selection": sel,
            "fit_report": _short(fits),
        }
        chosen[meth] = {}
        chosen[f"{meth}_topk"] = {}
        for n in truth:
            s = kern.select(n)
            chosen[meth][n] = config_key(s.params, s.block)
            times = truth[n]
            top = [config_key(c.params, c.block) for c in kern.selector.refine_blocks(n)]
            chosen[f"{meth}_topk"][n] = min(top, key=lambda k: times.get(k, math.inf))
        kern.selector.flush()
    pairs = []
    for n, times in sorted(truth.items()):
        best = min(times, key=times.__getitem__)
        pairs.append(
            {
                "N": n,
                "best": best,
                "best_ms": times[best],
                "configs_timed": len(times),
                "choice": {m: c[n] for m, c in chosen.items()},
                "r": {
                    m: (times.get(c[n], math.inf) / times[best] if c[n] is not None else None)
                    for m, c in chosen.items()
                },
            }
        )
    rec["pairs"] = pairs
    return rec


def _short(fits: Any) -> Any:
    """The fit report without its per-candidate arrays (the JSON stays readable)."""
    if isinstance(fits, dict):
        return {
            k: _short(v)
            for k, v in fits.items()
            if k not in ("a_hot", "a_cold", "cold_measured", "delta", "b_ms", "g_ms")
        }
    if isinstance(fits, list) and len(fits) > 32:
        return f"[{len(fits)} values]"
    return fits


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summarize(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per method over every pair: geomean and max r, pairs within 5 %, and the geomean of
    r(method) / r(tune_once) (below 1: better than tune-once); per kernel the geomean r."""
    methods = sorted({m for r in recs for p in r.get("pairs", []) for m in p["r"]})
    out: dict[str, Any] = {"methods": {}, "per_kernel": {}}
    for m in methods:
        rs = [p["r"][m] for r in recs for p in r.get("pairs", []) if p["r"].get(m) is not None]
        vs = [
            p["r"][m] / p["r"]["tune_once"]
            for r in recs
            for p in r.get("pairs", [])
            if p["r"].get(m) is not None and p["r"].get("tune_once")
        ]
        if rs:
            out["methods"][m] = {
                "pairs": len(rs),
                "geomean_r": geomean(rs),
                "max_r": max(rs),
                "within_5pct": sum(1 for x in rs if x <= 1.05) / len(rs),
                "over_tune_once": geomean(vs),
            }
    for r in recs:
        if r.get("pairs"):
            out["per_kernel"][r["kernel"]] = {
                m: geomean([p["r"][m] for p in r["pairs"] if p["r"].get(m) is not None])
                for m in methods
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", type=Path, nargs="+", help="bench_tunables.py output folders/.tgz")
    ap.add_argument("--out", type=Path, required=True, help="the JSON to write")
    ap.add_argument("--kernels", nargs="*", default=[], help="store names (default: all)")
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    a = ap.parse_args(argv)
    import warnings

    from klaraptor.core.provenance import stamp

    warnings.simplefilter("ignore")
    recs: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for i, source in enumerate(a.sources):
            root = _source_dir(source, tmp / f"src{i}")
            prov = {"source": str(source), **_source_provenance(root)}
            runs.append(prov)
            stores = sorted((root / "stores").glob("*.sqlite"))
            for path in [s for s in stores if not a.kernels or s.stem in a.kernels]:
                work = tmp / "work"
                work.mkdir(exist_ok=True)
                try:
                    rec = replay_kernel(path, a.models, work)
                except Exception as exc:  # noqa: BLE001 - recorded, the others go on
                    rec = {"kernel": path.stem, "error": f"{type(exc).__name__}: {exc}"}
                rec["source_run"] = prov.get("command")
                recs.append(rec)
                shutil.rmtree(work, ignore_errors=True)
                line = rec.get("error") or "  ".join(
                    f"N={p['N']} "
                    + " ".join(f"{m}={v:.3f}" for m, v in sorted(p["r"].items()) if v)
                    for p in rec["pairs"]
                )
                print(f"{path.stem}: {line}", flush=True)
    summary = summarize(recs)
    report = {
        "provenance": stamp(source_runs=runs, models=a.models),
        "kernels": recs,
        "summary": summary,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    for m, v in summary["methods"].items():
        print(
            f"{m:>22}: geomean {v['geomean_r']:.4f}  max {v['max_r']:.3f}  "
            f"over tune-once {v['over_tune_once']:.4f}  ({v['pairs']} pairs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
