"""Racing: measure every candidate at one size cheaply, then only the contenders precisely.

A sweep of every configuration at one data size needs one thing precisely: which of them are
fastest, and by how much. A candidate that is clearly slower than the leader after a few samples
cannot become the choice, so timing it to the same precision as the leader wastes the GPU (a
fixed floor of 20 ms of kernel time per point made a sweep cost 30-50 ms per candidate). Racing
(in the spirit of irace's and of successive halving):

1. every candidate gets a first estimate: `first_repeats` samples, at least `first_ms` of kernel
   time, its median with an interquartile interval [q1, q3];
2. the leader is the candidate with the smallest median; a candidate is a contender while its
   interval, widened by the device's noise band, overlaps the leader's:
   q1 · (1 − band) ≤ q3_leader · (1 + band);
3. every contender not yet measured precisely is measured with the full protocol, and 2-3 are
   repeated (the leader may change) until no contender lacks the full measurement; with
   `max_full`, only that many in all, the best first estimates first (a search's measurement).

Every candidate keeps a time (the model anchors on all of them); only the contenders, whose order
decides the choice, get the full precision. Each value records which stage it came from
(`race_stage`: "first" or "full"). The rule is pure (`race`), so it is tested without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

# The timing noise band of a device until its first collection measured one (klaraptor.collect.
# noise, twice the device's median relative IQR): the median relative IQR of the
# recorded H200 training timings is 0.29 % (issue 33); twice that keeps the race conservative.
DEFAULT_BAND = 0.006
# Fields of the first estimate a full measurement keeps (it is not checked again).
CARRIED = ("check",)


@dataclass(frozen=True)
class RaceSettings:
    """How a race measures: the first estimate's kernel time and samples, the noise band, and
    how many refinement rounds at most."""

    first_ms: float = 1.0
    first_repeats: int = 3
    band: float = DEFAULT_BAND
    max_rounds: int = 4
    # At most this many candidates get the full protocol, the best first estimates first (None:
    # every contender). A search that must pick one configuration within a tolerance, not
    # resolve near-ties to the noise band, measures its few best precisely and the rest once.
    max_full: int | None = None

    def __post_init__(self) -> None:
        if self.max_full is not None and self.max_full < 1:
            raise ValueError(f"max_full must be at least 1 (or None), got {self.max_full}")


def interval(value: Mapping[str, Any]) -> tuple[float, float, float]:
    """(q1, median, q3) of a timing value (ms per launch)."""
    med = float(value["median_ms"])
    return float(value.get("q1_ms", med)), med, float(value.get("q3_ms", med))


def contenders(values: Mapping[K, Mapping[str, Any]], band: float) -> list[K]:
    """The candidates whose interval, widened by the band, overlaps the leader's (the leader
    first)."""
    if not values:
        return []
    leader = min(values, key=lambda k: interval(values[k])[1])
    upper = interval(values[leader])[2] * (1.0 + band)
    out = [leader]
    out += [k for k in values if k != leader and interval(values[k])[0] * (1.0 - band) <= upper]
    return out


def race(
    keys: Sequence[K],
    first: Callable[[K], Mapping[str, Any] | None],
    full: Callable[[K], Mapping[str, Any] | None],
    settings: RaceSettings = RaceSettings(),  # noqa: B008 - frozen
) -> dict[K, dict[str, Any] | None]:
    """Race `keys` (module docstring): `first(k)` and `full(k)` measure candidate k cheaply and
    precisely (None: the measurement failed; a failed candidate leaves the race). Returns each
    candidate's final value with its `race_stage`, or None where it failed."""
    out: dict[K, dict[str, Any] | None] = {}
    for k in keys:
        v = first(k)
        out[k] = None if v is None else {**v, "race_stage": "first"}
    full_left = math.inf if settings.max_full is None else settings.max_full
    for _ in range(max(1, settings.max_rounds)):
        alive = {k: v for k, v in out.items() if v is not None}
        todo = [k for k in contenders(alive, settings.band) if alive[k]["race_stage"] == "first"]
        if len(todo) > full_left:
            todo = sorted(todo, key=lambda k: interval(alive[k])[1])[: int(full_left)]
        if not todo:
            break
        full_left -= len(todo)
        for k in todo:
            v = full(k)
            first_value = out[k] or {}
            # What only the first estimate did (the output check) stays with the point.
            kept = {key: first_value[key] for key in CARRIED if key in first_value}
            out[k] = None if v is None else {**kept, **v, "race_stage": "full"}
    return out


__all__ = ["DEFAULT_BAND", "RaceSettings", "contenders", "interval", "race"]
