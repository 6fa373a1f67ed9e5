"""The typed records the store keeps, and their JSON encodings.

Each record is what one stage hands the store: the kernel's identity (`KernelRecord`), what
collection learned about it on one GPU (`CollectFacts`), the benchmark's ground-truth budget
decisions (`TruthDecision`), one measured point (`Measurement`), a build (`BuildRecord`, with its
rejected blocks) and the selector's decisions (`HistoryRow`). D is always a `DataSize`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from klaraptor.core.enums import HistorySource, MeasurementStatus
from klaraptor.core.errors import SpecError, StoreError
from klaraptor.core.types import Block, Config, DataSize, Grid, KernelAttributes, ParamValues

MEASUREMENT_STATUSES = tuple(MeasurementStatus)
HISTORY_SOURCES = tuple(HistorySource)


def params_text(pv: ParamValues) -> str:
    """A variant's stored key: "ITEMS=4,TILE=16" in the spec's order ("" without parameters)."""
    return ",".join(f"{n}={v}" for n, v in pv.items())


def params_from_text(text: str, names: tuple[str, ...] = ()) -> ParamValues:
    """The inverse of `params_text` (names are checked against `names` when given)."""
    if not text:
        return ParamValues.NONE
    pairs = [part.partition("=") for part in text.split(",")]
    try:
        pv = ParamValues([n for n, _, _ in pairs], [int(v) for _, _, v in pairs])
    except ValueError:
        raise StoreError(f"malformed parameter values {text!r} in the store") from None
    if names and pv.names != names:
        raise StoreError(f"stored parameter values {text!r} do not name {list(names)}")
    return pv


def now() -> float:
    return time.time()


@dataclass(frozen=True)
class KernelRecord:
    """A kernel's identity: its name, the fingerprint of its spec, its data parameter names
    (which order every stored D) and the spec's JSON-safe description (`KernelSpec.to_summary`)."""

    name: str
    fingerprint: str
    data_names: tuple[str, ...]
    spec: dict[str, Any] = field(default_factory=dict, compare=False)
    updated: float = field(default_factory=now, compare=False)


