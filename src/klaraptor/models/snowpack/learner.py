"""SNOWPACK's learner: rows of (static + dynamic features -> log time), scikit-learn regressors,
what they predict (the target) and which columns they see (the view).

As the paper (§3.2, §3.5): a support-vector regressor (RBF kernel, standardised features) on the
logarithm of the time. Beside it two stronger learners: gradient-boosted trees
(`HistGradientBoostingRegressor`) and a small multi-layer perceptron (`MLPRegressor`: ReLU units
extrapolate linearly, where trees are flat and an RBF kernel decays to its mean). Which learner,
hyper-parameters, target and view are kept is decided by cross-validation on training rows
(`search.py`).

Targets (natural log of ms, `TARGETS`):
- `log_time`: the paper's.
- `relative`: log time minus its mean over the blocks of the same (kernel, D), which is all the
  argmin depends on; a ridge model of that mean over the columns that are constant within the
  (kernel, D) (static features and the input size) gives the level back.
- `per_wave`, `per_thread`: as `relative`, after removing an exact size-scaling term of the
  block: log ceil(waves) (time grows by whole waves) or log(threads launched) (time per thread).
  The learner then models only what is left, which changes less with D than the time itself.

Views (`VIEWS`): `all` columns, or `bounded`: without the columns that grow with D (log input
size, log threads launched, log grid blocks, log waves, log threads per busy SM), so that sizes
beyond the training ones
are no extrapolation in feature space (the bounded `tail_weight`, `last_wave_fill`, `padding`
and occupancy still describe the launch).

A fitted `Regressor` is bytes (`to_bytes`): a JSON header (format, feature set, scikit-learn
version, feature names, learner, target, view, device, what it was trained on) then the pickled
estimators. `from_bytes` checks the header before unpickling: another format, feature set or
scikit-learn version is a `SnowpackError` that says how to retrain, never a silent mix.
"""

from __future__ import annotations

import gzip
import json
import math
import pickle
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import sklearn
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR
from threadpoolctl import threadpool_limits

from klaraptor.core.types import Block, DataSize
from klaraptor.models.snowpack.features import (
    FEATURE_SET,
    RETRAIN,
    SnowpackError,
    feature_matrix,
    feature_names,
    static_names,
)

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store
    from klaraptor.store.records import StaticFeatures

# 3: the blob holds (members, level): the estimators whose predictions are averaged.
BLOB_FORMAT = 3
LEARNERS = ("svr", "hgb", "mlp")
TARGETS = ("log_time", "relative", "per_wave", "per_thread")
VIEWS = ("all", "bounded")
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


# -- targets, views, learners -------------------------------------------------------------------

# Columns that grow with D; the `bounded` view leaves them out.
SIZE_COLUMNS = (
    "log_n",
    "log_total_threads",
    "log_grid_blocks",
    "log_waves",
    "log_threads_per_busy_sm",
)
# Columns constant within one (kernel, D): what the level model of relative targets sees.
GROUP_COLUMNS = (*(f"s_{n}" for n in static_names()), "log_n")
_LN2 = math.log(2.0)


def view_columns(view: str) -> np.ndarray:
    """Indices of the feature columns a learner of `view` sees."""
    names = feature_names()
    if view == "all":
        return np.arange(len(names))
    if view == "bounded":
        return np.array([i for i, n in enumerate(names) if n not in SIZE_COLUMNS])
    raise SnowpackError(f"unknown SNOWPACK view {view!r} (use one of {VIEWS})")


def _group_columns() -> np.ndarray:
    names = feature_names()
    return np.array([names.index(n) for n in GROUP_COLUMNS])


def target_offset(X: np.ndarray, target: str) -> np.ndarray:
    """The exact size-scaling term (natural log) a target removes from log time, per row."""
    if target in ("log_time", "relative"):
        return np.zeros(len(X))
    names = feature_names()
    if target == "per_wave":  # ln ceil(waves) = -ln(tail_weight)
        return -np.log(X[:, names.index("tail_weight")])
    if target == "per_thread":
        return X[:, names.index("log_total_threads")] * _LN2
    raise SnowpackError(f"unknown SNOWPACK target {target!r} (use one of {TARGETS})")


