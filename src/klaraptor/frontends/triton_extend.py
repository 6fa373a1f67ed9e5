"""A Triton build's training keys: those a first call scales down from its own key
(`scaled_down_keys`), and those a build adds where the given ones never left a config's flat
regime.

After measuring its training keys, a build (`klaraptor.frontends.triton`) asks
`models.growth` whether some configs show no growth with a key parameter while most configs
grow (the key parameters that set the program count are not asked: the waves count their
growth exactly). If so, their growth with that parameter is unidentified, and the model would
extrapolate them flat. The build then measures one more key, the largest training key with that
parameter doubled, and asks again, at most `MAX_EXTRA_KEYS` times: until the rule names no config
(`ExtensionOutcome.GREW`), or the cap is reached (`CAP`), or the next key cannot be made or
measured (`FAILED`). What was added and why is a `SizeExtension`, in the build's report and in
the store beside the kernel's record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from klaraptor.backends.triton_backend import CompiledResources
from klaraptor.core.enums import MeasurementStatus
from klaraptor.core.types import DataSize, ParamValues
from klaraptor.frontends.triton_choice import grid_dims
from klaraptor.models.growth import GrowthCheck, growth_checks
from klaraptor.store import KernelRecord

__all__ = [
    "key_checks",
    "pick_check",
    "MAX_EXTRA_KEYS",
    "AddedKey",
    "ExtensionOutcome",
    "SizeExtension",
    "TrainingPoints",
    "extend_keys",
    "flat_check",
    "next_size",
    "read_points",
    "scaled_down_keys",
]

# One extra key doubles the parameter's range; two quadruple it. Each costs what one training
# key costs (every config timed once, with the build's warmup/rep); more would turn a build of a
# few small keys into a sweep of large ones.
MAX_EXTRA_KEYS = 2
_DEFAULT_SCALES = (16, 8, 4, 2)  # a first call's key divided by these: its training keys


def scaled_down_keys(call_key: Sequence[Any]) -> list[tuple[int, ...]]:
    """A first call's training keys: its key values divided by 16, 8, 4 and 2, rounded down to
    multiples of 16 from 32 up (Triton's integer specialisation then matches larger keys)."""
    out: list[tuple[int, ...]] = []
    for f in _DEFAULT_SCALES:
        vals = []
        for v in call_key:
            v = int(v)
            if v <= 1:
                vals.append(v)
                continue
            s = max(1, v // f)
            vals.append(s - s % 16 if s >= 32 else s)
        if tuple(vals) not in out:
            out.append(tuple(vals))
    return out


_RECORD_KEY = "size_extension"  # where the kernel's store record keeps it


class ExtensionOutcome(StrEnum):
    """How the extension ended."""

    GREW = "grew"  # after the last added key the rule names no config
    CAP = "cap"  # configs still flat after MAX_EXTRA_KEYS added keys
    FAILED = "failed"  # the next key's call could not be made, or no config ran at it


@dataclass(frozen=True)
class AddedKey:
    """One key the build added: the size, and the configs named flat before it was measured."""

    size: DataSize
    flat_before: tuple[int, ...]
    measured: int  # configs timed at it without error

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": dict(self.size),
            "flat_before": list(self.flat_before),
            "measured": self.measured,
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> AddedKey:
        size = dict(obj["size"])
        return cls(
            DataSize(list(size), [int(v) for v in size.values()]),
            tuple(int(c) for c in obj["flat_before"]),
            int(obj["measured"]),
        )


@dataclass(frozen=True)
class SizeExtension:
    """What a build added to its training keys and why (see the module doc). `checks`: the
    rule's verdict on the parameter before each added key and after the last one (or the failed
    attempt): `checks[0]` named the configs that started it."""

    parameter: str
    added: tuple[AddedKey, ...]
    outcome: ExtensionOutcome
    checks: tuple[GrowthCheck, ...]
    reason: str = ""  # why the next key failed (FAILED)

    @property
    def still_flat(self) -> tuple[int, ...]:
        return self.checks[-1].flat if self.checks else ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter,
            "added": [a.to_dict() for a in self.added],
            "outcome": self.outcome.value,
            "still_flat": list(self.still_flat),
            "reason": self.reason,
            "checks": [c.to_dict() for c in self.checks],
        }

    def recorded(self, record: KernelRecord) -> KernelRecord:
        """The kernel's store record with this extension beside its spec."""
        spec = {**record.spec, _RECORD_KEY: self.to_dict()}
        return KernelRecord(record.name, record.fingerprint, record.data_names, spec)

    @classmethod
    def from_record(cls, record: KernelRecord) -> SizeExtension | None:
        """The extension stored with the kernel's record (None where its build added none)."""
        stored = record.spec.get(_RECORD_KEY)
        return cls.from_dict(stored) if isinstance(stored, Mapping) else None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SizeExtension:
        return cls(
            str(obj["parameter"]),
            tuple(AddedKey.from_dict(a) for a in obj["added"]),
            ExtensionOutcome(obj["outcome"]),
            tuple(GrowthCheck.from_dict(c) for c in obj["checks"]),
            str(obj.get("reason", "")),
        )


def key_checks(
    D: np.ndarray,
    cfg: np.ndarray,
    time_ms: np.ndarray,
    programs: np.ndarray,
    n_cfg: int,
    data_names: Sequence[str],
) -> list[GrowthCheck]:
    """The growth checks of the key parameters that do not set the program count."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    grid = grid_dims(D, np.asarray(cfg), np.asarray(programs))
    return growth_checks(D, cfg, time_ms, n_cfg, data_names=data_names, skip=grid)


def pick_check(checks: Sequence[GrowthCheck], parameter: str | None = None) -> GrowthCheck | None:
    """The check of `parameter` (None: the one naming the most flat configs, or the first
    where none does); None where there is none."""
    if parameter is not None:
        return next((c for c in checks if c.parameter == parameter), None)
    if not checks:
        return None
    return max(checks, key=lambda c: len(c.flat))  # max keeps the first of equals


def flat_check(
    D: np.ndarray,
    cfg: np.ndarray,
    time_ms: np.ndarray,
    programs: np.ndarray,
    n_cfg: int,
    data_names: Sequence[str],
    parameter: str | None = None,
) -> GrowthCheck | None:
    """The growth check of `parameter` (`pick_check`) over the key parameters that do not set
    the program count. None where no parameter can be checked."""
    return pick_check(key_checks(D, cfg, time_ms, programs, n_cfg, data_names), parameter)


def next_size(sizes: Sequence[DataSize], parameter: str) -> DataSize:
    """The largest training key (by its value of `parameter`, then the product of all values)
    with `parameter` doubled."""
    if not sizes:
        raise ValueError("next_size needs at least one size")

    def order(s: DataSize) -> tuple[int, float]:
        return int(s[parameter]), float(np.prod([max(1, int(v)) for v in s.values()]))

    top = max(sizes, key=order)
    return DataSize(top.names, [v * 2 if n == parameter else v for n, v in top.items()])


@dataclass
class TrainingPoints:
    """A kernel's stored timings that ran, as the fit and the growth rule read them."""

    D_rows: list[list[int]] = field(default_factory=list)
    cfg_rows: list[int] = field(default_factory=list)
    t_rows: list[float] = field(default_factory=list)
    program_rows: list[float] = field(default_factory=list)
    sizes: list[DataSize] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why the points that did not run failed
    resources: dict[int, CompiledResources] = field(default_factory=dict)

    @property
    def D(self) -> np.ndarray:
        return np.array(self.D_rows, dtype=np.float64).reshape(len(self.D_rows), -1)

    @property
    def cfg(self) -> np.ndarray:
        return np.array(self.cfg_rows, dtype=np.int64)

    @property
    def t(self) -> np.ndarray:
        return np.array(self.t_rows, dtype=np.float64)

    @property
    def programs(self) -> np.ndarray:
        return np.array(self.program_rows, dtype=np.float64)


def read_points(
    measurements: Iterable[Any], params: Sequence[ParamValues], num_warps: Sequence[int]
) -> TrainingPoints:
    """The measurements (the store's `Measurement`s of one kernel) of the configs whose program
    parameters are `params` that ran; `num_warps` per config."""
    index = {pv: i for i, pv in enumerate(params)}
    pts = TrainingPoints()
    for m in measurements:
        i = index.get(m.params)
        if i is None or m.status != MeasurementStatus.OK.value:
            if m.reason:
                pts.reasons.append(m.reason)
            continue
        v = m.value
        if "num_regs" in v and i not in pts.resources:
            pts.resources[i] = CompiledResources(
                int(v["num_regs"]), int(v["shared"]), int(num_warps[i])
            )
        pts.D_rows.append(list(m.D.values()))
        pts.cfg_rows.append(i)
        pts.t_rows.append(float(v["median_ms"]))
        pts.program_rows.append(float(v["programs"]))
        if m.D not in pts.sizes:
            pts.sizes.append(m.D)
    return pts


def extend_keys(
    points: Callable[[], TrainingPoints],
    measure: Callable[[DataSize], int],
    n_cfg: int,
    data_names: Sequence[str],
) -> SizeExtension | None:
    """Add keys while the growth rule names flat configs (see the module doc). `points()` reads
    the training points so far; `measure(size)` times every config at a new key and returns how
    many ran (it raises where the key's call cannot be made). None where the rule names no
    config at the given keys."""
    pts = points()
    check = flat_check(pts.D, pts.cfg, pts.t, pts.programs, n_cfg, data_names)
    if check is None or not check.flat:
        return None
    parameter = check.parameter
    checks, added = [check], []
    outcome, reason = ExtensionOutcome.CAP, ""
    for _ in range(MAX_EXTRA_KEYS):
        size = next_size(pts.sizes, parameter)
        try:
            measured = measure(size)
        except Exception as exc:  # too large for the device, or refused by the kernel
            outcome, reason = ExtensionOutcome.FAILED, f"{size}: {type(exc).__name__}: {exc}"
            break
        added.append(AddedKey(size, check.flat, measured))
        if measured == 0:
            outcome, reason = ExtensionOutcome.FAILED, f"{size}: no config ran"
            break
        pts = points()
        again = flat_check(pts.D, pts.cfg, pts.t, pts.programs, n_cfg, data_names, parameter)
        if again is None:
            break
        check = again
        checks.append(check)
        if not check.flat:
            outcome = ExtensionOutcome.GREW
            break
    return SizeExtension(parameter, tuple(added), outcome, tuple(checks), reason[:500])
