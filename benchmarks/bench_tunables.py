"""GPU: program parameters judged on the tunables suite (issue 32), and their cost against Kernel
Tuner, in one run on one GPU.

    PYTHONPATH=src:plugins/klaraptor-bench/src python3 benchmarks/bench_tunables.py OUT [--limit S] [--kt K] [kernels...]

For each kernel of `klaraptor.suite.tunables` (or those named), in a child process with its own
store and time limit:
1. **klaraptor's build** as a user gets it: `klaraptor.build(spec)` (model "auto", budget 1.5 ×
   tune-once, the variants compiled on CPU threads while the GPU measures), its wall time from
   the call to the stored build, compilation included;
2. **block-only**: the same build of the kernel with its program parameters fixed at the
   author's defaults (`default_params`), to show what the joint space is worth;
3. **ground truth**: every configuration of the joint space (every variant × every block the
   constraints and the variant's own limits admit) timed at each evaluation size (larger than
   every training size);
4. the methods, scored by r = t(choice) / t(best) at each evaluation size:
   `klaraptor` (the model's choice), `online_topk` (the best measured among the candidates online
   refinement tries), `tune_once` (the configuration measured fastest at the largest training
   size, reused), `default` (the author's variant and default block), `block_only`;
5. with `--kt K`, for the first K kernels, **Kernel Tuner's brute force** over the same joint
   space at the largest training size (lang cupy, its defaults: 7 iterations, every
   configuration compiled separately): its wall time, against klaraptor's build of step 1
   (`build_over_kernel_tuner`), and its choice reused at the evaluation sizes (`kernel_tuner`).

Writes OUT/bench_tunables.json after every kernel (a killed run keeps what it did), with
provenance, and prints a table. A failed step is recorded, never fatal; a kernel that runs out
of its time says in which phase and with the seconds of the phases it finished (the child
writes OUT/progress/<kernel>.json as it goes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

METHODS = ("klaraptor", "online_topk", "tune_once", "default", "block_only", "kernel_tuner")


def _config_key(params: Any, block: Any) -> str:
    return f"{','.join(f'{k}={v}' for k, v in dict(params).items())}|{'x'.join(map(str, block))}"


def _prepare_store(path: Path) -> Any:
    """A store holding the recorded H200 profile when this GPU is one (no microbenchmarks)."""
    from klaraptor.device.profile import query_device, recorded_profile
    from klaraptor.store import Store

    store = Store(path)
    here = query_device(0)
    rec = recorded_profile("h200")
    if rec.key == here.key:
        store.save_profile(rec)
    return store


def _keep_store(src: Path, dst: Path) -> None:
    """A consistent copy of a store in WAL mode (sqlite's backup reads the -wal file too: a copy
    of the main file alone lost the rows not yet checkpointed, as in the stores of 1954ee6,
    whose sgemm store lacks most of the evaluation size 1792 and the smaller training sizes)."""
    import sqlite3

    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def _truth(spec: Any, store: Any, device_key: str) -> dict[int, dict[str, float]]:
    """{eval N: {config key: ms}} from the store's hot timings at the evaluation sizes."""
    evals = {int(n) for n in spec.meta["eval_sizes"]}
    out: dict[int, dict[str, float]] = {}
    for m in store.measurements(spec.name, device_key, kind="time", status="ok"):
        n = int(m.D.values()[0])
        if n in evals:
            out.setdefault(n, {})[_config_key(m.params, m.block)] = float(m.value["median_ms"])
    return out


def _tune_once(spec: Any, store: Any, device_key: str) -> str | None:
    L = max(int(n) for n in spec.meta["train_sizes"])
    best, t_best = None, math.inf
    for m in store.measurements(spec.name, device_key, kind="time", status="ok"):
        if int(m.D.values()[0]) == L and float(m.value["median_ms"]) < t_best:
            best, t_best = _config_key(m.params, m.block), float(m.value["median_ms"])
    return best


