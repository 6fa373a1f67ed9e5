"""Selector: the launch configuration for a call's data parameters, cached per D.

`select(D)` evaluates the helper program over every candidate once per new D (tens of
microseconds) and then answers from an in-memory cache (a dict lookup). `refine_blocks(D)` is the
adaptive list online refinement tries for a new D (`adaptive_topk`). Every new D is also
queued for the store's invocation history, written in batches so the store never sits on the
per-call path; choices refined online (measured on real calls) are persisted the same way and
preferred over the model when a later process starts.

Queued rows are never lost: they are written at `flush()`, when a batch is full, when the
Selector is garbage-collected (a `weakref.finalize`, which also runs at exit), and on SIGTERM
(a handler that flushes every live Selector, then runs whatever handler was there before).

A D outside the training sizes is answered all the same (KLARAPTOR extrapolates by design), but
the Selection says how far (`extrapolated`) and the first such D warns (ExtrapolationWarning).
"""

from __future__ import annotations

import operator
import os
import signal
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import ExtrapolationWarning, KlaraptorError, KlaraptorWarning
from klaraptor.core.types import (
    Block,
    Config,
    DataSchema,
    DataSize,
    Grid,
    LaunchConfig,
    ParamValues,
)
from klaraptor.helper.program import HelperProgram
from klaraptor.program import Program
from klaraptor.store import HistoryRow

if TYPE_CHECKING:
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

# Pending history rows are written once this many accumulate (and at flush(), when the
# selector is garbage-collected, and at exit).
HISTORY_BATCH = 64


@dataclass(frozen=True)
class Selection:
    """The choice for one D: launch grid and block (and, for a kernel with program parameters,
    the compiled variant `params`), the model's estimate and the ranking.

    `topk`: the model's best (candidate, predicted ms) pairs in its order — blocks, or Configs
    for a kernel with program parameters — so it includes the chosen one, first when
    `source == "model"` (a refined choice, measured on real calls, may be one of the others). A
    runner-up may be predicted a little faster than the first when within the tie band (see
    `klaraptor select`). `launch` is the whole launch configuration (parameters, grid, block,
    shared memory)."""

    D: DataSize
    block: Block
    grid: Grid
    predicted_ms: float
    topk: tuple[tuple[Any, float], ...]
    source: str  # "model", or "refined" when measured on real calls
    measured_ms: float | None = None
    # How far D lies outside the training sizes ("" inside them), e.g. "N=4096 is 2.7× the
    # largest training size N=1536".
    extrapolated: str = ""
    params: ParamValues = ParamValues.NONE
    smem: int = 0

    @property
    def config(self) -> Config:
        """The chosen configuration (compiled variant and block)."""
        return Config(self.params, self.block)

    @property
    def launch(self) -> LaunchConfig:
        """What to launch: the variant's parameter values, grid, block and dynamic shared memory."""
        return LaunchConfig(self.params, self.block, self.grid, self.smem)


_new_object = object.__new__


def _model_selection(
    D: DataSize,
    chosen: Config,
    grid: Grid,
    predicted_ms: float,
    topk: tuple[tuple[Any, float], ...],
    extrapolated: str,
    smem: int,
) -> Selection:
    """`Selection(..., source="model")`, made without the frozen dataclass's per-field
    `object.__setattr__` calls (a third of the Selector's own cost per new D): the same fields
    and values, so an equal object (a test compares the two)."""
    sel = _new_object(Selection)
    sel.__dict__.update(
        D=D,
        block=chosen.block,
        grid=grid,
        predicted_ms=predicted_ms,
        topk=topk,
        source="model",
        measured_ms=None,
        extrapolated=extrapolated,
        params=chosen.params,
        smem=smem,
    )
    return sel


# What `Selector._smem_at` knows of a kernel's dynamic shared memory besides a table or a program.
_NO_SMEM, _SLOW_SMEM = "none", "slow"

