"""SNOWPACK's evaluation (paper §5) on the recorded H200 suites, and its training command.

Both recorded suites (PolyBench and Rodinia-style, 44 kernels, 25 benchmarks) are pooled:
- unseen kernels: for each benchmark (application), train on every other benchmark's rows (all
  their sizes) and choose the held-out kernels' blocks at their evaluation sizes;
- unseen sizes: train on every kernel at its training sizes, choose at its evaluation sizes.
With `patterns` every fold of both also trains on the training-only corpus
(`klaraptor.suite.patterns`, 16 kernels, every recorded size; never held out or scored). It is
off by default: validated on the training sizes it did not help (docs/snowpack.md).
Every fold runs the whole training procedure (learner, target and hyper-parameters chosen by
cross-validation on that fold's training rows only). Beside SNOWPACK: OCC (median time over the
max-occupancy blocks, the paper's protocol), tune-once (the best block measured at the largest
training size), `auto` (klaraptor's build from the training sizes) and exhaustive search (S = 0).
`predict_ms` is the mean, over the (kernel, D) pairs, of the wall time of one prediction for a
new D over all candidates (features and regressor; per pair the median of 5 calls). Writes
snowpack.json and snowpack_cdf.png (like the paper's Figure 2).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.models.snowpack.corpus import kernel_rows
from klaraptor.models.snowpack.features import SnowpackError, feature_names
from klaraptor.models.snowpack.learner import (
    LEARNERS,
    Corpus,
    Regressor,
    suboptimality,
)
from klaraptor.models.snowpack.search import SearchSettings, fit_fixed, train
from klaraptor.suite.recorded import (
    RecordedCorpus,
    RecordedDataset,
    recorded_datasets,
    training_only_datasets,
)

if TYPE_CHECKING:
    from klaraptor.store import Store

# Unseen sizes trains once: its search may use every training row.
SIZES = SearchSettings(folds=2, search_rows=10_000, keep=None, bagged=False)
QUICK = SearchSettings(
    max_rows=800,
    svr_max_rows=800,
    search_rows=400,
    folds=2,
    targets=("log_time", "per_wave"),
    views=("all",),
    grids={
        "svr": [{"C": 10.0, "gamma_scale": 0.5, "epsilon": 0.05}],
        "hgb": [{"max_iter": 60, "learning_rate": 0.15, "max_leaf_nodes": 15}],
        "mlp": [{"hidden": [16], "alpha": 0.01, "max_iter": 100}],
    },
    keep=None,
)


def recorded_corpus(
    patterns: bool = False,
) -> tuple[Corpus, np.ndarray, dict[str, RecordedDataset]]:
    """Rows of both recorded suites and, per row, whether its D is a training size; with
    `patterns`, also the training-only corpus, every row of it a training row. Returns the
    evaluated suites' datasets (the corpus is never evaluated)."""
    datasets = recorded_datasets()
    sources = [(list(datasets.values()), False)]
    if patterns:
        sources.append((list(training_only_datasets().values()), True))
    parts, train_mask = [], []
    for group, training_only in sources:
        for kernel in RecordedCorpus(group).timed_kernels():
            c = kernel_rows(kernel)
            spec = kernel.spec
            train_sizes = {spec.size(s) for s in spec.meta["train_sizes"]}
            is_train = [training_only or c.sizes[g][1] in train_sizes for g in c.group]
            train_mask.append(np.array(is_train))
            parts.append(c)
    return Corpus.concat(parts), np.concatenate(train_mask), datasets


def evaluated_benchmarks(c: Corpus) -> list[str]:
    """The benchmarks of `c` a leave-one-out evaluation holds out: all but the training-only
    suites' (whose kernels say `meta["training_only"]`)."""
    from klaraptor import suite

    only = {k for k in set(c.kernel.tolist()) if suite.get(k).meta.get("training_only")}
    return sorted(set(c.bench[~np.isin(c.kernel, list(only))].tolist()))


KERNEL_FOLDS = 4


def kernel_folds(evals: Corpus, n: int = KERNEL_FOLDS, seed: int = 0) -> list[tuple[str, ...]]:
    """The evaluated kernels in `n` seeded random folds (the `kernel_split` scenario)."""
    names = sorted(set(evals.kernel.tolist()))
    order = np.random.default_rng(seed).permutation(len(names))
    return [tuple(sorted(names[i] for i in order[k::n])) for k in range(n)]