def _kt(spec: Any, n: int) -> dict[str, Any]:
    import numpy as np
    from kernel_tuner import tune_kernel

    from klaraptor.core.types import ParamStyle
    from klaraptor.space.configspace import ConfigSpace

    D = spec.size(n)
    blocks = ConfigSpace.for_spec(spec).candidates
    template = spec.param_style is ParamStyle.TEMPLATE
    # Template arguments must not collide with Kernel Tuner's #defines of the tunables.
    alias = {p: (f"kt_{p}" if template else p) for p in spec.param_names}
    tune: dict[str, list[int]] = {
        "block_size_x": sorted({b[0] for b in blocks}),
        "block_size_y": sorted({b[1] for b in blocks}),
        "block_size_z": sorted({b[2] for b in blocks}),
    }
    for prm in spec.params:
        tune[alias[prm.name]] = list(prm.values)
    allowed = set(blocks)

    def unalias(p: dict[str, Any]) -> tuple[dict[str, int], tuple[int, int, int]]:
        pv = {name: int(p[alias[name]]) for name in spec.param_names}
        return pv, (int(p["block_size_x"]), int(p["block_size_y"]), int(p["block_size_z"]))

    def ok(p: dict[str, Any]) -> bool:
        pv, b = unalias(p)
        if b not in allowed:
            return False
        good, _ = spec.satisfies_constraints(D, b, pv)
        if not good:
            return False
        try:
            spec.grid_for(D, b, pv)
            return spec.dynamic_smem_for(D, b, pv) <= 227 * 1024
        except Exception:  # noqa: BLE001 - not launchable: not a configuration
            return False

    def problem(p: dict[str, Any]) -> tuple[int, int, int]:
        pv, b = unalias(p)
        g = spec.grid_for(D, b, pv)
        return (g[0] * b[0], g[1] * b[1], g[2] * b[2])

    args = list(spec.make_args(D, np.random.default_rng(0), device=False))
    kw: dict[str, Any] = {}
    if spec.dynamic_smem is not None:
        kw["smem_args"] = {"size": lambda p: spec.dynamic_smem_for(D, *unalias(p)[::-1])}
    name = spec.kernel
    if template:
        name = f"{spec.kernel}<{', '.join(alias[p] for p in spec.param_names)}>"
    t0 = time.perf_counter()
    results, env = tune_kernel(
        name,
        spec.source,
        problem,
        args,
        tune,
        grid_div_x=["block_size_x"],
        grid_div_y=["block_size_y"],
        grid_div_z=["block_size_z"],
        restrictions=ok,
        lang="cupy",
        compiler_options=list(spec.options),
        strategy="brute_force",
        verbose=False,
        quiet=True,
        **kw,
    )
    wall = time.perf_counter() - t0
    timed = [
        r for r in results if isinstance(r.get("time"), (int, float)) and math.isfinite(r["time"])
    ]
    best = min(timed, key=lambda r: r["time"])
    pv, b = unalias(best)
    return {
        "wall_s": wall,
        "configs": len(results),
        "timed": len(timed),
        "choice": _config_key(pv, b),
        "best_ms": float(best["time"]),
    }