# Most blocks online refinement tries for one D (tune-once's block may come on top).
REFINE_KMAX = 8


def adaptive_topk(
    pred: np.ndarray, band: float, must: int | None, kmax: int = REFINE_KMAX
) -> list[int]:
    """Candidates to try online: the best prediction, then the next ones while their predicted
    gap to the best is within `band` (at most `kmax`), and always `must` (the block measured
    fastest at the largest training size) when it has a prediction. NaN/inf never qualify."""
    score = np.where(np.isfinite(pred), pred, np.inf)
    order = np.argsort(score, kind="stable")
    if not score[order[0]] < np.inf:
        return []
    out = [int(order[0])]
    limit = score[order[0]] * (1.0 + max(float(band), 0.0))
    for c in order[1:]:
        if len(out) >= kmax or not score[c] <= limit:
            break
        out.append(int(c))
    if must is not None and 0 <= must < score.size and must not in out and score[must] < np.inf:
        out.append(int(must))
    return out


@dataclass(frozen=True)
class CandidateRow:
    block: Block
    threads: int
    grid: Grid | None
    predicted_ms: float
    outputs: dict[str, float]
    rank: int | None
    excluded: str
    params: ParamValues = ParamValues.NONE


def _write_history(
    store: Store, kernel: str, device: str, model: str, pending: list[HistoryRow]
) -> None:
    """Write and empty `pending` (the finaliser runs this too, so it must not need the Selector).

    A store closed meanwhile is opened again for the write: closing it must not lose history."""
    if pending:
        rows = list(pending)
        del pending[:]
        try:
            if store.closed:
                with type(store)(store.path, must_exist=True) as again:
                    again.record_history(kernel, device, model, rows)
            else:
                store.record_history(kernel, device, model, rows)
        except BaseException:
            pending[:0] = rows  # not written: keep them for the next try
            raise


def _write_history_at_exit(
    store: Store, kernel: str, device: str, model: str, pending: list[HistoryRow]
) -> None:
    """The finaliser's write: it runs at garbage collection or exit, where an exception has no
    caller to reach, so a failure is reported on stderr in one line."""
    n = len(pending)
    try:
        _write_history(store, kernel, device, model, pending)
    except Exception as exc:  # noqa: BLE001 - reported, never raised into the interpreter's exit
        sys.stderr.write(
            f"klaraptor: {n} history rows of {kernel} were not written to {store.path}: {exc}\n"
        )


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside_klaraptor() -> int:
    """The stacklevel of the first caller outside klaraptor: a warning points at the user's
    line whichever public entry point (Kernel.select, Selector.select, a launch) was called."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


# Every Selector with a store, so that SIGTERM can flush them all.
_LIVE: weakref.WeakSet[Selector] = weakref.WeakSet()
_SIGTERM_LOCK = threading.Lock()
_previous_sigterm: Any = None
_sigterm_installed = False


def _on_sigterm(signum: int, frame: Any) -> None:
    """Flush every live Selector's history, then do what SIGTERM did before klaraptor."""
    for sel in list(_LIVE):
        sel._flush_on_signal()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL (or a handler not installed from Python): terminate as SIGTERM would
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def install_sigterm_handler() -> bool:
    """Install the history-flushing SIGTERM handler, chaining the one in place (once per
    process). Only the main thread may install signal handlers; elsewhere this returns False and
    the finaliser at exit remains the safety net."""
    global _previous_sigterm, _sigterm_installed
    with _SIGTERM_LOCK:
        current = signal.getsignal(signal.SIGTERM)
        if _sigterm_installed and current is _on_sigterm:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or no signals here
            return False
        _previous_sigterm = current
        _sigterm_installed = True
        return True