def baselines(c: Corpus, is_train: np.ndarray, evals: Corpus) -> dict[str, np.ndarray]:
    """OCC and tune-once S% per evaluated group (groups in np.unique order)."""
    occ_col = feature_names().index("occupancy")
    tune: dict[str, tuple[int, ...]] = {}
    for k in np.unique(c.kernel):
        m = (c.kernel == k) & is_train
        top = m & (c.size_rank == c.size_rank[m].max())
        tune[k] = tuple(c.blocks[top][int(np.argmin(c.ms[top]))])
    occ, once = [], []
    for g in np.unique(evals.group):
        i = np.flatnonzero(evals.group == g)
        t, o = evals.ms[i], evals.X[i, occ_col]
        best = t.min()
        occ.append((float(np.median(t[o == o.max()])) / best - 1) * 100)
        blocks = [tuple(b) for b in evals.blocks[i]]
        k = evals.kernel[i[0]]
        once.append((t[blocks.index(tune[k])] / best - 1) * 100 if tune[k] in blocks else math.nan)
    return {"occ": np.array(occ), "tune_once": np.array(once)}


def auto_from_pairs(path: Path) -> dict[tuple[str, int], float] | None:
    """The default build's S% per (kernel, N) from a report's pairs.json (None without one)."""
    if not path.is_file():
        return None
    pairs = json.loads(path.read_text())
    return {
        (p["kernel"], int(p["N"])): float(p["methods"]["klaraptor"]["S_pct"])
        for rows in pairs.values()
        for p in rows
        if "klaraptor" in p.get("methods", {})
    }


def _predict_times(
    reg: Regressor,
    datasets: dict[str, RecordedDataset],
    kernels: set[str] | None = None,
    reps: int = 5,
) -> list[float]:
    """Wall ms of predicting every candidate for a new D (features + regressor), per (kernel,
    evaluation size) of `kernels` (all by default): the median of `reps` calls after one warm
    call (a median, so that one scheduling stall of the machine is not read as the cost)."""
    from klaraptor import suite
    from klaraptor.models.snowpack.model import Predictor

    times = []
    for data in datasets.values():
        device = data.profile()
        for name, kd in sorted(data.kernels.items()):
            if kernels is not None and name not in kernels:
                continue
            spec = suite.get(name)
            pred = Predictor(spec, device, regressor=reg)
            blocks = sorted({b for _, b in kd.times()})
            for n in spec.meta["eval_sizes"]:
                D = spec.size(n)
                pred.predict_ms(D, blocks)  # warm
                calls = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    pred.predict_ms(D, blocks)
                    calls.append(time.perf_counter() - t0)
                times.append(float(np.median(calls)) * 1e3)
    return times


def _block(s: np.ndarray, base: dict[str, np.ndarray], auto: np.ndarray | None) -> dict[str, Any]:
    def stats(x: np.ndarray) -> tuple[float, float]:
        x = x[np.isfinite(x)]
        return float(np.mean(x)), float(np.median(x))

    done = np.isfinite(s)  # the pairs evaluated (all unless folds were limited)
    out: dict[str, Any] = {"pairs": int(done.sum())}
    out["mean_S_pct"], out["median_S_pct"] = stats(s)
    out["occ_mean_S_pct"], out["occ_median_S_pct"] = stats(base["occ"][done])
    out["tune_once_mean_S_pct"], out["tune_once_median_S_pct"] = stats(base["tune_once"][done])
    if auto is not None:
        out["auto_mean_S_pct"], out["auto_median_S_pct"] = stats(auto[done])
    out["exhaustive_mean_S_pct"] = 0.0
    out["beats_occ"] = bool(out["mean_S_pct"] < out["occ_mean_S_pct"])
    return out