@dataclass(frozen=True)
class CollectFacts:
    """What collection learned about a kernel on one GPU (the device key is the row's key)."""

    device_name: str = ""
    attributes: KernelAttributes | None = None
    ptx_barriers: int | None = None
    sync_per_warp: float | None = None
    sync_note: str = ""
    ncu_status: str = ""
    ncu_reason: str = ""
    updated: str = ""
    # Attributes not measured but assumed (name -> why), e.g. by an import from Kernel Tuner.
    attributes_assumed: dict[str, str] = field(default_factory=dict)
    # Measurements brought in from other tools: {"tool", "source", "points", "date", ...}.
    imports: tuple[dict[str, Any], ...] = ()
    # Bytes of the array arguments `make_args` builds, per D (values): the argument footprint.
    arg_bytes: tuple[tuple[tuple[int, ...], int], ...] = ()
    # A kernel with program parameters: each compiled variant's own attributes (registers,
    # static shared memory), by `params_text`; `attributes` is then the default variant's.
    variant_attributes: dict[str, KernelAttributes] = field(default_factory=dict)

    def attributes_of(self, pv: ParamValues) -> KernelAttributes | None:
        """The attributes of one compiled variant (the kernel's own without parameters)."""
        if not pv:
            return self.attributes
        return self.variant_attributes.get(params_text(pv))

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.variant_attributes:  # absent without parameters: stored facts stay as they were
            extra["variant_attributes"] = {
                k: a.to_dict() for k, a in sorted(self.variant_attributes.items())
            }
        return {
            **extra,
            "attributes_assumed": dict(self.attributes_assumed),
            "imports": [dict(i) for i in self.imports],
            "arg_bytes": [[list(D), int(b)] for D, b in self.arg_bytes],
            "device_name": self.device_name,
            "attributes": None if self.attributes is None else self.attributes.to_dict(),
            "ptx_barriers": self.ptx_barriers,
            "sync_per_warp": self.sync_per_warp,
            "sync_note": self.sync_note,
            "ncu_status": self.ncu_status,
            "ncu_reason": self.ncu_reason,
            "updated": self.updated,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CollectFacts:
        """From `to_dict`'s form, or from a schema-1 `summary["collect"][device]` entry."""
        if not isinstance(d, Mapping):
            raise StoreError(f"collect facts must be a JSON object, got {type(d).__name__}")
        attrs = d.get("attributes")
        ncu: Mapping[str, Any] = d["ncu"] if isinstance(d.get("ncu"), Mapping) else {}
        sync = d.get("sync_per_warp")
        barriers = d.get("ptx_barriers")
        try:
            return cls(
                device_name=str(d.get("device_name", "")),
                attributes=None if attrs is None else KernelAttributes.from_dict(attrs),
                ptx_barriers=None if barriers is None else int(barriers),
                sync_per_warp=None if sync is None else float(sync),
                sync_note=str(d.get("sync_note", "")),
                ncu_status=str(d.get("ncu_status", ncu.get("status", ""))),
                ncu_reason=str(d.get("ncu_reason", ncu.get("reason", ""))),
                updated=str(d.get("updated", "")),
                attributes_assumed={
                    str(k): str(v) for k, v in (d.get("attributes_assumed") or {}).items()
                },
                imports=tuple(dict(i) for i in d.get("imports") or ()),
                arg_bytes=tuple(
                    (tuple(int(v) for v in D), int(b)) for D, b in d.get("arg_bytes") or ()
                ),
                variant_attributes={
                    str(k): KernelAttributes.from_dict(a)
                    for k, a in (d.get("variant_attributes") or {}).items()
                },
            )
        except (TypeError, ValueError, AttributeError, SpecError) as exc:
            raise StoreError(f"malformed collect facts {dict(d)}: {exc}") from None


@dataclass(frozen=True)
class TruthDecision:
    """The benchmark's decision, made before measuring, whether to time every block at D."""

    D: DataSize
    measure: bool
    estimate_s: float
    reason: str
    decided: str = ""


@dataclass
class Measurement:
    """One measured (or refused) point: kernel × device × D × configuration × kind.

    `value` is a JSON-safe dict (e.g. `{"median_ms": 0.12, "spread": 0.01}` for kind 'time',
    the raw counters for 'ncu'). The configuration is `params` (the compiled variant; none
    without program parameters) and `block`.
    """

    kernel: str
    device: str
    D: DataSize
    block: Block
    kind: str
    status: str
    value: dict[str, Any]
    reason: str = ""
    created: float = field(default_factory=now)
    params: ParamValues = ParamValues.NONE


@dataclass(frozen=True)
class BuildInfo:
    """A build's identity, without its helper program."""

    id: int
    kernel: str
    device: str
    model: str
    created: float


@dataclass(frozen=True)
class BuildRecord(BuildInfo):
    """A build: the helper program (its `to_dict` form), the build report (a JSON document of
    fits, timings and model selection) and the configurations refused at build time with why:
    keyed by block for a kernel without program parameters, else by `Config`."""

    helper: dict[str, Any] = field(default_factory=dict, compare=False)
    report: dict[str, Any] = field(default_factory=dict, compare=False)
    rejected: dict[Block | Config, str] = field(default_factory=dict, compare=False)


@dataclass
class HistoryRow:
    """One selector decision for a data size D (the invocation history)."""

    D: DataSize
    block: Block
    grid: Grid
    predicted_ms: float | None
    measured_ms: float | None = None
    source: str = "model"
    created: float = field(default_factory=now)
    model: str = ""
    params: ParamValues = ParamValues.NONE  # the chosen variant (none without parameters)


@dataclass(frozen=True)
class StaticFeatures:
    """A kernel's static features for a statistical model (SNOWPACK): what the compiler tells
    without running it, under a named feature-set `version`, for one `arch` (e.g. sm_90).
    `source` says where they came from (the recorded ISA file, NVRTC, ...)."""

    kernel: str
    arch: str
    version: str
    features: dict[str, float]
    source: str = ""
    updated: float = field(default_factory=now, compare=False)


@dataclass(frozen=True)
class StatModelRecord:
    """A fitted statistical model (e.g. SNOWPACK's regressor) for one GPU: its pickled bytes,
    the feature-set and scikit-learn versions it was made with (a model is only used with the
    same ones) and a JSON-safe `info` (training kernels, hyper-parameters, validation)."""

    id: int
    name: str
    device: str
    feature_version: str
    sklearn_version: str
    created: float
    info: dict[str, Any] = field(default_factory=dict, compare=False)
    blob: bytes = field(default=b"", compare=False, repr=False)


def _json_default(obj: Any) -> Any:
    # NumPy scalars and arrays reach the store from the collector and the fitter.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def dumps(obj: Any) -> str:
    """The store's canonical JSON: compact, sorted keys, NumPy values as lists."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store a value that is not JSON-serialisable: {exc}") from exc


def opt_float(x: Any) -> float | None:
    if x is None:
        return None
    f = float(x)
    return None if math.isnan(f) else f


__all__ = [
    "HISTORY_SOURCES",
    "MEASUREMENT_STATUSES",
    "params_from_text",
    "params_text",
    "BuildInfo",
    "BuildRecord",
    "CollectFacts",
    "HistoryRow",
    "KernelRecord",
    "Measurement",
    "StatModelRecord",
    "StaticFeatures",
    "TruthDecision",
]
