"""SNOWPACK's learner: rows of (static + dynamic features → log time), two scikit-learn
regressors, hyper-parameters and the kept learner chosen by cross-validation on training rows.

As the paper (§3.2, §3.5): a support-vector regressor (RBF kernel, standardised features) on the
logarithm of the time; C, γ and ε by cross-validation. Beside it one stronger learner,
gradient-boosted trees (`HistGradientBoostingRegressor`). Both are tuned on the same folds of
the training rows, and the one whose folds choose better blocks is kept (the criterion is the
mean suboptimality S% of the argmin over each validated (kernel, D), what the model is for; the
mean squared log error breaks ties). The folds follow the question asked: `"kernels"` holds out
whole benchmarks (GroupKFold), `"sizes"` holds out each kernel's largest training sizes and
trains on the smaller ones (forward validation).

A fitted `Regressor` is bytes (`to_bytes`): a JSON header (feature set, scikit-learn version,
feature names, device, what it was trained on) then the pickled estimator. `from_bytes` checks
the header before unpickling: another feature set or scikit-learn version is a `SnowpackError`
that says how to retrain, never a silent mix.
"""

from __future__ import annotations

import gzip
import json
import math
import pickle
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import sklearn
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold, ParameterGrid
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR
from threadpoolctl import threadpool_limits

from klaraptor.models.snowpack.features import (
    FEATURE_SET,
    RETRAIN,
    SnowpackError,
    feature_matrix,
    feature_names,
)
from klaraptor.types import Block, DataSize

if TYPE_CHECKING:
    from klaraptor.device_profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store
    from klaraptor.store.records import StaticFeatures

BLOB_FORMAT = 1
LEARNERS = ("svr", "hgb")
# "log_time": the paper's target. "relative": log time minus its mean over the blocks of the
# same (kernel, D) (what the argmin depends on), plus a ridge model of that mean for the level.
TARGETS = ("log_time", "relative")
# One thread: on a shared machine OpenMP threads in the trees cost 10x more than they save.
THREADS = 1


@dataclass
class Corpus:
    """Training or evaluation rows: one per measured (kernel, D, block)."""

    X: np.ndarray
    ms: np.ndarray
    kernel: np.ndarray  # str
    bench: np.ndarray  # str: the benchmark / application (the unit left out)
    size_rank: np.ndarray  # int: the rank of the row's D among its kernel's sizes (0 smallest)
    group: np.ndarray  # int: one id per (kernel, D)
    blocks: np.ndarray  # (n, 3)
    sizes: list[tuple[str, DataSize]]  # per group id

    @property
    def y(self) -> np.ndarray:
        return np.log(self.ms)

    def group_mean(self) -> np.ndarray:
        """Per row: the mean log time of its (kernel, D) group."""
        y = self.y
        _, inv = np.unique(self.group, return_inverse=True)
        sums = np.bincount(inv, weights=y)
        return (sums / np.bincount(inv))[inv]

    def __len__(self) -> int:
        return len(self.ms)

    def subset(self, mask: np.ndarray) -> Corpus:
        return Corpus(
            self.X[mask],
            self.ms[mask],
            self.kernel[mask],
            self.bench[mask],
            self.size_rank[mask],
            self.group[mask],
            self.blocks[mask],
            self.sizes,
        )

    @staticmethod
    def concat(parts: Sequence[Corpus]) -> Corpus:
        sizes: list[tuple[str, DataSize]] = []
        groups = []
        for p in parts:
            groups.append(p.group + len(sizes))
            sizes += p.sizes
        return Corpus(
            np.vstack([p.X for p in parts]),
            np.concatenate([p.ms for p in parts]),
            np.concatenate([p.kernel for p in parts]),
            np.concatenate([p.bench for p in parts]),
            np.concatenate([p.size_rank for p in parts]),
            np.concatenate(groups),
            np.vstack([p.blocks for p in parts]),
            sizes,
        )