def evaluate(
    settings: SearchSettings | None = None,
    console: Any | None = None,
    auto: Mapping[tuple[str, int], float] | None = None,
    benchmarks: Sequence[str] | None = None,
    patterns: bool = False,
    scenarios: Sequence[str] = ("unseen_kernels", "unseen_sizes"),
) -> dict[str, Any]:
    """The scenarios; returns the snowpack.json document (without provenance). `settings`
    replaces the searches (default: `SearchSettings()` for unseen kernels, `SIZES` for unseen
    sizes); `benchmarks` limits the unseen-kernel folds to those held out; `patterns` adds the
    training-only corpus to every fold's training rows. A third scenario, `kernel_split`, is
    the paper's own protocol (§4): kernels, not benchmarks, held out, so a held-out kernel's
    sibling kernels of the same benchmark train (`KERNEL_FOLDS` seeded random folds, each
    kernel held out once; the paper made one 75:25 split)."""
    c, is_train, datasets = recorded_corpus(patterns)
    device = next(iter(datasets.values())).device_key
    evals = c.subset(~is_train)
    base = baselines(c, is_train, evals)
    groups = np.unique(evals.group)
    pair_keys = [(c.sizes[g][0], c.sizes[g][1].values()[0]) for g in groups]
    # `auto`: the default build's choices, as `klaraptor bench report` scored them.
    auto_s = None if auto is None else np.array([auto.get(k, math.nan) for k in pair_keys])
    every = evaluated_benchmarks(c)
    plans = {
        "unseen_kernels": (
            settings or SearchSettings(),
            [b for b in every if benchmarks is None or b in benchmarks],
        ),
        "unseen_sizes": (settings or SIZES, [None]),
        "kernel_split": (settings or SearchSettings(), kernel_folds(evals)),
    }
    result: dict[str, Any] = {}
    for scenario, (st, folds) in ((k, plans[k]) for k in scenarios):
        t0 = time.perf_counter()
        per = {m: np.full(len(groups), math.nan) for m in ("snowpack", *LEARNERS)}
        kept: list[str] = []
        times: list[float] = []
        for bench in folds:
            if bench is None:
                train_rows, test_rows, kind = is_train, ~is_train, "sizes"
            elif isinstance(bench, tuple):  # kernel_split: these kernels held out
                held = np.isin(c.kernel, bench)
                train_rows, test_rows, kind = ~held, held & ~is_train, "kernels"
            else:
                train_rows, test_rows = c.bench != bench, (c.bench == bench) & ~is_train
                kind = "kernels"
            tr, te = c.subset(train_rows), c.subset(test_rows)
            reg, rep = train(tr, device, kind, st)
            kept.append(f"{reg.learner}/{reg.target}/{reg.view}")
            at = np.searchsorted(groups, np.unique(te.group))
            per["snowpack"][at] = suboptimality(te, reg.predict_log(te.X))
            # Each learner's best candidate (by mean S% alone), refitted: the comparison.
            for learner, cv in rep["learners"].items():
                same = (learner, cv["params"], cv["target"], cv["view"]) == (
                    reg.learner,
                    reg.params,
                    reg.target,
                    reg.view,
                )
                other = (
                    reg
                    if same
                    else fit_fixed(tr, device, learner, cv["params"], cv["target"], cv["view"], st)
                )
                per[learner][at] = suboptimality(te, other.predict_log(te.X))
            times += _predict_times(reg, datasets, set(te.kernel.tolist()))
            if console is not None:
                label = f"{len(bench)} kernels" if isinstance(bench, tuple) else bench or "all"
                console.print(
                    f"  {scenario} {label}: kept {kept[-1]}, "
                    f"S {np.nanmean(per['snowpack'][at]):.1f}%"
                )
        block = _block(per["snowpack"], base, auto_s)
        for learner in LEARNERS:
            if np.isfinite(per[learner]).any():
                block[f"{learner}_mean_S_pct"] = float(np.nanmean(per[learner]))
                block[f"{learner}_median_S_pct"] = float(np.nanmedian(per[learner]))
        learners = [k.split("/")[0] for k in kept]
        block["kept"] = {k: learners.count(k) for k in sorted(set(learners))}
        block["kept_as"] = {k: kept.count(k) for k in sorted(set(kept))}
        block["folds"] = len(folds)
        if scenario == "kernel_split":
            block["kernel_folds"] = [list(f) for f in folds]
        block["predict_ms"] = float(np.mean(times))
        block["predict_ms_median"] = float(np.median(times))
        block["predict_ms_max"] = float(np.max(times))
        block["wall_s"] = time.perf_counter() - t0
        block["per_pair"] = [
            {
                "kernel": k,
                "N": n,
                "snowpack": per["snowpack"][i],
                **{m: per[m][i] for m in LEARNERS},
                "occ": base["occ"][i],
                "tune_once": base["tune_once"][i],
                **({"auto": auto_s[i]} if auto_s is not None else {}),
            }
            for i, (k, n) in enumerate(pair_keys)
        ]
        result[scenario] = block
    result["settings"] = {sc: st.describe() for sc, (st, _) in plans.items()}
    result["device"] = device
    result["training_only_kernels"] = sorted(set(c.kernel[is_train].tolist()) - set(evals.kernel))
    return result


