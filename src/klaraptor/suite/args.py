"""What the suites' argument factories (`make_args`) share."""

from __future__ import annotations

from typing import Any

import numpy as np


def launch_args(device: bool, *args: Any) -> tuple[Any, ...]:
    """The arguments as given (host), or with every NumPy array copied to the device."""
    if not device:
        return args
    import cupy as cp

    return tuple(cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)


def rand_f32(rng: np.random.Generator, shape: Any, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    """Uniform in [lo, hi), drawn in float64 and rounded to float32 (the patterns' and tunables'
    draw; Rodinia's `_rand` draws float32 directly, so its recorded inputs differ)."""
    return (lo + (hi - lo) * rng.random(shape)).astype(np.float32)


def sizes_meta(
    benchmark: str,
    suite: str,
    complexity: str,
    sizes: tuple[Any, Any, Any],
    flops: str,
    min_bytes: str,
    overwrites: tuple[int, ...],
    layout: str,
) -> dict[str, Any]:
    """The spec meta a suite kernel with training, evaluation and counter sizes (`sizes`) starts
    from: its benchmark and suite, cost formulas, outputs it overwrites and size layout."""
    train, evals, ncu = sizes
    return {
        "benchmark": benchmark,
        "suite": suite,
        "complexity": complexity,
        "train_sizes": train,
        "eval_sizes": evals,
        "ncu_sizes": ncu,
        "flops": flops,
        "min_bytes": min_bytes,
        "overwrites": overwrites,
        "layout": layout,
    }
