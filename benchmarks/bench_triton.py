"""klaraptor.triton.autotune against triton.autotune on Triton's own tutorial kernels (issue 34).

    PYTHONPATH=src python benchmarks/bench_triton.py OUTDIR [--limit S] [--warmup MS] [--rep MS]
                                                     [--kernels a,b] [--shapes N]

Per kernel (benchmarks/triton_cases.py; the kernels are byte-identical tutorial extracts):
1. compile: every config once at each specialisation the workload needs, into one Triton disk
   cache both sides then share (so neither side is charged for compilation the other saved it;
   the compile seconds are reported apart, and the ratio with them added to both sides too);
2. klaraptor: `build(train)` at the training keys (all smaller than every workload key), then the
   first call at each workload key (model choice, no benchmark): tuning time = build + first
   calls. Where the build adds training keys (configs that showed no growth with a key
   parameter: `klaraptor.frontends.triton_extend`), their measurements are part of the build's
   time, and r is scored only at the workload keys whose value of that parameter is above every
   training key the build used (the others are reported, left out of r);
3. triton.autotune: the first call at each workload key (it benchmarks every config): tuning
   time = first calls. Its per-key best is the ground truth, and its timings of every config at
   that key (the same do_bench run) give r = time(klaraptor's choice) / time(best);
4. overhead: host time per cached launch (plain Triton launch with the chosen config,
   triton.autotune's cached launch, klaraptor's cached launch) at the smallest training key.

Both sides time with the same warmup/rep (ms). Each kernel is independent: a failure is recorded
and the next kernel runs. OUTDIR/triton.json is rewritten after every kernel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEVICE = "cuda"  # "cpu" under --smoke (Triton's interpreter)


def _cases() -> Any:
    spec = importlib.util.spec_from_file_location("triton_cases", HERE / "triton_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["triton_cases"] = mod
    spec.loader.exec_module(mod)
    return mod


def _sync() -> None:
    if DEVICE == "cuda":
        import torch

        torch.cuda.synchronize()


def _cpu_bench(fn: Any, quantiles: Any = None, **_: Any) -> Any:
    """triton.autotune's do_bench under --smoke (no GPU events in the interpreter)."""
    fn()
    t0 = time.perf_counter()
    fn()
    ms = (time.perf_counter() - t0) * 1e3
    return [ms, ms, ms] if quantiles else ms