def plot_cdf(result: dict[str, Any], path: Path) -> None:
    """CDF of S% per method, one panel per scenario (like SNOWPACK's Figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, scenario in zip(axes, ("unseen_kernels", "unseen_sizes")):
        rows = result[scenario]["per_pair"]
        for method, style in (
            ("snowpack", "-"),
            ("svr", ":"),
            ("hgb", ":"),
            ("mlp", ":"),
            ("occ", "--"),
            ("tune_once", "-."),
            ("auto", "-."),
        ):
            s = np.array([r[method] for r in rows if method in r], dtype=np.float64)
            s = np.sort(s[np.isfinite(s)])
            if s.size:
                ax.step(s, np.arange(1, s.size + 1) / s.size, style, where="post", label=method)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("suboptimality S (%)")
        ax.set_ylabel("fraction of (kernel, N)")
        ax.set_title(scenario.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("H200: SNOWPACK vs OCC, tune-once, auto (exhaustive search is S = 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_snowpack(
    out: Path,
    console: Any | None = None,
    quick: bool = False,
    auto: Mapping[tuple[str, int], float] | None = None,
    command: str = "klaraptor bench snowpack",
    patterns: bool = False,
) -> dict[str, Any]:
    """Run the evaluation and write snowpack.json and snowpack_cdf.png under `out`; `auto` (the
    default build's S% per (kernel, N)) defaults to the report's pairs.json in `out`."""
    from klaraptor.core.provenance import stamp

    if auto is None:
        auto = auto_from_pairs(out / "pairs.json")
    result = evaluate(QUICK if quick else None, console, auto=auto, patterns=patterns)
    flags = (" --quick" if quick else "") + (" --patterns" if patterns else "")
    result["report"] = stamp(command + flags)
    out.mkdir(parents=True, exist_ok=True)
    (out / "snowpack.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    plot_cdf(result, out / "snowpack_cdf.png")
    if console is not None:
        for sc in ("unseen_kernels", "unseen_sizes"):
            b = result[sc]
            console.print(
                f"{sc}: SNOWPACK mean S {b['mean_S_pct']:.2f}% (median {b['median_S_pct']:.2f}%),"
                f" OCC {b['occ_mean_S_pct']:.2f}%, tune-once {b['tune_once_mean_S_pct']:.2f}%, "
                f"predict {b['predict_ms']:.3f} ms"
            )
    return result


def train_snowpack(
    store: Store | None,
    *,
    recorded: bool = False,
    device: str | None = None,
    quick: bool = False,
    patterns: bool = False,
) -> tuple[Regressor, dict[str, Any]]:
    """Train SNOWPACK from every kernel timed in `store`, or (`recorded`) in the shipped H200
    suites and, with `patterns`, the training-only corpus; `device` names the GPU's profile key
    (default: the store's only one)."""
    from klaraptor.models.snowpack.train import train_from_store
    from klaraptor.store import Store

    settings = QUICK if quick else SearchSettings()
    with tempfile.TemporaryDirectory() as tmp:
        if recorded:
            shipped = list(recorded_datasets().values())
            if patterns:
                shipped += training_only_datasets().values()
            for data in shipped:
                data.to_store(Path(tmp) / "recorded.sqlite").close()
            store = Store(Path(tmp) / "recorded.sqlite", must_exist=True)
        assert store is not None
        profiles = store.device_profiles()
        key = device or (next(iter(profiles)) if len(profiles) == 1 else None)
        if key is None or key not in profiles:
            raise SnowpackError(
                f"name the GPU with --device (the store {store.path} has profiles "
                f"{sorted(profiles)})"
            )
        profile = store.cached_profile(key)
        assert profile is not None
        try:
            return train_from_store(store, profile, settings=settings)
        finally:
            if recorded:
                store.close()


__all__ = [
    "evaluate",
    "baselines",
    "evaluated_benchmarks",
    "kernel_folds",
    "plot_cdf",
    "recorded_corpus",
    "train_snowpack",
    "write_snowpack",
]
