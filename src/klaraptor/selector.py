"""Selector: the launch configuration for a call's data parameters, cached per D.

`select(D)` evaluates the helper program over every candidate once per new D (tens of
microseconds) and then answers from an in-memory cache (a dict lookup). Every new D is also
queued for the store's invocation history, written in batches so the store never sits on the
per-call path; choices refined online (measured on real calls) are persisted the same way and
preferred over the model when a later process starts.
"""

from __future__ import annotations

import atexit
import operator
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from klaraptor.errors import KlaraptorError
from klaraptor.helper import HelperProgram

Block = tuple[int, int, int]
Grid = tuple[int, int, int]
# Pending history rows are written once this many accumulate (and at exit / flush()).
HISTORY_BATCH = 64


@dataclass(frozen=True)
class Selection:
    """The choice for one D: launch grid and block, the model's estimate and its runners-up."""

    D: tuple[int, ...]
    block: Block
    grid: Grid
    predicted_ms: float
    topk: tuple[tuple[Block, float], ...]
    source: str  # "model", or "refined" when measured on real calls
    measured_ms: float | None = None


@dataclass(frozen=True)
class CandidateRow:
    block: Block
    threads: int
    grid: Grid | None
    predicted_ms: float
    outputs: dict[str, float]
    rank: int | None
    excluded: str