def kernel_corpus(
    spec: KernelSpec,
    static: StaticFeatures,
    device: DeviceProfile,
    points: Mapping[tuple[DataSize, Block], float],
    bench: str,
) -> Corpus:
    """The rows of one kernel from its measured times {(D, block): ms}."""
    by_size: dict[DataSize, list[tuple[Block, float]]] = {}
    for (D, b), ms in points.items():
        if math.isfinite(ms) and ms > 0:
            by_size.setdefault(D, []).append((b, ms))
    sizes = sorted(by_size, key=DataSize.values)
    Xs, mss, ranks, groups, blocks = [], [], [], [], []
    for r, D in enumerate(sizes):
        bl = [b for b, _ in by_size[D]]
        X = feature_matrix(spec, D, bl, static.features, device)
        ok = np.isfinite(X).all(axis=1)
        Xs.append(X[ok])
        mss.append(np.array([t for _, t in by_size[D]])[ok])
        ranks.append(np.full(int(ok.sum()), r))
        groups.append(np.full(int(ok.sum()), r))
        blocks.append(np.array(bl, dtype=np.int64).reshape(-1, 3)[ok])
    n = sum(len(m) for m in mss)
    if n == 0:
        raise SnowpackError(f"{spec.name}: no measured time with a launchable block to learn from")
    return Corpus(
        np.vstack(Xs),
        np.concatenate(mss),
        np.full(n, spec.name, dtype=object),
        np.full(n, bench, dtype=object),
        np.concatenate(ranks),
        np.concatenate(groups),
        np.vstack(blocks),
        [(spec.name, D) for D in sizes],
    )


# -- learners and their hyper-parameter grids ----------------------------------------------------


@dataclass
class SearchSettings:
    """How much the search may cost. The defaults are the report's; tests pass smaller ones."""

    max_rows: int = 2500  # training rows of the final fit (a seeded random subset when more)
    search_rows: int = 1000  # training rows of each cross-validation fit
    folds: int = 2
    targets: tuple[str, ...] = TARGETS
    svr_grid: dict[str, list[Any]] = field(
        default_factory=lambda: {
            "C": [3.0, 30.0],
            "gamma_scale": [0.5],  # γ = gamma_scale / n_features (features standardised)
            "epsilon": [0.05],
        }
    )
    hgb_grid: dict[str, list[Any]] = field(
        default_factory=lambda: {
            "max_iter": [150],
            "learning_rate": [0.1],
            "max_leaf_nodes": [15],
            "min_samples_leaf": [40],
            "l2_regularization": [1.0],
        }
    )
    seed: int = 0


def make_estimator(learner: str, params: Mapping[str, Any], n_features: int) -> Any:
    if learner == "svr":
        gamma = float(params["gamma_scale"]) / n_features
        return make_pipeline(
            StandardScaler(),
            SVR(
                kernel="rbf",
                C=float(params["C"]),
                gamma=gamma,
                epsilon=float(params["epsilon"]),
                cache_size=500,
            ),
        )
    if learner == "hgb":
        return HistGradientBoostingRegressor(random_state=0, early_stopping=False, **params)
    raise SnowpackError(f"unknown SNOWPACK learner {learner!r} (use one of {LEARNERS})")


def _rows(c: Corpus, limit: int, seed: int) -> np.ndarray:
    """Training row indices: all, or a seeded random subset of `limit`."""
    n = len(c)
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))


def fit_rows(
    c: Corpus, learner: str, params: Mapping[str, Any], target: str, rows: np.ndarray
) -> tuple[Any, Any]:
    """(estimator, level estimator or None) fitted on rows of `c` for `target`."""
    if target not in TARGETS:
        raise SnowpackError(f"unknown SNOWPACK target {target!r} (use one of {TARGETS})")
    X, y = c.X[rows], c.y[rows]
    est = make_estimator(learner, params, c.X.shape[1])
    level = None
    with threadpool_limits(THREADS):
        if target == "relative":
            mean = c.group_mean()[rows]
            est.fit(X, y - mean)
            level = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(X, mean)
        else:
            est.fit(X, y)
    return est, level


def predict_rows(est: Any, level: Any, X: np.ndarray) -> np.ndarray:
    with threadpool_limits(THREADS):
        out = np.asarray(est.predict(X), dtype=np.float64)
        if level is not None:
            out = out + level.predict(X)
    return out


def suboptimality(c: Corpus, pred_log: np.ndarray) -> np.ndarray:
    """S% of the argmin of the predictions in every (kernel, D) group of `c`."""
    out = []
    for g in np.unique(c.group):
        idx = np.flatnonzero(c.group == g)
        t = c.ms[idx]
        out.append((t[int(np.argmin(pred_log[idx]))] / t.min() - 1.0) * 100.0)
    return np.asarray(out)


