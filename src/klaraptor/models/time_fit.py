"""The execution time itself as a rational program of D, fitted per configuration.

KLARAPTOR fits low-level metrics and combines them in a performance model. This model applies
the same machinery one level up: the measured execution time of every candidate configuration
is fitted as a rational function of the data parameters (`fit_rational_table`: one function per
configuration, degree chosen by holding out the largest training sizes), and the helper program
evaluates those functions for the call's D. It needs no hardware counters, so a build costs only
the timing pass; what it cannot see is a change of regime beyond the training sizes (e.g. a
working set outgrowing the L2 cache), which is why `auto` validates it against MWP-CWP.

Units: the fitted metric is milliseconds; `cycles` = ms × SM clock, so every model's primary
output is comparable. Occupancy (exact) is an output for the tie rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from klaraptor.core.errors import KlaraptorError
from klaraptor.device.occupancy import HW_INPUTS, occupancy_program
from klaraptor.models.base import BUILTIN_TAGS, KERNEL_QUANTITIES, TemplateModel
from klaraptor.program import Expr, Program, call, const, var, where

__all__ = ["TimeFitModel"]


class TimeFitModel(TemplateModel):
    """Registry name ``"time_fit"``."""

    name = "time_fit"
    metrics = ("time_ms",)
    hardware = ("hw_clock_ghz", *HW_INPUTS)
    tags = BUILTIN_TAGS["time_fit"]
    # Time grows up to N^3 in the suite; one denominator degree allows saturation.
    fit_degrees = (3, 1)

    def point_values(
        self, derived: Mapping[str, float], block: Sequence[int], threads: int, warps: int
    ) -> dict[str, float]:
        if "time_ms" not in derived:
            raise KlaraptorError(f"time_fit needs the measured time of block {tuple(block)}")
        return {"time_ms": float(derived["time_ms"])}

    def program(self, inputs: Sequence[str]) -> Program:
        v = var
        assignments: list[tuple[str, Expr]] = [
            *((q, call(q)) for q in KERNEL_QUANTITIES if q != "blocks"),
            ("active_blocks", call("occupancy")),
            ("occupancy", call("occupancy", output="occupancy")),
            ("time_ms", call("time_ms")),
            # cycles at the SM clock (1 GHz = 1e6 cycles per ms)
            (
                "cycles",
                where(
                    v("active_blocks") > 0,
                    v("time_ms") * v("hw_clock_ghz") * 1e6,
                    const(float("inf")),
                ),
            ),
        ]
        names = list(inputs) + [h for h in self.hardware if h not in inputs]
        return Program(
            self.name,
            names,
            assignments,
            ["cycles", "occupancy", "active_blocks", "time_ms"],
            {"occupancy": occupancy_program()},
        )
