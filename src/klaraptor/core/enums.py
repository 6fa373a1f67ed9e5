"""The closed vocabularies stages hand each other: what a measurement is, how it ended, and where
a selector's decision came from. StrEnums, so a value is its stored text and compares equal to
it."""

from __future__ import annotations

from enum import StrEnum


class MeasurementKind(StrEnum):
    """What one stored measurement of a (D, configuration) point holds."""

    TIME = "time"  # CUDA-event timing of back-to-back launches (inputs L2-resident when small)
    TIME_COLD = "time_cold"  # the same with the L2 flushed before every sample
    NCU = "ncu"  # raw Nsight Compute counters


class MeasurementStatus(StrEnum):
    """How a measured point ended."""

    OK = "ok"
    FAILED = "failed"  # it ran and failed (crash, timeout, wrong output)
    REJECTED = "rejected"  # refused before running (cannot launch, constraint false)


class HistorySource(StrEnum):
    """Where a selector's decision for a D came from."""

    MODEL = "model"  # the helper program's choice
    REFINED = "refined"  # online refinement measured the model's top candidates and kept the best
    HISTORY = "history"  # an earlier process's refined decision, loaded from the store


__all__ = ["HistorySource", "MeasurementKind", "MeasurementStatus"]
