"""The build report and its typed parts: what collection did (`CollectionSummary`, with the
budgeted plan's `PlanSummary` and `PriorOrder`) and how `auto` chose the model
(`ModelSelection`).

Each part's `to_dict()` writes the keys the store and the JSON results have always held, in the
same order, and `from_dict` reads them back, so stored builds and results are unchanged."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from klaraptor.collect.plan import PlanResult
from klaraptor.core.types import DataSchema, DataSize


@dataclass(frozen=True)
class PlanSummary:
    """A budgeted plan as run: its estimated seconds of measurement, tune-once's (one sweep of
    every candidate at the largest training size), the budget's, their ratio, the points per
    kind and the plan's notes."""

    spent_s: float
    tune_once_s: float
    budget_s: float
    ratio: float
    counts: dict[str, Any] = field(default_factory=dict)
    notes: tuple[Any, ...] = ()

    @classmethod
    def of(cls, executed: PlanResult) -> PlanSummary:
        return cls.from_dict(executed.summary())

    def to_dict(self) -> dict[str, Any]:
        return {
            "spent_s": self.spent_s,
            "tune_once_s": self.tune_once_s,
            "budget_s": self.budget_s,
            "ratio": self.ratio,
            "counts": self.counts,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlanSummary:
        return cls(
            spent_s=d.get("spent_s", math.nan),
            tune_once_s=d.get("tune_once_s", math.nan),
            budget_s=d.get("budget_s", math.nan),
            ratio=d.get("ratio", math.nan),
            counts=d.get("counts") or {},
            notes=tuple(d.get("notes") or ()),
        )


@dataclass(frozen=True)
class PriorOrder:
    """The order a prior (e.g. SNOWPACK) gave the sweep at the largest training size: the
    candidate indices and their blocks, of which the first `keep` (None: all) were timed."""

    name: str
    keep: int | None
    order: list[int]
    blocks: list[Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "keep": self.keep, "order": self.order, "blocks": self.blocks}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PriorOrder:
        return cls(d["name"], d.get("keep"), list(d["order"]), list(d["blocks"]))


# The keys of CollectionSummary.to_dict(), in the order they have always been written; a field
# that is None is left out (an unbudgeted collection has only the first three: wall_s, counts,
# ncu; a budgeted one all but those three when it ran over the store's points).
_COLLECTION_KEYS = (
    "budget",
    "cold_timings",
    "prior",
    "wall_s",
    "counts",
    "ncu",
    "measured",
    "worker",
    "plan",
    "plan_wall_s",
)


@dataclass(frozen=True)
class CollectionSummary:
    """What a build's collection did. Measured on a GPU: the wall time of each step (`wall_s`),
    the points per kind and status (`counts`) and the counters' status (`ncu`). Budgeted: the
    budget, why the plan does or skips cold timings, the prior's order, whether the plan ran on
    the GPU (`measured`) or over the store's points, where the workers' time went, the plan as
    run and its wall seconds."""

    wall_s: dict[str, float] | None = None
    counts: dict[str, dict[str, int]] | None = None
    ncu: str | None = None
    budget: float | None = None
    cold_timings: str | None = None
    prior: PriorOrder | None = None
    measured: bool | None = None
    worker: dict[str, Any] | None = None
    plan: PlanSummary | None = None
    plan_wall_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _COLLECTION_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value.to_dict() if hasattr(value, "to_dict") else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CollectionSummary:
        plan, prior = d.get("plan"), d.get("prior")
        return cls(
            wall_s=d.get("wall_s"),
            counts=d.get("counts"),
            ncu=d.get("ncu"),
            budget=d.get("budget"),
            cold_timings=d.get("cold_timings"),
            prior=None if prior is None else PriorOrder.from_dict(prior),
            measured=d.get("measured"),
            worker=d.get("worker"),
            plan=None if plan is None else PlanSummary.from_dict(plan),
            plan_wall_s=d.get("plan_wall_s"),
        )


@dataclass(frozen=True)
class ModelSelection:
    """How `model="auto"` chose (`klaraptor.assemble.model_selection`): the model, why, the
    timing noise band the rule allowed for (None when there was no fold to score) and each
    candidate model's ×2-fold score ({"r", "block", "sizes", "compared"}, or {"error"})."""

    chosen: str
    reason: str
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    noise_band: float | None = None

    def fold_r(self, model: str) -> float | None:
        """`model`'s fold slowdown r, None when it was not scored."""
        return self.scores.get(model, {}).get("r")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"chosen": self.chosen, "reason": self.reason}
        if self.noise_band is not None:
            out["noise_band"] = self.noise_band
        out["scores"] = self.scores
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelSelection:
        return cls(
            chosen=str(d.get("chosen", "")),
            reason=str(d.get("reason", "")),
            scores=dict(d.get("scores") or {}),
            noise_band=d.get("noise_band"),
        )


@dataclass
class BuildReport:
    """What a build did: its training sizes, the model, the wall times, the collection summary
    (None when nothing was collected), the fit report (metrics) and, for `model="auto"`, how the
    model was chosen (stored in the fit report under "model_selection", as always)."""

    sizes: list[DataSize]
    model: str
    fit_wall_s: float
    total_wall_s: float
    collect: CollectionSummary | None = None
    fits: dict[str, Any] = field(default_factory=dict)
    # The driver the GPU ran when the build's data was measured (not part of the device key).
    device_driver: str = ""
    selection: ModelSelection | None = None

    def to_dict(self) -> dict[str, Any]:
        fits = self.fits
        if self.selection is not None:
            fits = {**fits, "model_selection": self.selection.to_dict()}
        return {
            "sizes": [dict(s.items()) for s in self.sizes],
            "model": self.model,
            "fit_wall_s": self.fit_wall_s,
            "total_wall_s": self.total_wall_s,
            "collect": None if self.collect is None else self.collect.to_dict(),
            "fits": fits,
            "device_driver": self.device_driver,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], schema: DataSchema) -> BuildReport:
        fits = dict(d.get("fits") or {})
        selection = fits.pop("model_selection", None)
        collect = d.get("collect")
        return cls(
            sizes=[schema.parse(s) for s in d.get("sizes", [])],
            model=str(d.get("model", "")),
            fit_wall_s=float(d.get("fit_wall_s", float("nan"))),
            total_wall_s=float(d.get("total_wall_s", float("nan"))),
            collect=None if collect is None else CollectionSummary.from_dict(collect),
            fits=fits,
            device_driver=str(d.get("device_driver") or ""),
            selection=None if not selection else ModelSelection.from_dict(selection),
        )