class Selector:
    """Chooses blocks for one built kernel; thread-safe; history-backed when given a store.

    A cached choice is one dict lookup whatever form D takes: the cache is keyed by the
    DataSize and by the raw forms a caller used for it (an int, a tuple, text); a dict is looked
    up by its values.
    """

    def __init__(
        self,
        helper: HelperProgram,
        *,
        store: Store | None = None,
        device_key: str = "",
        topk: int = 4,
        spec: KernelSpec | None = None,
        rejected: Mapping[Block | Config, str] | None = None,
        trained: Sequence[DataSize] = (),
    ) -> None:
        self.helper = helper
        self.store = store
        self.device_key = device_key
        self.k = max(1, int(topk))
        self.spec = spec
        self.rejected = dict(rejected or {})
        self.schema: DataSchema = spec.data_schema if spec is not None else helper.data_schema
        names = self.schema.names
        self._n = len(names)
        self._ranges = self.schema.ranges
        self._dict_key = operator.itemgetter(*names)
        self._hits: dict[Any, Selection] = {}
        self._pending: list[HistoryRow] = []
        # Reentrant: the SIGTERM handler may flush while the interrupted thread holds it.
        self._lock = threading.RLock()
        # The training range per data parameter (empty when unknown): how far a D extrapolates.
        self._trained = {
            name: (min(v), max(v)) for name, v in zip(names, zip(*(D.values() for D in trained)))
        }
        self._warned_extrapolation = False
        # The dynamic shared memory of every candidate (`_smem_at`), made at the first new D.
        self._smem_table: Any = None
        # A read-only store serves its history but keeps no new rows (said once, here).
        self._keeps_history = store is not None and not store.read_only
        if store is not None and store.read_only:
            self._load_history()
            warnings.warn(
                f"klaraptor: history is not kept for {helper.kernel}: the store {store.path} is "
                f"read-only ({store.read_only_cause})",
                KlaraptorWarning,
                stacklevel=_outside_klaraptor(),
            )
        elif store is not None:
            self._load_history()
            # Pending rows are written when the selector goes away or the process exits.
            self._finalizer = weakref.finalize(
                self,
                _write_history_at_exit,
                store,
                helper.kernel,
                device_key,
                helper.model_name,
                self._pending,
            )
            _LIVE.add(self)
            install_sigterm_handler()

    # -- D handling --------------------------------------------------------------------------

    def size(self, D: Any) -> DataSize:
        """D as a DataSize (DataSizeError when it is not a valid size of this kernel)."""
        return self.schema.parse(D)

    def key(self, D: Any) -> DataSize:
        """Same as `size` (kept for the 0.1 API)."""
        return self.schema.parse(D)

    # -- selection ---------------------------------------------------------------------------

    def select(self, D: Any) -> Selection:
        """The configuration for D (cached after the first call for that D)."""
        if type(D) is dict:
            try:
                key = self._dict_key(D) if len(D) == self._n else None
            except KeyError:  # other names: the slow path says which
                key = None
        elif type(D) is bool:
            key = None  # equal to 0/1 as a key, but not a size: the slow path says so
        else:
            key = D
        try:
            hit = self._hits.get(key)
        except TypeError:  # unhashable (a list, an array): parse it
            hit = None
        if hit is not None:
            return hit
        return self._select_raw(D)

    def _select_raw(self, raw: Any) -> Selection:
        D = self._plain_size(raw) or self.schema.parse(raw)
        sel = self._hits.get(D) or self._select_new(D)
        self._remember(raw, sel)
        return sel

    def _plain_size(self, raw: Any) -> DataSize | None:
        """D from an int (one data parameter) or a tuple of ints inside their ranges, as
        `schema.parse` makes it; None for any other form (parse then decides, and says what is
        wrong)."""
        if type(raw) is int:
            if self._n != 1:
                return None
            lo, hi = self._ranges[0]
            return DataSize(self.schema.names, (raw,)) if lo <= raw <= hi else None
        if type(raw) is not tuple or len(raw) != self._n:
            return None
        for v, (lo, hi) in zip(raw, self._ranges):
            if type(v) is not int or not lo <= v <= hi:
                return None
        return DataSize(self.schema.names, raw)

    def _remember(self, raw: Any, sel: Selection) -> None:
        if type(raw) in (int, str, tuple):
            self._hits[raw] = sel

    def _cache(self, sel: Selection) -> None:
        D = sel.D
        values = D.values()
        self._hits[D] = sel
        self._hits[values] = sel
        if self._n == 1:
            self._hits[values[0]] = sel

    def _select_new(self, D: DataSize) -> Selection:
        top, ms, grid = self.helper.choose(D, self.k)
        if not top:
            raise KlaraptorError(
                f"{self.helper.kernel}: no candidate block is admissible for D={D} "
                f"(see explain for each candidate's reason)"
            )
        keys = self.helper.keys
        far = self.extrapolation(D) if self._trained else ""
        chosen = self.helper.config(top[0])
        sel = _model_selection(
            D,
            chosen,
            grid,  # type: ignore[arg-type]
            ms[0],
            tuple(zip([keys[i] for i in top], ms)),
            far,
            self._smem_at(D, top[0]),
        )
        if far and not self._warned_extrapolation:
            self._warned_extrapolation = True
            warnings.warn(
                ExtrapolationWarning(
                    f"{self.helper.kernel}: extrapolating: {far}; the choice comes from fits "
                    "made at the training sizes (Selection.extrapolated says how far for each D)"
                ),
                stacklevel=_outside_klaraptor(),
            )
        with self._lock:
            self._cache(sel)
            self._queue(sel)
        return sel

    def _smem_at(self, D: DataSize, index: int) -> int:
        """`_smem` of candidate `index`, from the spec's formula specialised once over every
        candidate (a list lookup where the formula does not depend on D; else one call per D
        over the candidates): the same value as `_smem`, which still decides (and words the
        error) where the value is not a byte count."""
        table = self._smem_table
        if table is None:
            table = self._smem_table = self._smem_program()
        if type(table) is list:
            v = table[index]
        elif callable(table):
            v = table(**{n: D[n] for n in table.inputs})[0].item(index)
        else:  # no formula (0), or one that reads what D does not give (_smem says what)
            return 0 if table == _NO_SMEM else self._smem(D, self.helper.config(index))
        if v >= 0.0 and v < 1e300 and v == int(v):
            return int(v)
        return self._smem(D, self.helper.config(index))

    def _smem_program(self) -> Any:
        """`_NO_SMEM` without a spec or a formula; the candidates' values (a list) where the
        formula does not depend on D; else its program over D with every candidate's block and
        parameters folded in (`_SLOW_SMEM` where it reads anything else)."""
        spec = self.spec
        e = None if spec is None else spec.smem_expr()
        if spec is None or e is None:
            return _NO_SMEM
        h = self.helper
        cand = np.array(h.candidates, dtype=np.float64)
        columns: dict[str, Any] = {"bx": cand[:, 0], "by": cand[:, 1], "bz": cand[:, 2]}
        if spec.params:
            for name in spec.param_names:
                columns[name] = np.array([float(c.params[name]) for c in h._configs])
        inputs = tuple(sorted(set(e.variables())))
        fn = Program("dynamic_smem", inputs, [("smem", e)], ("smem",)).specialize(
            {n: v for n, v in columns.items() if n in inputs}, as_tuple=True
        )
        if fn.constant_outputs:
            return [float(v) for v in fn.constant_outputs["smem"]]
        return fn if set(fn.inputs) <= set(spec.data_names) else _SLOW_SMEM

    def _smem(self, D: DataSize, c: Config) -> int:
        """The dynamic shared memory of configuration `c` at D (0 without a spec or a formula)."""
        if self.spec is None or self.spec.dynamic_smem is None:
            return 0
        return self.spec.dynamic_smem_for(D, c.block, c.params if self.spec.params else None)

    def refine_blocks(self, D: Any, kmax: int = REFINE_KMAX) -> list[Any]:
        """The candidates online refinement tries at D (blocks, or Configs with program
        parameters): the model's best, then the next ones while the predicted gap is within the
        model's band at D (its `band` output, else the build's noise band), at most `kmax`, plus
        the one measured fastest at the largest training size. Once per new D (it evaluates
        every output), never on the per-call path."""
        key = self.schema.parse(D)
        pred = self.helper.predict(key)
        ms = np.where(pred.valid, pred.ms, np.inf)
        band_out = pred.outputs.get("band")
        band = float(band_out[0]) if band_out is not None else float(self.helper.band)
        top = adaptive_topk(ms, band, self.helper.tune_once_index, max(1, int(kmax)))
        return [self.helper.keys[i] for i in top]

    def extrapolation(self, D: DataSize) -> str:
        """How far D lies outside the training sizes, in words ("" inside them or unknown)."""
        parts = []
        for name, v in D.items():
            lo, hi = self._trained.get(name, (v, v))
            if v > hi:
                parts.append(f"{name}={v} is {v / hi:.3g}× the largest training size {name}={hi}")
            elif v < lo:
                parts.append(f"{name}={v} is {v / lo:.3g}× the smallest training size {name}={lo}")
        return "; ".join(parts)

    def grid_for(self, D: DataSize, candidate: Block | Config) -> Grid:
        """The grid of a candidate (a block, or a Config with program parameters) at D."""
        return self.helper.grid(D, self.helper.index_of(candidate))

    def fix(self, D: Any, candidate: Block | Config, measured_ms: float) -> Selection:
        """Pin D to a candidate measured on real calls (online refinement); persisted as
        'refined'."""
        key = self.schema.parse(D)
        base = self._hits.get(key) or self._select_new(key)
        c = self.helper.config(self.helper.index_of(candidate))
        pred = dict(base.topk).get(self.helper.keys[self.helper.index_of(candidate)])
        sel = Selection(
            D=key,
            block=c.block,
            grid=self.grid_for(key, candidate),
            predicted_ms=base.predicted_ms if pred is None else pred,
            topk=base.topk,
            source="refined",
            measured_ms=float(measured_ms),
            extrapolated=base.extrapolated,
            params=c.params,
            smem=self._smem(key, c),
        )
        with self._lock:
            # Raw-form entries of the old choice must not outlive it.
            for k in [k for k, v in self._hits.items() if v is base]:
                del self._hits[k]
            self._cache(sel)
            self._queue(sel)
        return sel

    # -- explain -----------------------------------------------------------------------------

    def explain(self, D: Any) -> list[CandidateRow]:
        """Every candidate with the model's diagnostics, its rank, or why it was excluded."""
        key = self.schema.parse(D)
        pred = self.helper.predict(key)
        rank = {int(i): r for r, i in enumerate(pred.order)}
        env_reasons = self._constraint_reasons(key)
        rows = []
        for i, b in enumerate(self.helper.candidates):
            why = ""
            pv = self.helper.config(i).params
            if not pred.admitted[i]:
                why = (
                    env_reasons.get(self.helper.keys[i])
                    or "not launchable for this D (grid or shared memory limit)"
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
                    params=pv,
                )
            )
        for rkey, why in self.rejected.items():
            b, pv = (
                (rkey.block, rkey.params) if isinstance(rkey, Config) else (rkey, ParamValues.NONE)
            )
            rows.append(
                CandidateRow(
                    b,
                    b[0] * b[1] * b[2],
                    None,
                    float("nan"),
                    {},
                    None,
                    f"rejected at build: {why}",
                    params=pv,
                )
            )
        return rows

    def _constraint_reasons(self, D: DataSize) -> dict[Block | Config, str]:
        if self.spec is None:
            return {}
        out: dict[Block | Config, str] = {}
        has_params = bool(self.spec.params)
        for i, b in enumerate(self.helper.candidates):
            pv = self.helper.config(i).params if has_params else None
            ok, why = self.spec.satisfies_constraints(D, b, pv)
            if not ok:
                out[self.helper.keys[i]] = why
        return out

    # -- history -----------------------------------------------------------------------------

    def _queue(self, sel: Selection) -> None:
        if not self._keeps_history:
            return
        self._pending.append(
            HistoryRow(
                D=sel.D,
                block=sel.block,
                grid=sel.grid,
                predicted_ms=sel.predicted_ms,
                measured_ms=sel.measured_ms,
                source=sel.source,
                params=sel.params,
            )
        )
        if len(self._pending) >= HISTORY_BATCH or sel.source == "refined":
            self._flush_locked()

    def flush(self) -> None:
        """Write queued history rows to the store."""
        with self._lock:
            self._flush_locked()

    def _flush_on_signal(self) -> None:
        """flush() for the SIGTERM handler: never blocks for long, never raises."""
        if not self._lock.acquire(timeout=5.0):
            return
        try:
            if self.store is not None:
                _write_history_at_exit(
                    self.store,
                    self.helper.kernel,
                    self.device_key,
                    self.helper.model_name,
                    self._pending,
                )
        finally:
            self._lock.release()

    def _flush_locked(self) -> None:
        if self.store is not None and self._keeps_history:
            _write_history(
                self.store,
                self.helper.kernel,
                self.device_key,
                self.helper.model_name,
                self._pending,
            )

    def _load_history(self) -> None:
        """Refined choices from earlier processes take precedence over the model."""
        assert self.store is not None
        for row in self.store.history(self.helper.kernel, self.device_key, self.helper.model_name):
            if row.source != "refined" or row.D.names != self.schema.names:
                continue
            key: Any = Config(row.params, row.block) if self.helper.param_names else row.block
            if key not in self.helper.keys:
                continue
            pred = float("nan") if row.predicted_ms is None else float(row.predicted_ms)
            self._cache(
                Selection(
                    D=row.D,
                    block=row.block,
                    grid=row.grid,
                    predicted_ms=pred,
                    topk=((key, pred),),
                    source="refined",
                    measured_ms=row.measured_ms,
                    extrapolated=self.extrapolation(row.D) if self._trained else "",
                    params=row.params,
                    smem=self._smem(row.D, Config(row.params, row.block)),
                )
            )


