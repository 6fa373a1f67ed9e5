"""SNOWPACK as a klaraptor model: a block for a kernel that was never measured.

`load_regressor` finds the fitted model: the newest one in the store for this GPU (written by
`klaraptor bench train-snowpack`, trained from every kernel the store has measured), else the
one shipped with the package (trained on the recorded H200 data of both suites). `Predictor`
predicts every candidate's time at any D from the kernel's static features and the exact launch
quantities; `rank_prior(spec, D, blocks)` orders blocks best first (a prior for a build's
measurement plan).

`SnowpackModel` (registry name "snowpack") needs no measurements. Its helper program is the
regressor's predictions distilled into a rational program: at nodes √2 apart over the data
parameter's range, every candidate's predicted time is tabulated, and the program interpolates
linearly between the two nodes around D (a table lookup, so `select` still costs microseconds and
the C/Python exporters work). One data parameter only; `Predictor` works for any D.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources as importlib_resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.types import BLOCK_VARS, Block, DataSize
from klaraptor.helper.program import HelperProgram
from klaraptor.models.base import BUILTIN_TAGS, HelperJob, Model
from klaraptor.models.snowpack.features import (
    RETRAIN,
    CandidateFeatures,
    SnowpackError,
    static_features,
    static_vector,
)
from klaraptor.program import Program, const, maximum, minimum, table, var, where

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.models.snowpack.learner import Regressor
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

NAME = "snowpack"
SHIPPED = "snowpack_h200.bin"
NODE_RATIO = math.sqrt(2.0)


def shipped_path() -> Path:
    return Path(str(importlib_resources.files("klaraptor") / "data" / SHIPPED))


def load_shipped(path: str | Path | None = None) -> Regressor:
    p = Path(path) if path is not None else shipped_path()
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise SnowpackError(
            f"no shipped SNOWPACK model at {p} ({exc.strerror}); train one with " + RETRAIN
        ) from None
    from klaraptor.models.snowpack.learner import Regressor

    return Regressor.from_bytes(blob, f"the shipped file {p}")


def load_regressor(store: Store | None = None, device_key: str | None = None) -> Regressor:
    """The store's newest SNOWPACK model (for `device_key` when given), else the shipped one.

    A shipped model made on another GPU than `device_key` is refused (its choices are that
    GPU's); a stored model of another feature set or scikit-learn version is refused too."""
    # scikit-learn (seconds to import) only once a regressor is needed: reading this model's
    # tags, as every build does, must not pay for it.
    from klaraptor.models.snowpack.learner import Regressor

    if store is not None:
        rec = store.latest_stat_model(NAME, device_key)
        if rec is not None:
            return Regressor.from_bytes(rec.blob, f"store {store.path} (model {rec.id})")
    reg = load_shipped()
    if device_key is not None and reg.device != device_key:
        raise SnowpackError(
            f"the shipped SNOWPACK model was trained on {reg.device!r}, not {device_key!r}, and "
            "the store has none for that GPU; measure some kernels there and train one with "
            + RETRAIN
        )
    return reg


class Predictor:
    """One kernel's SNOWPACK predictions: every block's time at any D. What does not depend on
    D (static features, block shapes, occupancy) is computed once per candidate list."""

    def __init__(
        self,
        spec: KernelSpec,
        device: DeviceProfile,
        *,
        regressor: Regressor | None = None,
        store: Store | None = None,
    ) -> None:
        self.spec = spec
        self.device = device
        self.regressor = regressor or load_regressor(store, device.key)
        self.static = static_features(spec, spec.name, store=store)
        self._sv = static_vector(self.static.features)
        self._candidates: dict[bytes, CandidateFeatures] = {}
        self._level: tuple[float, float] | None = None  # the kernel's level line in log_n

    def features(self, blocks: Sequence[Block]) -> CandidateFeatures:
        """The (cached) feature assembly of a candidate list."""
        arr = np.asarray(blocks, dtype=np.int64).reshape(-1, 3)
        key = arr.tobytes()  # a third of the cost of a tuple key over 231 blocks
        cf = self._candidates.get(key)
        if cf is None:
            if len(self._candidates) >= 8:  # a few candidate lists per kernel at most
                self._candidates.clear()
            cf = CandidateFeatures(self.spec, arr, self.static.features, self.device, self._sv)
            self._candidates[key] = cf
        return cf

    def predict_ms(self, D: DataSize, blocks: Sequence[Block]) -> np.ndarray:
        """Predicted ms per block (NaN where the block cannot launch at D)."""
        X = self.features(blocks).at(D)
        ok = np.isfinite(X).all(axis=1)
        out = np.full(len(X), np.nan)
        if ok.any():
            rows = X[ok]
            if self._level is None:
                self._level = self.regressor.fitted.level_line(rows[0])
            out[ok] = np.exp(self.regressor.predict_log(rows, self._level))
        return out

    def rank(self, D: DataSize, blocks: Sequence[Block]) -> list[Block]:
        """Blocks best first (those that cannot launch last, in their given order)."""
        ms = self.predict_ms(D, blocks)
        key = np.where(np.isfinite(ms), ms, np.inf)
        return [tuple(int(v) for v in blocks[i]) for i in np.argsort(key, kind="stable")]  # type: ignore[misc]


def rank_prior(
    spec: KernelSpec,
    D: Any,
    blocks: Sequence[Block],
    *,
    device: DeviceProfile | None = None,
    store: Store | None = None,
) -> list[Block]:
    """SNOWPACK's ranking of `blocks` at D, best first: a prior for which configurations a
    build's measurement plan should measure first. `device` defaults to the recorded H200."""
    if device is None:
        from klaraptor.device.profile import recorded_profile

        device = recorded_profile("h200")
    return Predictor(spec, device, store=store).rank(spec.size(D), list(blocks))


def _nodes(lo: int, hi: int) -> np.ndarray:
    lo = max(int(lo), 1)
    k = max(1, math.ceil(math.log(hi / lo) / math.log(NODE_RATIO))) if hi > lo else 1
    nodes = np.unique(np.round(lo * NODE_RATIO ** np.arange(k + 1)).astype(np.int64))
    nodes = np.clip(nodes, lo, hi)
    nodes = np.unique(np.append(nodes, hi))
    return nodes if len(nodes) >= 2 else np.array([lo, lo + 1])


def distilled_program(name: str, data_name: str, nodes: np.ndarray, ms: np.ndarray) -> Program:
    """Piecewise-linear interpolation in D of the tabulated `ms[node, candidate]`, as cycles
    need: the output is milliseconds × 1e6 × clock GHz (input `hw_clock_ghz`)."""
    k_nodes, n_cand = ms.shape
    vals = np.where(np.isfinite(ms), ms, np.inf)
    slope = np.zeros_like(vals)
    with np.errstate(invalid="ignore"):
        slope[:-1] = (vals[1:] - vals[:-1]) / np.diff(nodes.astype(np.float64))[:, None]
    slope = np.where(np.isfinite(slope), slope, 0.0)
    n = var(data_name)
    seg = const(0.0)
    for node in nodes[1:-1]:
        seg = seg + where(n >= float(node), 1.0, 0.0)
    seg = maximum(minimum(seg, float(k_nodes - 2)), 0.0)
    idx = seg * float(n_cand) + var("cfg")
    t = table(idx, vals.ravel()) + (n - table(seg, nodes.astype(np.float64))) * table(
        idx, slope.ravel()
    )
    cycles = where(t > 0.0, t * var("hw_clock_ghz") * 1e6, math.inf)
    return Program(
        name,
        [data_name, *BLOCK_VARS, "cfg", "hw_clock_ghz"],
        [("time_ms", t), ("cycles", cycles)],
        ["cycles", "time_ms"],
    )


class SnowpackModel(Model):
    """Registry name ``"snowpack"``: static features + regression, no measurements needed."""

    name = NAME
    tags = BUILTIN_TAGS["snowpack"]

    def __init__(self, regressor: Regressor | None = None, store: Store | None = None) -> None:
        self.regressor = regressor
        self.store = store

    def rank(
        self,
        spec: KernelSpec,
        D: Any,
        candidates: Sequence[Any],
        *,
        device: DeviceProfile,
        store: Store | None,
    ) -> list[Any]:
        """SNOWPACK's predicted order of the candidate blocks at D (`rank_prior`)."""
        return rank_prior(spec, D, candidates, device=device, store=store)

    def static_job(
        self, spec: KernelSpec, device: DeviceProfile, store: Store | None = None
    ) -> HelperJob:
        """The job of a kernel never measured; features and the model then come from `store`."""
        from klaraptor.models.snowpack.train import static_job

        self.store = store
        load_regressor(store, device.key)  # refuses a model of another GPU before any work
        return static_job(spec, device, store)

    def make_helper(self, job: HelperJob) -> tuple[HelperProgram, dict[str, Any]]:
        spec = job.spec
        if len(spec.data) != 1:
            raise SnowpackError(
                f"{spec.name}: the snowpack helper program interpolates over one data parameter; "
                f"this kernel has {len(spec.data)} ({', '.join(spec.data_names)}). Use "
                "klaraptor.models.snowpack.Predictor for its predictions"
            )
        pred = Predictor(spec, job.profile, regressor=self.regressor, store=self.store)
        p = spec.data[0]
        nodes = _nodes(p.lo, p.hi)
        ms = np.stack([pred.predict_ms(spec.size({p.name: int(v)}), job.candidates) for v in nodes])
        program = distilled_program(self.name, p.name, nodes, ms)
        reg = pred.regressor
        report = {
            "learner": reg.learner,
            "params": reg.params,
            "target": reg.target,
            "feature_set": reg.feature_set,
            "sklearn_version": reg.sklearn_version,
            "trained_on": reg.device,
            "training_kernels": len(reg.info.get("kernels", [])),
            "static_source": pred.static.source,
            "nodes": [int(v) for v in nodes],
        }
        helper = job.helper_program(
            self.name,
            program,
            hw={"hw_clock_ghz": job.profile.sm_clock_mhz / 1e3},
            band=0.0,
            info={"snowpack": report, "attributes": job.attrs.to_dict(), "device": job.profile.key},
        )
        return helper, report


__all__ = [
    "NAME",
    "Predictor",
    "SnowpackModel",
    "distilled_program",
    "load_regressor",
    "load_shipped",
    "rank_prior",
    "shipped_path",
]
