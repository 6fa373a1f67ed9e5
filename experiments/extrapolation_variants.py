"""Variants of the default build, scored on the recorded suites (CPU), for the variant log in
docs/extrapolation.md.

    .venv/bin/python experiments/extrapolation_variants.py [variant ...] [--jobs N]

Each variant changes one thing of the default build (`klaraptor.build`, model "auto", budget
1.5) and is evaluated like `klaraptor bench report` (klaraptor model-only and online top-k,
tune-once), per suite and overall:
- `default`: the build as shipped;
- `scaling_only`: model "scaling" (no ×2-fold choice between models);
- `hot_only`: no cache regime (no argument footprint, no cold timings);
- `ncu_cold`: the L2-flushed timings replaced by Nsight Compute's gpu__time_duration at L
  (the earlier study's stand-in; kernels without counters at L keep the flushed timings);
- `budget_1`, `budget_3`: the budget at 1 × and 3 × tune-once.
Prints one line per (variant, suite) and writes nothing; results are deterministic.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from klaraptor_bench import evaluate as ev
from klaraptor_bench import report as rp


@contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _hot_only() -> Any:
    from klaraptor.assemble import planned
    from klaraptor.models import scaling_model

    def no_cold(*a: Any, **k: Any) -> tuple[bool, str]:
        return False, "variant hot_only"

    @contextmanager
    def ctx() -> Iterator[None]:
        with _patched(planned, "needs_cold", no_cold):
            with _patched(scaling_model, "argument_footprint", lambda *a, **k: None):
                yield

    return ctx()


def _ncu_cold() -> Any:
    from klaraptor_bench import dataset

    real = dataset.KernelData.cold_times

    def ncu_times(self: Any) -> dict[Any, tuple[float, float, float]]:
        out = dict(real(self))
        L = max(D.values()[0] for D, _ in out) if out else None
        for r in self.ncu:
            D = self.size(r)
            b = tuple(int(v) for v in r[self.n_data : self.n_data + 3])
            if D.values()[0] == L and "gpu__time_duration.sum" in r[-1]:
                ms = r[-1]["gpu__time_duration.sum"] / 1e6
                out[(D, b)] = (ms, ms, ms)
        return out

    @contextmanager
    def ctx() -> Iterator[None]:
        # to_store writes the cold rows from `cold`; rewrite them from ncu_times.
        real_to_store = dataset.RecordedDataset.to_store

        def to_store(self: Any, path: Any, kernels: Any = None) -> Any:
            for name in kernels or self.kernels:
                k = self.kernels[name]
                k.cold = sorted(
                    [*D.values(), *b, t[0], t[1], t[2]] for (D, b), t in ncu_times(k).items()
                )
            return real_to_store(self, path, kernels)

        with _patched(dataset.RecordedDataset, "to_store", to_store):
            yield

    return ctx()


def _provider(model: str = "auto", budget: float = 1.5) -> Callable[[], Any]:
    @contextmanager
    def ctx() -> Iterator[None]:
        def default_providers(m: str = "auto") -> list[Any]:
            return [ev.klaraptor_provider(model, budget=budget), ev.baseline_provider]

        with _patched(rp, "default_providers", default_providers):
            yield

    return ctx


VARIANTS: dict[str, Callable[[], Any]] = {
    "default": _provider(),
    "scaling_only": _provider("scaling"),
    "hot_only": _hot_only,
    "ncu_cold": _ncu_cold,
    "budget_1": _provider(budget=1.0),
    "budget_3": _provider(budget=3.0),
}


def _task(variant: str, suite: str, name: str) -> ev.KernelResult:
    with VARIANTS[variant]():
        rp._DATA.clear()
        return rp._evaluate_task(suite, name, "main")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    tasks = [
        (v, s, n) for v in args.variants for s in rp.SUITES for n in sorted(rp._dataset(s).kernels)
    ]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        done = dict(zip(tasks, pool.map(_task, *zip(*tasks))))
    for v in args.variants:
        by = {s: [done[(v, s, n)] for n in sorted(rp._dataset(s).kernels)] for s in rp.SUITES}
        by["all"] = [r for s in rp.SUITES for r in by[s]]
        for s, rs in by.items():
            pairs = [p for r in rs for p in r.pairs]
            m, k, t = (
                ev.method_stats(pairs, x) for x in ("klaraptor", "klaraptor_topk", "tune_once")
            )
            cost = rp.cost_block(rs)["max_build_over_tune_once"]
            print(
                f"{v:13s} {s:9s} model {m['geomean_r']:.4f} / {m['max_r']:.3f} / "
                f"{m['within_5pct']:.1%} (W/L {m['wins_vs_tune_once']}/{m['losses_vs_tune_once']})"
                f"  top-k {k['geomean_r']:.4f} (k {k.get('mean_k', 1):.1f})  tune-once "
                f"{t['geomean_r']:.4f}  cost max {cost:.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
