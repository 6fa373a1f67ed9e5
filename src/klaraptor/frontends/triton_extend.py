"""Training keys a Triton build adds where the given ones never left a config's flat regime.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from klaraptor.core.types import DataSize
from klaraptor.frontends.triton_choice import grid_dims
from klaraptor.models.growth import GrowthCheck, growth_checks

__all__ = [
    "MAX_EXTRA_KEYS",
    "AddedKey",
    "ExtensionOutcome",
    "SizeExtension",
    "flat_check",
    "next_size",
]

# One extra key doubles the parameter's range; two quadruple it. Each costs what one training
# key costs (every config timed once, with the build's warmup/rep); more would turn a build of a
# few small keys into a sweep of large ones.
MAX_EXTRA_KEYS = 2


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

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SizeExtension:
        return cls(
            str(obj["parameter"]),
            tuple(AddedKey.from_dict(a) for a in obj["added"]),
            ExtensionOutcome(obj["outcome"]),
            tuple(GrowthCheck.from_dict(c) for c in obj["checks"]),
            str(obj.get("reason", "")),
        )


def flat_check(
    D: np.ndarray,
    cfg: np.ndarray,
    time_ms: np.ndarray,
    programs: np.ndarray,
    n_cfg: int,
    data_names: Sequence[str],
    parameter: str | None = None,
) -> GrowthCheck | None:
    """The growth check of `parameter` (None: of the key parameter whose check names the most
    flat configs, or the first checked where none does), over the key parameters that do not
    set the program count. None where no parameter can be checked."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    checks = growth_checks(
        D,
        cfg,
        time_ms,
        n_cfg,
        data_names=data_names,
        skip=grid_dims(D, np.asarray(cfg), np.asarray(programs)),
    )
    if parameter is not None:
        return next((c for c in checks if c.parameter == parameter), None)
    if not checks:
        return None
    return max(checks, key=lambda c: len(c.flat))  # max keeps the first of equals


def next_size(sizes: Sequence[DataSize], parameter: str) -> DataSize:
    """The largest training key (by its value of `parameter`, then the product of all values)
    with `parameter` doubled."""
    if not sizes:
        raise ValueError("next_size needs at least one size")

    def order(s: DataSize) -> tuple[int, float]:
        return int(s[parameter]), float(np.prod([max(1, int(v)) for v in s.values()]))

    top = max(sizes, key=order)
    return DataSize(top.names, [v * 2 if n == parameter else v for n, v in top.items()])