def make_estimator(learner: str, params: Mapping[str, Any], n_features: int, seed: int = 0) -> Any:
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
    if learner == "mlp":
        return make_pipeline(
            StandardScaler(),
            MLPRegressor(
                hidden_layer_sizes=tuple(params["hidden"]),
                alpha=float(params["alpha"]),
                max_iter=int(params.get("max_iter", 300)),
                random_state=seed,
            ),
        )
    raise SnowpackError(f"unknown SNOWPACK learner {learner!r} (use one of {LEARNERS})")


def _rows(c: Corpus, limit: int, seed: int) -> np.ndarray:
    """Training row indices: all, or a seeded random subset of `limit`."""
    n = len(c)
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))


@dataclass
class Fitted:
    """A learner fitted for a target and view: predicts log time (ms) from full feature rows.

    `members`: one estimator, or several of one learner fitted from different random
    initialisations (`fit_rows(seeds=...)`), whose predictions are averaged. A perceptron's
    choice of block moves a lot with its initialisation alone; the average does not."""

    members: tuple[Any, ...]
    level: Any
    target: str
    view: str

    def __post_init__(self) -> None:
        self.members = tuple(self.members)
        self._cols = view_columns(self.view)
        self._group = _group_columns()

    @property
    def estimator(self) -> Any:
        """The first member (the only one unless several seeds were fitted)."""
        return self.members[0]

    def level_line(self, row: np.ndarray) -> tuple[float, float]:
        """A kernel's level as (intercept, slope) in log_n, from one of its feature rows.

        The level model is affine (standardisation, then ridge) and log_n is its only column
        that changes with D, so two evaluations give it exactly: a prediction for a new D then
        needs no call into scikit-learn for the level (each such call costs ~0.2 ms)."""
        if self.level is None:
            return (0.0, 0.0)
        g = np.repeat(row[self._group][None, :], 2, axis=0)
        g[:, -1] = (0.0, 1.0)  # GROUP_COLUMNS ends with log_n
        at0, at1 = self.level.predict(g)
        return float(at0), float(at1 - at0)

    def parameters(self) -> int:
        """The numbers one row's prediction reads, over all members: a perceptron's weights and
        biases, an SVR's support vectors and dual coefficients, a tree ensemble's split features
        and thresholds (two per split) and leaf values."""
        return sum(_parameters(est) for est in self.members)

    def cost_ns(self) -> float:
        """The estimated prediction cost per candidate row in ns (`COST_NS`), from the fitted
        model's size alone: the same on every machine. The cross-validation's tie-break uses it
        (a timed cost made the kept model depend on the machine's load)."""
        return COST_NS["fixed"] + sum(_cost_ns(est) for est in self.members)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fast"}

    def _estimate(self, Xc: np.ndarray) -> np.ndarray:
        """The members' mean prediction on view columns. Standardised perceptrons of one shape
        that share a scaler run as ONE stacked forward pass without sklearn's per-call input
        validation (that validation was 0.45 of the 0.7 ms a 231-candidate call took, and three
        members' separate passes took 3DCONV's call past the 1 ms target); any other estimator
        runs `predict`."""
        if "_fast" not in self.__dict__:
            self.__dict__["_fast"] = _stacked_perceptrons(self.members)
        fast = self.__dict__["_fast"]
        if fast is not None:
            return fast.predict(Xc)
        out = np.zeros(len(Xc))
        # Callers pass finite rows (unlaunchable blocks are left out): skip sklearn's checks.
        with sklearn.config_context(assume_finite=True):
            for est in self.members:
                out += np.asarray(est.predict(Xc), dtype=np.float64)
        return out / len(self.members)

    def predict(self, X: np.ndarray, level_line: tuple[float, float] | None = None) -> np.ndarray:
        """Predicted log time (ms) per row; `level_line` (from `level_line`) when every row is
        of one kernel."""
        out = self._estimate(X[:, self._cols]) + target_offset(X, self.target)
        if self.level is not None:
            if level_line is None:
                with sklearn.config_context(assume_finite=True):
                    out = out + self.level.predict(X[:, self._group])
            else:
                out = out + (level_line[0] + level_line[1] * X[:, self._group[-1]])
        return out