def format_explain(rows: Sequence[CandidateRow], *, limit: int | None = None) -> str:
    """A readable table of `Selector.explain` rows, ranked candidates first."""
    ranked = sorted((r for r in rows if r.rank is not None), key=lambda r: r.rank)  # type: ignore[arg-type, return-value]
    excluded = [r for r in rows if r.rank is None]
    diag = sorted({k for r in ranked for k in r.outputs} - {"cycles"})
    # A model output that is the prediction itself (time_ms) would repeat the pred ms column.
    diag = [
        k
        for k in diag
        if not all(
            np.isclose(r.outputs.get(k, np.nan), r.predicted_ms, rtol=1e-12, equal_nan=True)
            for r in ranked
        )
    ]
    # Grid before block, as everywhere a launch configuration is shown (CUDA's <<<grid, block>>>).
    with_params = any(r.params for r in rows)
    head = ["rank", *(["params"] if with_params else []), "grid", "block", "threads", "pred ms"]
    head += ["cycles", *diag]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in ranked[:limit] if limit else ranked:
        cyc = r.outputs.get("cycles", float("nan"))
        lines.append(
            " | ".join(
                [
                    str(r.rank + 1) if r.rank is not None else "-",
                    *([str(r.params)] if with_params else []),
                    str(r.grid),
                    str(r.block),
                    str(r.threads),
                    f"{r.predicted_ms:.4g}",
                    f"{cyc:.4g}",
                ]
                + [f"{r.outputs.get(k, float('nan')):.4g}" for k in diag]
            )
        )
    for r in excluded:
        what = f"{r.params} {r.block}" if r.params else str(r.block)
        lines.append(f"excluded {what}: {r.excluded}")
    return "\n".join(lines)