class Selector:
    """Chooses blocks for one built kernel; thread-safe; history-backed when given a store."""

    def __init__(
        self,
        helper: HelperProgram,
        *,
        store: Any | None = None,
        device_key: str = "",
        topk: int = 4,
        spec: Any | None = None,
        rejected: Mapping[Block, str] | None = None,
    ) -> None:
        self.helper = helper
        self.store = store
        self.device_key = device_key
        self.k = max(1, int(topk))
        self.spec = spec
        self.rejected = dict(rejected or {})
        self._cache: dict[tuple[int, ...], Selection] = {}
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._names = helper.data_names
        if store is not None:
            self._load_history()
            ref = weakref.ref(self)
            atexit.register(lambda: (s := ref()) is not None and s.flush())

    # -- D handling --------------------------------------------------------------------------

    def key(self, D: Mapping[str, int] | Sequence[int] | int) -> tuple[int, ...]:
        """D as a tuple of ints ordered like the data parameters.

        Accepts a mapping by name, a sequence in order, or a bare integer for a kernel with one
        data parameter; values must be integers (or integral floats such as 4096.0). Anything
        else, or the wrong number of values, raises KlaraptorError.
        """
        names = self._names
        if type(D) is tuple:
            vals: tuple[Any, ...] = D
        elif isinstance(D, Mapping):
            unknown = sorted(str(k) for k in D if k not in names)
            if unknown:
                raise KlaraptorError(
                    f"{self.helper.kernel}: D={dict(D)} has unknown data parameters {unknown} "
                    f"(expected {names})"
                )
            try:
                vals = tuple(D[n] for n in names)
            except KeyError as e:
                raise KlaraptorError(
                    f"{self.helper.kernel}: D={dict(D)} lacks data parameter {e.args[0]!r}"
                ) from None
        elif isinstance(D, (int, float, np.integer, np.floating, np.bool_)):
            vals = (D,)  # a bare value for a kernel with one data parameter
        else:
            try:
                vals = tuple(D)  # type: ignore[arg-type]
            except TypeError:
                raise KlaraptorError(
                    f"{self.helper.kernel}: D={D!r} is not a mapping, a sequence or an integer "
                    f"(data parameters {names})"
                ) from None
        if len(vals) != len(names):
            raise KlaraptorError(
                f"{self.helper.kernel}: D={vals} has {len(vals)} values, expected {len(names)} {names}"
            )
        if len(vals) == 1:
            v = vals[0]
            return vals if type(v) is int and type(vals) is tuple else (self._int(names[0], v),)
        return tuple(v if type(v) is int else self._int(n, v) for n, v in zip(names, vals))

    def _int(self, name: str, v: Any) -> int:
        if type(v) is int:
            return v
        if isinstance(v, (bool, np.bool_)):
            raise KlaraptorError(
                f"{self.helper.kernel}: data parameter {name} must be an integer, got {v!r}"
            )
        try:
            return operator.index(v)
        except TypeError:
            if isinstance(v, (float, np.floating)) and float(v).is_integer():
                return int(v)
        raise KlaraptorError(
            f"{self.helper.kernel}: data parameter {name} must be an integer, got "
            f"{type(v).__name__} {v!r}"
        )

    def _check_range(self, D: tuple[int, ...]) -> None:
        if self.spec is None:
            for n, v in zip(self._names, D):
                if v < 1:
                    raise KlaraptorError(
                        f"{self.helper.kernel}: data parameter {n}={v} must be >= 1"
                    )
            return
        for p, v in zip(self.spec.data, D):
            p.check(v)

    # -- selection ---------------------------------------------------------------------------

    def select(self, D: Mapping[str, int] | Sequence[int] | int) -> Selection:
        """The configuration for D (cached after the first call for that D)."""
        key = D if type(D) is tuple and D in self._cache else self.key(D)
        hit = self._cache.get(key)  # type: ignore[arg-type]
        if hit is not None:
            return hit
        return self._select_new(key)  # type: ignore[arg-type]

    def _select_new(self, D: tuple[int, ...]) -> Selection:
        self._check_range(D)
        top, ms, grid = self.helper.choose(D, self.k)
        if not top:
            raise KlaraptorError(
                f"{self.helper.kernel}: no candidate block is admissible for D={D} "
                f"(see explain({D}) for each candidate's reason)"
            )
        cand = self.helper.candidates
        sel = Selection(
            D=D,
            block=cand[top[0]],
            grid=grid,  # type: ignore[arg-type]
            predicted_ms=ms[0],
            topk=tuple(zip([cand[i] for i in top], ms)),
            source="model",
        )
        with self._lock:
            self._cache[D] = sel
            self._queue(sel)
        return sel

    def grid_for(self, D: tuple[int, ...], block: Block) -> Grid:
        i = self.helper.candidates.index(tuple(block))
        return self.helper.grid(D, i)

    def fix(
        self, D: Mapping[str, int] | Sequence[int] | int, block: Block, measured_ms: float
    ) -> Selection:
        """Pin D to a block measured on real calls (online refinement); persisted as 'refined'."""
        key = self.key(D)
        base = self._cache.get(key) or self._select_new(key)
        pred = dict(base.topk).get(tuple(block), base.predicted_ms)
        sel = Selection(
            D=key,
            block=tuple(block),  # type: ignore[arg-type]
            grid=self.grid_for(key, block),
            predicted_ms=pred,
            topk=base.topk,
            source="refined",
            measured_ms=float(measured_ms),
        )
        with self._lock:
            self._cache[key] = sel
            self._queue(sel)
        return sel

    # -- explain -----------------------------------------------------------------------------

    def explain(self, D: Mapping[str, int] | Sequence[int] | int) -> list[CandidateRow]:
        """Every candidate with the model's diagnostics, its rank, or why it was excluded."""
        key = self.key(D)
        self._check_range(key)
        pred = self.helper.predict(key)
        rank = {int(i): r for r, i in enumerate(pred.order)}
        env_reasons = self._constraint_reasons(key)
        rows = []
        for i, b in enumerate(self.helper.candidates):
            why = ""
            if not pred.admitted[i]:
                why = (
                    env_reasons.get(b) or "not launchable for this D (grid or shared memory limit)"
                )
            elif not pred.valid[i]:
                why = f"prediction is not a finite positive number ({pred.ms[i]!r})"
            g = tuple(int(v) for v in pred.grid[i]) if np.all(np.isfinite(pred.grid[i])) else None
            rows.append(
                CandidateRow(
                    block=b,
                    threads=b[0] * b[1] * b[2],
                    grid=g,  # type: ignore[arg-type]
                    predicted_ms=float(pred.ms[i]),
                    outputs={k: float(v[i]) for k, v in pred.outputs.items()},
                    rank=rank.get(i),
                    excluded=why,
                )
            )
        for b, why in self.rejected.items():
            rows.append(
                CandidateRow(
                    b, b[0] * b[1] * b[2], None, float("nan"), {}, None, f"rejected at build: {why}"
                )
            )
        return rows

    def _constraint_reasons(self, D: tuple[int, ...]) -> dict[Block, str]:
        if self.spec is None:
            return {}
        out: dict[Block, str] = {}
        Dm = dict(zip(self._names, D))
        for b in self.helper.candidates:
            ok, why = self.spec.satisfies_constraints(Dm, b)
            if not ok:
                out[b] = why
        return out

    # -- history -----------------------------------------------------------------------------

    def _queue(self, sel: Selection) -> None:
        if self.store is None:
            return
        self._pending.append(
            {
                "D": sel.D,
                "block": sel.block,
                "grid": sel.grid,
                "predicted_ms": sel.predicted_ms,
                "measured_ms": sel.measured_ms,
                "source": sel.source,
            }
        )
        if len(self._pending) >= HISTORY_BATCH or sel.source == "refined":
            self._flush_locked()

    def flush(self) -> None:
        """Write queued history rows to the store."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending or self.store is None:
            return
        rows, self._pending = self._pending, []
        self.store.record_history(self.helper.kernel, self.device_key, self.helper.model_name, rows)

    def _load_history(self) -> None:
        """Refined choices from earlier processes take precedence over the model."""
        for row in self.store.history(self.helper.kernel, self.device_key, self.helper.model_name):
            get = row.get if isinstance(row, dict) else (lambda k, r=row: getattr(r, k, None))
            if get("source") != "refined":
                continue
            D = tuple(int(v) for v in get("D"))
            block = tuple(int(v) for v in get("block"))
            if block not in self.helper.candidates or len(D) != len(self._names):
                continue
            self._cache[D] = Selection(
                D=D,
                block=block,  # type: ignore[arg-type]
                grid=tuple(int(v) for v in get("grid")),  # type: ignore[arg-type]
                predicted_ms=float(get("predicted_ms") or float("nan")),
                topk=((block, float(get("predicted_ms") or float("nan"))),),  # type: ignore[arg-type]
                source="refined",
                measured_ms=get("measured_ms"),
            )


def format_explain(rows: Sequence[CandidateRow], *, limit: int | None = None) -> str:
    """A readable table of `Selector.explain` rows, ranked candidates first."""
    ranked = sorted((r for r in rows if r.rank is not None), key=lambda r: r.rank)  # type: ignore[arg-type, return-value]
    excluded = [r for r in rows if r.rank is None]
    diag = sorted({k for r in ranked for k in r.outputs} - {"cycles"})
    head = ["rank", "block", "threads", "grid", "pred ms", "cycles", *diag]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in ranked[:limit] if limit else ranked:
        cyc = r.outputs.get("cycles", float("nan"))
        lines.append(
            " | ".join(
                [
                    str(r.rank + 1),
                    str(r.block),
                    str(r.threads),
                    str(r.grid),
                    f"{r.predicted_ms:.4g}",
                    f"{cyc:.4g}",
                ]
                + [f"{r.outputs.get(k, float('nan')):.4g}" for k in diag]
            )
        )
    for r in excluded:
        lines.append(f"excluded {r.block}: {r.excluded}")
    return "\n".join(lines)