@dataclass(frozen=True)
class StackedPerceptrons:
    """k perceptrons of one shape (ReLU hidden layers, one identity output) that share a
    scaler, as stacked weights: their mean prediction in one batched pass per layer.

    The layers run in float32 (standardisation stays float64): on a small CPU the matrix
    products are most of the call, and float32 makes them cheaper. For the shipped model that
    moves a log-time prediction by at most 1.3e-6 over the 14,222 recorded rows and changes
    the argmin of none of the 338 recorded (kernel, D) groups; the tests hold it to 1e-5."""

    mean: np.ndarray
    scale: np.ndarray
    first: tuple[np.ndarray, np.ndarray]  # (n_features, k*h1), (k*h1,)
    later: tuple[tuple[np.ndarray, np.ndarray], ...]  # per layer (k, h, h'), (k, 1, h')

    _split: dict[bytes, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def predict(self, Xc: np.ndarray) -> np.ndarray:
        k = self.later[-1][0].shape[0]
        z = ((Xc - self.mean) / self.scale).astype(np.float32)
        # One kernel's rows share their static columns: their part of the first layer is one
        # row, computed once (3DCONV: 70 of 83 columns are the same in all 231 rows).
        varying = (z != z[:1]).any(axis=0) if len(z) > 1 else np.ones(z.shape[1], dtype=bool)
        key = varying.tobytes()
        split = self._split.get(key)
        if split is None:
            if len(self._split) >= 16:
                self._split.clear()
            split = self._split[key] = (
                np.ascontiguousarray(self.first[0][varying]),
                np.ascontiguousarray(self.first[0][~varying]),
            )
        h = z[:, varying] @ split[0] + (z[0, ~varying] @ split[1] + self.first[1])
        np.maximum(h, 0.0, out=h)
        h = h.reshape(len(Xc), k, -1).transpose(1, 0, 2)  # (k, rows, h1)
        for i, (w, b) in enumerate(self.later):
            h = np.matmul(h, w) + b
            if i < len(self.later) - 1:
                np.maximum(h, 0.0, out=h)
        return h[:, :, 0].mean(axis=0, dtype=np.float64)


def _stacked_perceptrons(members: Sequence[Any]) -> StackedPerceptrons | None:
    """The members as one `StackedPerceptrons`, or None unless every member is a fitted
    StandardScaler -> MLPRegressor pipeline (ReLU, one output) with the same layer sizes and
    the same scaler."""
    parts = []
    for est in members:
        steps = getattr(est, "steps", None)
        if not steps or len(steps) != 2:
            return None
        scaler, mlp = steps[0][1], steps[1][1]
        if not (
            isinstance(scaler, StandardScaler)
            and isinstance(mlp, MLPRegressor)
            and mlp.activation == "relu"
            and getattr(mlp, "out_activation_", None) == "identity"
            and getattr(mlp, "n_outputs_", 0) == 1
        ):
            return None
        n = int(scaler.n_features_in_)
        mean = np.zeros(n) if scaler.mean_ is None else np.asarray(scaler.mean_, np.float64)
        scale = np.ones(n) if scaler.scale_ is None else np.asarray(scaler.scale_, np.float64)
        parts.append((mean, scale, mlp.coefs_, mlp.intercepts_))
    if not parts:
        return None
    mean, scale, coefs0, _ = parts[0]
    shapes = [w.shape for w in coefs0]
    for m, s, coefs, _ in parts[1:]:
        if not (np.array_equal(m, mean) and np.array_equal(s, scale)):
            return None
        if [w.shape for w in coefs] != shapes:
            return None
    f32 = np.float32
    first = (
        np.ascontiguousarray(np.concatenate([p[2][0] for p in parts], axis=1), dtype=f32),
        np.concatenate([p[3][0] for p in parts]).astype(f32),
    )
    later = tuple(
        (
            np.stack([p[2][i] for p in parts]).astype(f32),
            np.stack([p[3][i] for p in parts])[:, None, :].astype(f32),
        )
        for i in range(1, len(shapes))
    )
    return StackedPerceptrons(mean, scale, first, later)


def fit_rows(
    c: Corpus,
    learner: str,
    params: Mapping[str, Any],
    target: str,
    view: str,
    rows: np.ndarray,
    seeds: int = 1,
    balanced: bool = False,
    bagged: bool = False,
) -> Fitted:
    """`learner` fitted on rows of `c` for `target` and `view`; a perceptron with `seeds` random
    initialisations (members averaged). The other learners are deterministic: one member.
    `balanced`: every (kernel, D) group weighs the same in the loss, as in S% (each row
    1 / its group's size in `c`), instead of by its number of candidate blocks (10 to 231).
    `bagged`: each perceptron member learns from its own bootstrap sample of the training
    benchmarks (drawn with replacement, a benchmark drawn k times weighing k)."""
    if target not in TARGETS:
        raise SnowpackError(f"unknown SNOWPACK target {target!r} (use one of {TARGETS})")
    cols = view_columns(view)
    y = c.y - target_offset(c.X, target)
    level = None
    n = max(int(seeds), 1) if learner == "mlp" else 1
    members = [make_estimator(learner, params, len(cols), seed) for seed in range(n)]
    weight = None
    if balanced:
        _, inv, size = np.unique(c.group, return_inverse=True, return_counts=True)
        weight = 1.0 / size[inv][rows]
        weight /= weight.mean()
    mean = np.zeros_like(y) if target == "log_time" else _group_mean(y, c.group)
    X, r = c.X[rows][:, cols], (y - mean)[rows]
    with threadpool_limits(THREADS), warnings.catch_warnings():
        # A perceptron stopped at max_iter is still a fitted model; CV judges it.
        warnings.simplefilter("ignore", ConvergenceWarning)
        for i, est in enumerate(members):
            if bagged and learner == "mlp":
                keep, w = _bootstrap(c.bench[rows], weight, i)
                _fit_weighted(est, X[keep], r[keep], w)
            else:
                _fit_weighted(est, X, r, weight)
        if target != "log_time":
            level = make_pipeline(StandardScaler(), Ridge(alpha=1.0))
            _fit_weighted(level, c.X[rows][:, _group_columns()], mean[rows], weight)
    for est in members:
        _drop_training_state(est)
    return Fitted(tuple(members), level, target, view)


def _bootstrap(
    bench: np.ndarray, weight: np.ndarray | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a bootstrap sample of the benchmarks (seeded) and their weights: `weight`
    (else 1) times how often each row's benchmark was drawn."""
    names, inv = np.unique(bench, return_inverse=True)
    draws = np.random.default_rng(1000 + seed).integers(0, len(names), len(names))
    times = np.bincount(draws, minlength=len(names))[inv]
    keep = np.flatnonzero(times > 0)
    return keep, (times if weight is None else weight * times)[keep].astype(np.float64)


def _fit_weighted(est: Any, X: np.ndarray, y: np.ndarray, weight: np.ndarray | None) -> None:
    """`est.fit`, with per-row weights for the final step when given (pipelines route them)."""
    if weight is None:
        est.fit(X, y)
    elif hasattr(est, "steps"):
        est.fit(X, y, **{f"{est.steps[-1][0]}__sample_weight": weight})
    else:
        est.fit(X, y, sample_weight=weight)


# Prediction cost per candidate row in ns, on one thread: a fixed part (features, scaling, the
# level line) and per member what it scales with: a perceptron's stacked float32 pass per weight,
# an SVR per stored number (libsvm's kernel loop), trees per tree (sklearn's predictor walks every
# tree for each row, whatever its leaves). Fitted by relative least squares to every grid entry
# timed on 256 rows, in two runs on the 2-core CPU; a third run (`benchmarks/
# bench_snowpack_predict.py --learners-only`, `results/h200/snowpack_cost_model.json`) timed
# 0.86-1.36x these estimates, and timings of one entry moved up to 1.6x between runs. Only
# ratios matter.
COST_NS: dict[str, float] = {"fixed": 470.0, "mlp": 0.027, "svr": 0.89, "hgb": 75.0}


def _cost_ns(est: Any) -> float:
    """A member's part of `Fitted.cost_ns` (without the fixed part)."""
    model = est.steps[-1][1] if hasattr(est, "steps") else est
    if isinstance(model, HistGradientBoostingRegressor):
        return COST_NS["hgb"] * model.n_iter_ * model.n_trees_per_iteration_
    return COST_NS["mlp" if isinstance(model, MLPRegressor) else "svr"] * _parameters(est)


def _parameters(est: Any) -> int:
    """`Fitted.parameters` of one fitted estimator (its final step when a pipeline)."""
    model = est.steps[-1][1] if hasattr(est, "steps") else est
    if isinstance(model, MLPRegressor):
        return sum(w.size for w in model.coefs_) + sum(b.size for b in model.intercepts_)
    if isinstance(model, SVR):
        return int(model.support_vectors_.size + model.dual_coef_.size + 1)
    if isinstance(model, HistGradientBoostingRegressor):
        # `_predictors` is private, but where sklearn keeps the trees (its `n_iter_` reads it).
        trees = model._predictors
        is_leaf = [tree.nodes["is_leaf"].astype(bool) for per_iter in trees for tree in per_iter]
        return sum(int(2 * (~leaf).sum() + leaf.sum()) for leaf in is_leaf)
    raise SnowpackError(f"cannot count the parameters of {type(model).__name__}")


def _drop_training_state(est: Any) -> None:
    """Drop what only further training reads (a perceptron's optimiser moments, twice its
    weights), so a stored model is its weights."""
    mlp = est.steps[-1][1] if hasattr(est, "steps") else est
    if isinstance(mlp, MLPRegressor) and hasattr(mlp, "_optimizer"):
        mlp._optimizer = None


def _group_mean(v: np.ndarray, group: np.ndarray) -> np.ndarray:
    _, inv = np.unique(group, return_inverse=True)
    return (np.bincount(inv, weights=v) / np.bincount(inv))[inv]


def suboptimality(c: Corpus, pred_log: np.ndarray) -> np.ndarray:
    """S% of the argmin of the predictions in every (kernel, D) group of `c`."""
    out = []
    for g in np.unique(c.group):
        idx = np.flatnonzero(c.group == g)
        t = c.ms[idx]
        out.append((t[int(np.argmin(pred_log[idx]))] / t.min() - 1.0) * 100.0)
    return np.asarray(out)


# -- the fitted regressor ------------------------------------------------------------------------


@dataclass
class Regressor:
    """A fitted SNOWPACK model: the learner fitted for its target and view, and what it was made
    with."""

    learner: str
    params: dict[str, Any]
    fitted: Fitted
    device: str
    feature_set: str = FEATURE_SET
    sklearn_version: str = sklearn.__version__
    feature_names: tuple[str, ...] = field(default_factory=feature_names)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.fitted.target

    @property
    def view(self) -> str:
        return self.fitted.view

    def predict_log(
        self, X: np.ndarray, level_line: tuple[float, float] | None = None
    ) -> np.ndarray:
        """Predicted log time (ms) of feature rows (see `Fitted.predict`)."""
        return self.fitted.predict(X, level_line)

    def header(self) -> dict[str, Any]:
        return {
            "format": BLOB_FORMAT,
            "learner": self.learner,
            "params": self.params,
            "members": len(self.fitted.members),
            "target": self.target,
            "view": self.view,
            "device": self.device,
            "feature_set": self.feature_set,
            "sklearn_version": self.sklearn_version,
            "feature_names": list(self.feature_names),
            "info": self.info,
        }

    def to_bytes(self) -> bytes:
        head = json.dumps(self.header(), sort_keys=True).encode()
        body = pickle.dumps((self.fitted.members, self.fitted.level), protocol=5)
        return gzip.compress(head + b"\n" + body, 9)

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
            members, level = pickle.loads(body)  # noqa: S301 - our own model, header checked
            fitted = Fitted(tuple(members), level, head["target"], head["view"])
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is the blob's fault
            raise SnowpackError(
                f"the SNOWPACK model in {where} cannot be loaded ({type(exc).__name__}: {exc}); "
                "retrain it with " + RETRAIN
            ) from None
        return cls(
            learner=head["learner"],
            params=dict(head["params"]),
            fitted=fitted,
            device=head["device"],
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


__all__ = [
    "LEARNERS",
    "TARGETS",
    "VIEWS",
    "Corpus",
    "Fitted",
    "Regressor",
    "check_header",
    "fit_rows",
    "kernel_corpus",
    "make_estimator",
    "save_regressor",
    "suboptimality",
    "target_offset",
    "view_columns",
]


def save_regressor(store: Store, reg: Regressor, name: str = "snowpack") -> int:
    """Keep a fitted regressor in the store (versioned by feature set and scikit-learn)."""
    return store.put_stat_model(
        name, reg.device, reg.feature_set, reg.sklearn_version, reg.header()["info"], reg.to_bytes()
    )