def folds(c: Corpus, kind: str, n_folds: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(train mask, validation mask) pairs over the training rows (see the module docstring)."""
    if kind == "kernels":
        benches = np.unique(c.bench)
        k = min(n_folds, len(benches))
        if k < 2:
            raise SnowpackError("SNOWPACK's cross-validation needs at least two benchmarks")
        codes = np.searchsorted(benches, c.bench)
        for tr, va in GroupKFold(n_splits=k).split(c.X, groups=codes):
            yield np.isin(np.arange(len(c)), tr), np.isin(np.arange(len(c)), va)
    elif kind == "sizes":
        top = {k: c.size_rank[c.kernel == k].max() for k in np.unique(c.kernel)}
        top_rank = np.array([top[k] for k in c.kernel])
        for back in range(min(n_folds, 2)):
            held = c.size_rank == top_rank - back
            train = c.size_rank < top_rank - back
            if held.any() and train.any():
                yield train, held
    else:
        raise SnowpackError(f"unknown validation kind {kind!r} (kernels or sizes)")


def cross_validate(
    c: Corpus,
    learner: str,
    params: Mapping[str, Any],
    target: str,
    kind: str,
    settings: SearchSettings,
) -> dict[str, float]:
    """Mean S% of the argmin and mean squared log error over the validation folds."""
    s_all, se = [], []
    for i, (tr, va) in enumerate(folds(c, kind, settings.folds)):
        train = c.subset(tr)
        est, level = fit_rows(
            train, learner, params, target, _rows(train, settings.search_rows, settings.seed + i)
        )
        val = c.subset(va)
        pred = predict_rows(est, level, val.X)
        s_all.append(suboptimality(val, pred))
        se.append((pred - val.y) ** 2)
    if not s_all:
        raise SnowpackError(f"no validation fold for {kind!r}: too few kernels or sizes to train")
    s = np.concatenate(s_all)
    return {"mean_S_pct": float(s.mean()), "mse_log": float(np.concatenate(se).mean())}


# -- the fitted regressor ------------------------------------------------------------------------


@dataclass
class Regressor:
    """A fitted SNOWPACK model: the estimator and what it was made with."""

    learner: str
    params: dict[str, Any]
    estimator: Any
    device: str
    target: str = "log_time"
    level: Any = None
    feature_set: str = FEATURE_SET
    sklearn_version: str = sklearn.__version__
    feature_names: tuple[str, ...] = field(default_factory=feature_names)
    info: dict[str, Any] = field(default_factory=dict)

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Predicted log time (ms) of feature rows."""
        return predict_rows(self.estimator, self.level, X)

    def header(self) -> dict[str, Any]:
        return {
            "format": BLOB_FORMAT,
            "learner": self.learner,
            "params": self.params,
            "target": self.target,
            "device": self.device,
            "feature_set": self.feature_set,
            "sklearn_version": self.sklearn_version,
            "feature_names": list(self.feature_names),
            "info": self.info,
        }

    def to_bytes(self) -> bytes:
        head = json.dumps(self.header(), sort_keys=True).encode()
        return gzip.compress(
            head + b"\n" + pickle.dumps((self.estimator, self.level), protocol=5), 9
        )

    @classmethod
    def from_bytes(cls, blob: bytes, where: str) -> Regressor:
        try:
            raw = gzip.decompress(blob)
            head_bytes, _, body = raw.partition(b"\n")
            head = json.loads(head_bytes)
        except (OSError, EOFError, ValueError) as exc:
            raise SnowpackError(
                f"the SNOWPACK model in {where} is not readable ({exc}); retrain it with " + RETRAIN
            ) from None
        check_header(head, where)
        try:
            est, level = pickle.loads(body)  # noqa: S301 - our own model, header checked
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is the blob's fault
            raise SnowpackError(
                f"the SNOWPACK model in {where} cannot be loaded ({type(exc).__name__}: {exc}); "
                "retrain it with " + RETRAIN
            ) from None
        return cls(
            learner=head["learner"],
            params=dict(head["params"]),
            estimator=est,
            device=head["device"],
            target=head["target"],
            level=level,
            feature_set=head["feature_set"],
            sklearn_version=head["sklearn_version"],
            feature_names=tuple(head["feature_names"]),
            info=dict(head.get("info") or {}),
        )


def check_header(head: Mapping[str, Any], where: str) -> None:
    """Refuse a model of another format, feature set or scikit-learn version."""
    if head.get("format") != BLOB_FORMAT:
        raise SnowpackError(
            f"the SNOWPACK model in {where} has format {head.get('format')!r}, this klaraptor "
            f"reads {BLOB_FORMAT}; retrain it with " + RETRAIN
        )
    if head.get("feature_set") != FEATURE_SET or list(head.get("feature_names", [])) != list(
        feature_names()
    ):
        raise SnowpackError(
            f"the SNOWPACK model in {where} was trained on feature set "
            f"{head.get('feature_set')!r}; this klaraptor computes {FEATURE_SET!r}, and features "
            "of two versions are never mixed. Retrain it with " + RETRAIN
        )
    if head.get("sklearn_version") != sklearn.__version__:
        raise SnowpackError(
            f"the SNOWPACK model in {where} was saved by scikit-learn "
            f"{head.get('sklearn_version')}, this is scikit-learn {sklearn.__version__} (pickled "
            "models do not carry across versions). Retrain it with " + RETRAIN
        )


def train(
    c: Corpus, device: str, kind: str = "kernels", settings: SearchSettings | None = None
) -> tuple[Regressor, dict[str, Any]]:
    """Tune both learners (and the target) on folds of `c`, keep the best, refit it on all of `c`.

    Returns the kept regressor and a report of every candidate's validation scores.
    """
    settings = settings or SearchSettings()
    t0 = time.perf_counter()
    report: dict[str, Any] = {"validation": kind, "rows": len(c), "learners": {}}
    best: dict[str, tuple[dict[str, Any], str, dict[str, float]]] = {}
    for learner, grid in (("svr", settings.svr_grid), ("hgb", settings.hgb_grid)):
        tried = []
        for target in settings.targets:
            for params in ParameterGrid(grid):
                score = cross_validate(c, learner, params, target, kind, settings)
                tried.append({"params": dict(params), "target": target, **score})
                key = (score["mean_S_pct"], score["mse_log"])
                if learner not in best or key < _key(best[learner][2]):
                    best[learner] = (dict(params), target, score)
        params, target, score = best[learner]
        report["learners"][learner] = {
            "best_params": params,
            "target": target,
            **score,
            "tried": tried,
        }
    kept = min(best, key=lambda k: _key(best[k][2]))
    params, target, _ = best[kept]
    rows = _rows(c, settings.max_rows, settings.seed)
    est, level = fit_rows(c, kept, params, target, rows)
    report.update(kept=kept, fit_rows=int(len(rows)), train_s=time.perf_counter() - t0)
    info = {
        "kernels": sorted(set(c.kernel.tolist())),
        "validation": kind,
        "cv": {k: {"params": v[0], "target": v[1], **v[2]} for k, v in best.items()},
        "fit_rows": int(len(rows)),
    }
    reg = Regressor(kept, params, est, device, target=target, level=level, info=info)
    return reg, report


def _key(score: Mapping[str, float]) -> tuple[float, float]:
    return (score["mean_S_pct"], score["mse_log"])


def fit_fixed(
    c: Corpus,
    device: str,
    learner: str,
    params: Mapping[str, Any],
    target: str,
    settings: SearchSettings,
) -> Regressor:
    """One learner with given hyper-parameters and target, fitted on (a subset of) all of `c`."""
    est, level = fit_rows(c, learner, params, target, _rows(c, settings.max_rows, settings.seed))
    return Regressor(learner, dict(params), est, device, target=target, level=level)


__all__ = [
    "LEARNERS",
    "TARGETS",
    "Corpus",
    "Regressor",
    "SearchSettings",
    "check_header",
    "cross_validate",
    "fit_fixed",
    "folds",
    "kernel_corpus",
    "fit_rows",
    "make_estimator",
    "save_regressor",
    "predict_rows",
    "suboptimality",
    "train",
]


def save_regressor(store: Store, reg: Regressor, name: str = "snowpack") -> int:
    """Keep a fitted regressor in the store (versioned by feature set and scikit-learn)."""
    return store.put_stat_model(
        name, reg.device, reg.feature_set, reg.sklearn_version, reg.header()["info"], reg.to_bytes()
    )
