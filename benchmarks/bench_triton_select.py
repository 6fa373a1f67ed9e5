"""Host cost of choosing a config for a NEW key in `klaraptor.triton.autotune` (issue 34's
target: <= 50 us), on the CPU, for the Triton tutorial kernels' config lists and grids.

    PYTHONPATH=src python benchmarks/bench_triton_select.py [OUTDIR] [--keys N] [--rounds R]

No GPU is needed: Triton's interpreter is switched on only so that the tutorial kernels load;
nothing is launched. Each tuner gets a build with a random fitted waves model and random
occupancies on a simulated 132-SM device (the values change the choice, not its cost), then
`select()` runs at N keys it has never seen (the cache emptied before each call), with the grid
lambda of benchmarks/triton_cases.py. Two paths are timed on the same keys:
- `fast`: the select path (`last_select_us`: the model precomputed per build, one call of the
  user's grid over every config at once);
- `per_config`: the reference path kept in the tuner (one grid call and one prediction per
  config, the choice path up to commit cd0d53b), timed with perf_counter around it.
Reports median / p10 / p90 us per call, R rounds (best median kept: the machine is shared).
To time an older klaraptor's select path with the same script, put its src/ first on PYTHONPATH
(e.g. `git archive cd0d53b src | tar -x -C /tmp/old`; `per_config` is then absent).
Writes OUTDIR/bench_triton_select.json (default benchmarks/results/) with provenance.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _cases():
    spec = importlib.util.spec_from_file_location("triton_cases", HERE / "triton_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["triton_cases"] = mod
    spec.loader.exec_module(mod)
    return mod


def _stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
    }


def bench_case(case, cases, keys: int, rounds: int, tmp: str) -> dict:
    from klaraptor.backends.triton_backend import TritonDevice
    from klaraptor.frontends.triton import TritonBuild
    from klaraptor.models.wave_time import FILL, WaveFit
    from klaraptor.triton import autotune

    ns = cases.load_tutorial(case.file)
    configs = case.configs(ns)
    tuned = autotune(
        configs=configs, key=case.key, store=os.path.join(tmp, f"{case.name}.db"), progress=False
    )(case.jit(ns))
    rng = np.random.default_rng(0)
    n, d = len(configs), len(case.key)
    # Every key parameter and the waves' fill in a wave's time: the most terms a build fits.
    fit = WaveFit(
        tuple(case.key),
        (FILL, *range(d)),
        np.full(d, 1024.0),
        4e-3,
        rng.random(n) * 1e-3,
        rng.random((n, d + 1)) * 1e-3,
    )
    tuned._device = TritonDevice("simulated H200 (132 SMs)", 132, (9, 0), True)
    grid, args, kwargs = case.make("cpu", **case.small, **case.small_extra)
    kwargs = dict(kwargs)
    dtypes = tuple(str(v) for v in tuned._key_of(args, kwargs)[d:])
    active = rng.integers(1, 17, n).astype(float)
    build = TritonBuild("bench", "simulated", [], fit, {}, 0, 0.0, True, active)
    tuned._builds[dtypes] = build
    args = list(args)
    tuned.select(*args, grid=grid, **kwargs)  # the grid's first sight: checked both ways
    best: dict[str, list[float]] = {}
    for _ in range(rounds):
        fast, ref = [], []
        for _ in range(keys):
            for name, pos in zip(case.key, tuned._key_pos):
                value = int(rng.integers(1, 1 << 20))
                if pos < len(args):
                    args[pos] = value
                else:  # a key passed by keyword (the attention case's N_CTX)
                    kwargs[name] = value
            tuned._cache.clear()
            tuned.select(*args, grid=grid, **kwargs)
            fast.append(tuned.last_select_us)
            if not hasattr(tuned, "_choose_per_config"):  # an older klaraptor (--src)
                continue
            values = [
                args[p] if p < len(args) else kwargs[k] for k, p in zip(case.key, tuned._key_pos)
            ]
            t0 = time.perf_counter()
            pred = tuned._choose_per_config(build, values, args, kwargs, grid)
            int(np.argmin(pred))
            ref.append((time.perf_counter() - t0) * 1e6)
        for name, xs in (("fast", fast), ("per_config", ref)):
            if not xs:
                continue
            if name not in best or np.median(xs) < np.median(best[name]):
                best[name] = xs
    return {
        "configs": n,
        "key": case.key,
        "grid_vectorises": next(iter(getattr(tuned, "_grid_vectorises", {}).values()), None),
        "select_us": {k: _stats(v) for k, v in best.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?", default=str(HERE / "results"))
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.environ["TRITON_INTERPRET"] = "1"
    import triton

    from klaraptor.core.provenance import stamp

    cases = _cases()
    out = {
        "provenance": stamp(
            "PYTHONPATH=src python benchmarks/bench_triton_select.py " + " ".join(sys.argv[1:]),
            gpu="none (CPU only: select() launches nothing)",
            cpu=platform.processor() or platform.machine(),
            cpus=os.cpu_count(),
            load_average=os.getloadavg(),
            triton=triton.__version__,
        ),
        "settings": {"keys": args.keys, "rounds": args.rounds},
        "kernels": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases.CASES:
            r = bench_case(case, cases, args.keys, args.rounds, tmp)
            out["kernels"][case.name] = r
            s = r["select_us"]
            ref = s.get("per_config", {}).get("median", float("nan"))
            print(
                f"{case.name:14s} {r['configs']:3d} configs  select {s['fast']['median']:7.1f} us"
                f" (p90 {s['fast']['p90']:.1f})  per-config path {ref:7.1f} us",
                flush=True,
            )
    os.makedirs(args.outdir, exist_ok=True)
    path = Path(args.outdir) / "bench_triton_select.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