def _smoke_shapes(case: Any) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """Tiny training and workload keys for the interpreter (--smoke)."""
    if case.smoke is not None:
        return case.smoke
    small = case.small
    train = [{k: max(1, v // 2) for k, v in small.items()}, dict(small)]
    workload = [{k: v * f + 1 for k, v in small.items()} for f in (2, 3)]
    return train, workload


def _median_ms(v: Any) -> float:
    """A triton.autotune timing: do_bench's [median, p20, p80] or one number."""
    if isinstance(v, (list, tuple)):
        return float(v[0])
    return float(v)


def _cfg_text(c: Any) -> dict[str, Any]:
    return {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def _scored(workload: list[dict[str, int]], build: Any) -> Any:
    """Whether r counts at a workload key: always, unless the build added training keys for a
    parameter; then only above the largest value of it that training used (r is scored at
    unseen keys only)."""
    ext = build.extension
    if ext is None or not ext.added:
        return lambda shape: True
    top = max(D[ext.parameter] for D in build.sizes)
    return lambda shape: shape[ext.parameter] > top


def _host_us_per_launch(launch: Any, n: int) -> float:
    launch()
    _sync()
    t0 = time.perf_counter()
    for _ in range(n):
        launch()
    t = time.perf_counter() - t0
    _sync()
    return t / n * 1e6


def run_case(
    case: Any, cases: Any, args: argparse.Namespace, out: dict[str, Any]
) -> dict[str, Any]:
    import triton

    from klaraptor.triton import autotune as k_autotune

    res: dict[str, Any] = {
        "configs_source": case.configs_source,
        "key": case.key,
        "train": case.train,
        "notes": case.notes,
    }
    train, workload = case.train, case.workload[: args.shapes]
    extra: dict[str, int] = {}
    if args.smoke:
        (train, workload), extra = _smoke_shapes(case), dict(case.small_extra)
    res["train"] = train

    def make(**key: int) -> Any:
        return case.make(DEVICE, **key, **extra)

    res["workload_shapes"] = len(workload)
    # 1. compile every config at each specialisation the workload needs (shared disk cache)
    t0 = time.perf_counter()
    ns0 = cases.load_tutorial(case.file)
    configs0 = case.configs(ns0)
    res["n_configs"] = len(configs0)
    seen_spec: set[Any] = set()
    reps = []
    broken: set[int] = set()  # configs that fail to compile here: dropped on both sides
    for shape in [*train, *workload]:
        grid, a, kw = make(**shape)
        spec_key = tuple(sorted((k, v) for k, v in kw.items() if isinstance(v, int)))
        if spec_key in seen_spec:
            continue
        seen_spec.add(spec_key)
        reps.append(shape)
        for i, c in enumerate(configs0):
            if i in broken:
                continue
            try:
                case.jit(ns0)[grid](*a, **kw, **c.all_kwargs())
            except Exception as exc:  # a config that cannot compile here: both sides drop it
                broken.add(i)
                res.setdefault("compile_failures", []).append(f"{_cfg_text(c)}: {exc}"[:300])
        _sync()
    res["compile_s"] = time.perf_counter() - t0
    res["compile_specialisations"] = reps
    if len(broken) == len(configs0):
        raise RuntimeError(
            f"none of the {len(configs0)} configs compiles under Triton {triton.__version__} on "
            f"this GPU (first error: {res['compile_failures'][0][:200]})"
        )
    keep = [i for i in range(len(configs0)) if i not in broken]
    res["configs_dropped"] = [_cfg_text(configs0[i]) for i in sorted(broken)]
    # correctness of a first launch, on the tutorial's own reference
    grid, a, kw = make(**workload[0])
    case.jit(ns0)[grid](*a, **kw, **configs0[keep[0]].all_kwargs())
    case.check(a)

    # 2. klaraptor
    ns_k = cases.load_tutorial(case.file)
    configs_k = [case.configs(ns_k)[i] for i in keep]
    store = os.path.join(args.outdir, "store.db")
    tuned = k_autotune(
        configs=configs_k,
        key=case.key,
        warmup=args.warmup,
        rep=args.rep,
        store=store,
        sample=make,
        progress=False,
    )(case.jit(ns_k))
    t0 = time.perf_counter()
    build = tuned.build(train)
    _sync()
    build_s = time.perf_counter() - t0
    used = [dict(D) for D in build.sizes]
    res["klaraptor_build"] = {
        "seconds": build_s,
        "measured_points": build.measured,
        "sizes_used": used,
        "size_extension": build.report.get("size_extension"),
        "growth": build.report.get("growth"),
        "fit": build.report.get("fit"),
    }
    scored = _scored(workload, build)
    k_first = 0.0
    chosen: list[int] = []
    select_us: list[float] = []
    last: Any = None
    for shape in workload:
        grid, a, kw = make(**shape)
        _sync()
        t0 = time.perf_counter()
        tuned[grid](*a, **kw)
        _sync()
        k_first += time.perf_counter() - t0
        select_us.append(tuned.last_select_us)
        chosen.append(configs_k.index(tuned.best_config))
        last = a
    case.check(last)
    del last

    # 3. triton.autotune over the same shapes: its tuning time, its best, its timings
    ns_t = cases.load_tutorial(case.file)
    configs_t = [case.configs(ns_t)[i] for i in keep]

    # triton.autotune's own do_bench with the same warmup/rep as klaraptor's build (its
    # warmup=/rep= arguments are deprecated in Triton 3.6 but mean the same)
    def gpu_bench(fn: Any, quantiles: Any = None) -> Any:
        return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, quantiles=quantiles)

    do_bench = _cpu_bench if args.smoke else gpu_bench
    at = triton.autotune(configs=configs_t, key=case.key, do_bench=do_bench)(case.jit(ns_t))
    t_first = 0.0
    shapes_out = []
    rs = []
    for shape, ci in zip(workload, chosen):
        grid, a, kw = make(**shape)
        _sync()
        t0 = time.perf_counter()
        at[grid](*a, **kw)
        _sync()
        t_first += time.perf_counter() - t0
        timings = {configs_t.index(c): _median_ms(v) for c, v in at.configs_timings.items()}
        best = configs_t.index(at.best_config)
        t_best = timings[best]
        t_chosen = timings.get(ci, math.nan)
        r = t_chosen / t_best if t_best > 0 else math.nan
        if scored(shape):
            rs.append(r)
        shapes_out.append(
            {
                "shape": shape,
                "scored": scored(shape),
                "chosen": _cfg_text(configs_t[ci]),
                "best": _cfg_text(configs_t[best]),
                "chosen_ms": t_chosen,
                "best_ms": t_best,
                "r": r,
                # every config's autotune timing: a later model is scored offline on them
                "timings_ms": [timings.get(i) for i in range(len(configs_t))],
            }
        )
    res["shapes"] = shapes_out
    res["geomean_r"] = _geomean(rs)
    res["max_r"] = max((r for r in rs if math.isfinite(r)), default=math.nan)
    res["exact_share"] = sum(1 for r in rs if r == 1.0) / len(rs) if rs else math.nan
    res["shapes_scored"] = len(rs)
    res["shapes_left_out"] = [s["shape"] for s in shapes_out if not s["scored"]]
    if res["shapes_left_out"]:
        ext = build.extension
        res["left_out_why"] = (
            f"at or below the largest training {ext.parameter} the build used "
            f"({max(D[ext.parameter] for D in build.sizes)}; it added "
            f"{[a.size[ext.parameter] for a in ext.added]})"
        )
    k_total = build_s + k_first
    res["tuning"] = {
        "klaraptor_s": k_total,
        "klaraptor_build_s": build_s,
        "klaraptor_first_calls_s": k_first,
        "autotune_s": t_first,
        "compile_s_shared": res["compile_s"],
    }
    res["tuning_time_ratio"] = k_total / t_first if t_first > 0 else math.nan
    res["tuning_time_ratio_with_compile"] = (k_total + res["compile_s"]) / (
        t_first + res["compile_s"]
    )
    sel = sorted(select_us)
    res["select_us"] = {"median": sel[len(sel) // 2], "max": sel[-1]}

    # 4. per-call overhead at the smallest training key (small kernels: the host's cost shows),
    # after one call there on each side (autotune benchmarks it once, klaraptor chooses it once)
    grid, a, kw = make(**train[0])
    at[grid](*a, **kw)
    tuned[grid](*a, **kw)
    _sync()
    best_cfg = at.best_config
    jit_plain = case.jit(ns_t)
    n = args.overhead_calls
    res["overhead_us"] = {
        "plain_triton": _host_us_per_launch(
            lambda: jit_plain[grid](*a, **kw, **best_cfg.all_kwargs()), n
        ),
        "triton_autotune_cached": _host_us_per_launch(lambda: at[grid](*a, **kw), n),
        "klaraptor_cached": _host_us_per_launch(lambda: tuned[grid](*a, **kw), n),
        "calls": n,
        "shape": train[0],
        "note": "host time per launch over back-to-back launches (sync at the end): the larger "
        "of the host overhead and the kernel's own time",
    }
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--limit", type=float, default=170.0, help="start no kernel after S seconds")
    ap.add_argument("--warmup", type=float, default=2.0, help="do_bench warmup ms, both sides")
    ap.add_argument("--rep", type=float, default=8.0, help="do_bench rep ms, both sides")
    ap.add_argument("--kernels", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--shapes", type=int, default=50, help="workload shapes per kernel")
    ap.add_argument("--overhead-calls", type=int, default=2000)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="no GPU: Triton's interpreter on the CPU, tiny keys (checks the script, not speed)",
    )
    args = ap.parse_args()
    global DEVICE
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        DEVICE = "cpu"
        args.overhead_calls = min(args.overhead_calls, 3)
    os.makedirs(args.outdir, exist_ok=True)
    # One fresh Triton disk cache for this run (step 1 fills it for both sides).
    os.environ.setdefault(
        "TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_cache_", dir=args.outdir)
    )
    start = time.perf_counter()
    import torch
    import triton

    from klaraptor.backends.triton_backend import fix_interpreter_index
    from klaraptor.core.provenance import stamp

    fix_interpreter_index()

    cases = _cases()
    wanted = [k for k in args.kernels.split(",") if k]
    out: dict[str, Any] = {
        "provenance": stamp(
            "PYTHONPATH=src python benchmarks/bench_triton.py " + " ".join(sys.argv[1:]),
            gpu=torch.cuda.get_device_name() if DEVICE == "cuda" else "none (--smoke: interpreter)",
            triton=triton.__version__,
            torch=torch.__version__,
        ),
        "settings": {"warmup_ms": args.warmup, "rep_ms": args.rep, "shapes": args.shapes},
        "tutorial_sources": (HERE / "triton_tutorials" / "PROVENANCE.md").read_text(),
        "kernels": {},
        "failures": {},
    }
    path = Path(args.outdir) / "triton.json"

    def write() -> None:
        ok = [v for v in out["kernels"].values() if "geomean_r" in v]
        all_r = [s["r"] for v in ok for s in v["shapes"] if s["scored"]]
        k_s = sum(v["tuning"]["klaraptor_s"] for v in ok)
        t_s = sum(v["tuning"]["autotune_s"] for v in ok)
        out["summary"] = {
            "geomean_r": _geomean(all_r),
            "max_r": max((r for r in all_r if math.isfinite(r)), default=math.nan),
            "tuning_time_ratio": k_s / t_s if t_s else math.nan,
            "select_us_max": max((v["select_us"]["max"] for v in ok), default=math.nan),
            "shapes_scored": len(all_r),
            "shapes_left_out": sum(len(v["shapes_left_out"]) for v in ok),
            "kernels_done": sorted(out["kernels"]),
            "seconds": time.perf_counter() - start,
        }
        path.write_text(json.dumps(out, indent=1, default=str))

    for case in cases.CASES:
        if wanted and case.name not in wanted:
            continue
        if time.perf_counter() - start > args.limit:
            out["failures"][case.name] = f"not started: past --limit {args.limit} s"
            write()
            continue
        t0 = time.perf_counter()
        try:
            res = run_case(case, cases, args, out)
            res["seconds"] = time.perf_counter() - t0
            out["kernels"][case.name] = res
            print(
                f"{case.name}: geomean r {res['geomean_r']:.4f} max {res['max_r']:.3f} "
                f"({res['shapes_scored']} of {res['workload_shapes']} shapes scored) "
                f"tuning ratio {res['tuning_time_ratio']:.3f} select "
                f"{res['select_us']['median']:.1f} us ({res['seconds']:.1f} s)",
                flush=True,
            )
        except Exception as exc:
            out["failures"][case.name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"[
                -4000:
            ]
            print(f"{case.name}: FAILED {type(exc).__name__}: {exc}", flush=True)
        write()
    print(json.dumps(out["summary"], indent=1))
    return 0 if not out["failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