def one_kernel(name: str, out: Path, kt: bool, q: Any) -> None:
    import warnings

    warnings.simplefilter("ignore")
    rec: dict[str, Any] = {"kernel": name}
    progress = out / "progress" / f"{name}.json"
    progress.parent.mkdir(exist_ok=True)
    t_start = time.perf_counter()

    def phase(what: str) -> None:  # what a timeout reports: the phase reached, the others' times
        done = {k: v for k, v in rec.items() if k.endswith("_s")}
        progress.write_text(
            json.dumps({"phase": what, "at_s": time.perf_counter() - t_start, **done})
        )

    try:
        from klaraptor.assemble import build
        from klaraptor.collect.collector import collect
        from klaraptor.spec import catalog
        from klaraptor_bench.truth import TRUTH_OPTIONS

        spec = catalog.get(name)
        rec["variants"] = len(spec.variants())
        with tempfile.TemporaryDirectory() as tmp:
            store = _prepare_store(Path(tmp) / "s.sqlite")
            phase("build")
            t0 = time.perf_counter()
            kern = build(spec, store=store, progress=False)
            rec["build_s"] = time.perf_counter() - t0
            rec["model"] = kern.report.model
            coll = kern.report.collect
            rec["build_plan"] = coll.plan.to_dict() if coll and coll.plan else None
            rec["candidates"] = len(kern.helper.candidates)
            dev = kern.device_key
            default = dict(spec.default_variant)
            only = dataclasses.replace(
                spec,
                name=spec.name + "_block_only",
                params={k: (v,) for k, v in default.items()},
                default_params=default,
            )
            phase("block_only_build")
            t0 = time.perf_counter()
            kb = build(only, store=store, progress=False)
            rec["block_only_build_s"] = time.perf_counter() - t0
            phase("truth")
            t0 = time.perf_counter()
            collect(
                spec, spec.meta["eval_sizes"], store=store, options=TRUTH_OPTIONS, progress=False
            )
            rec["truth_s"] = time.perf_counter() - t0
            truth = _truth(spec, store, dev)
            once = _tune_once(spec, store, dev)
            keep = out / "stores"
            keep.mkdir(exist_ok=True)
            _keep_store(Path(tmp) / "s.sqlite", keep / f"{spec.name}.sqlite")
            kt_choice = None
            if kt:
                phase("kernel_tuner")
                try:
                    rec["kernel_tuner"] = _kt(spec, max(int(n) for n in spec.meta["train_sizes"]))
                    kt_choice = rec["kernel_tuner"]["choice"]
                    rec["build_over_kernel_tuner"] = rec["build_s"] / rec["kernel_tuner"]["wall_s"]
                except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
                    rec["kernel_tuner"] = {"error": f"{type(exc).__name__}: {exc}"}
            pairs = []
            for n, times in sorted(truth.items()):
                best = min(times.values())
                sel = kern.select(n)
                top = kern.selector.refine_blocks(n)
                top_keys = [_config_key(c.params, c.block) for c in top]
                choices = {
                    "klaraptor": _config_key(sel.params, sel.block),
                    "online_topk": min(top_keys, key=lambda k: times.get(k, math.inf)),
                    "tune_once": once,
                    "default": _config_key(default, spec.default_block or (256, 1, 1)),
                    "block_only": _config_key(default, kb.select(n).block),
                    "kernel_tuner": kt_choice,
                }
                pairs.append(
                    {
                        "N": n,
                        "best_ms": best,
                        "best": min(times, key=times.get),  # type: ignore[arg-type]
                        "configs_timed": len(times),
                        "choice": choices,
                        "r": {
                            m: (times.get(c, math.inf) / best if c is not None else None)
                            for m, c in choices.items()
                        },
                    }
                )
            rec["pairs"] = pairs
    except Exception as exc:  # noqa: BLE001 - recorded, never fatal
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["traceback"] = traceback.format_exc()[-3000:]
    q.put(rec)


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summarize(recs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in METHODS:
        rs = [p["r"][m] for r in recs for p in r.get("pairs", []) if p["r"].get(m) is not None]
        if rs:
            out[m] = {
                "pairs": len(rs),
                "geomean_r": geomean(rs),
                "max_r": max(rs),
                "within_5pct": sum(1 for x in rs if x <= 1.05) / len(rs),
            }
    per = {}
    for r in recs:
        ps = r.get("pairs", [])
        if ps:
            per[r["kernel"]] = {
                "joint_over_block_only": geomean(
                    [p["r"]["block_only"] / p["r"]["klaraptor"] for p in ps]
                ),
                "build_s": r.get("build_s"),
                "build_over_kernel_tuner": r.get("build_over_kernel_tuner"),
            }
    out["per_kernel"] = per
    ratios = [v["build_over_kernel_tuner"] for v in per.values() if v["build_over_kernel_tuner"]]
    if ratios:
        out["build_over_kernel_tuner"] = {"geomean": geomean(ratios), "max": max(ratios)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds for the whole run")
    ap.add_argument("--kt", type=int, default=0, help="Kernel Tuner on the first K kernels")
    ap.add_argument("--step", type=float, default=120.0, help="seconds per kernel at most")
    a = ap.parse_intermixed_args(argv)
    from klaraptor.core.provenance import stamp
    from klaraptor.spec import catalog

    names = a.kernels or [n for n in catalog.names() if n.startswith("tunables.")]
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + a.limit
    recs: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    for i, name in enumerate(names):
        left = deadline - time.monotonic()
        if left < 10:
            recs.append({"kernel": name, "error": "not run: the run's time limit"})
            continue
        q = ctx.Queue()
        p = ctx.Process(target=one_kernel, args=(name, a.out, i < a.kt, q))
        p.start()
        p.join(min(a.step, left))
        if p.is_alive():
            p.kill()
            where = a.out / "progress" / f"{name}.json"
            reached = json.loads(where.read_text()) if where.exists() else {}
            recs.append(
                {
                    "kernel": name,
                    "error": f"timed out after {min(a.step, left):.0f} s"
                    + (f" in phase {reached['phase']}" if reached else ""),
                    "progress": reached,
                }
            )
        else:
            recs.append(
                q.get() if not q.empty() else {"kernel": name, "error": f"exit {p.exitcode}"}
            )
        r = recs[-1]
        line = f"{name}: " + (
            r.get("error")
            or ", ".join(
                f"N={p['N']} r={p['r']['klaraptor']:.3f} (block-only {p['r']['block_only']:.3f})"
                for p in r.get("pairs", [])
            )
            + f"; build {r.get('build_s', math.nan):.1f} s"
        )
        print(line, flush=True)
        report = {"provenance": stamp(), "kernels": recs, "summary": summarize(recs)}
        (a.out / "bench_tunables.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(summarize(recs), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
