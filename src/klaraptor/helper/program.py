"""HelperProgram: the performance model with a kernel's fitted functions bound in, plus the rule
that turns its predictions into one launch configuration.

A helper program is two rational programs over the data parameters D and a candidate
configuration — its block (bx, by, bz), its index `cfg` and, for a kernel with program
parameters, the parameters' values and the compiled variant's registers and static shared memory
(`kl_regs`, `kl_static_smem`):
- `model`: predicted cycles (first output) and the model's diagnostics (occupancy, ...);
- `admit`: the grid (gx, gy, gz) and `ok`, which is 1 when the spec's constraints hold and the
  launch is possible for this D (grid limits, shared memory).
Both run vectorised in NumPy (`predict`, every output; `choose`, the fast path of the selector,
with the two merged into one specialised program that computes only what the choice needs), as a
standalone Python module and as a C header; all give the same choice because they evaluate the
same IEEE operations in the same order.

The choice rule (the same in every backend):
1. Only admitted candidates with a finite, positive prediction compete.
2. t_min is the smallest prediction; every candidate with t <= t_min * (1 + band) is tied, where
   `band` is the relative noise band measured when the kernel was built.
3. Among the tied, the highest predicted occupancy wins, then the fewest threads, then the lower
   candidate index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import ProgramError
from klaraptor.core.types import (
    BLOCK_VARS,
    INT32_MAX,
    Block,
    Config,
    DataSchema,
    DataSize,
    Grid,
    ParamValues,
)
from klaraptor.program import Expr, Program, call, floor, var, where

# Per-candidate inputs of a kernel with program parameters: the compiled variant's attributes.
VARIANT_ATTR_VARS: tuple[str, str] = ("kl_regs", "kl_static_smem")

_min_reduce = np.minimum.reduce
_where = np.where
_lexsort = np.lexsort
_argsort = np.argsort
_partition = np.partition
_flatnonzero = np.flatnonzero


@dataclass(frozen=True)
class Prediction:
    """Per-candidate model outputs for one D (arrays aligned with `HelperProgram.candidates`)."""

    D: DataSize
    ms: np.ndarray
    outputs: dict[str, np.ndarray]
    grid: np.ndarray  # (n, 3)
    admitted: np.ndarray  # bool
    valid: np.ndarray  # admitted and a finite positive prediction
    order: np.ndarray  # candidate indices, best first (valid ones only)


@dataclass
class HelperProgram:
    """A kernel's helper program: choose the configuration for any D in microseconds.

    `candidates` are the candidates' blocks. A kernel with program parameters also has
    `param_names`, and per candidate its variant's values (`variants`) and attributes
    (`variant_attrs`: registers, static shared memory); its candidates are then keyed by
    `Config` (`keys`), a kernel without parameters keeps keying them by block."""

    kernel: str
    model_name: str
    data_names: tuple[str, ...]
    candidates: tuple[Block, ...]
    model: Program
    admit: Program
    hw: dict[str, float]
    clock_mhz: float
    band: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    # (lo, hi) of each data parameter: the spec's sane ranges, also enforced by `admit`.
    data_ranges: tuple[tuple[int, int], ...] = ()
    param_names: tuple[str, ...] = ()
    variants: tuple[ParamValues, ...] = ()
    variant_attrs: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.data_ranges:
            self.data_ranges = tuple((1, INT32_MAX) for _ in self.data_names)
        self.data_ranges = tuple((int(lo), int(hi)) for lo, hi in self.data_ranges)
        self.candidates = tuple(tuple(int(v) for v in b) for b in self.candidates)  # type: ignore[misc]
        if not self.candidates:
            raise ProgramError(f"helper program of {self.kernel!r} has no candidate block")
        self.param_names = tuple(self.param_names)
        n = len(self.candidates)
        if self.param_names and (len(self.variants) != n or len(self.variant_attrs) != n):
            raise ProgramError(
                f"helper program of {self.kernel!r}: {n} candidates but "
                f"{len(self.variants)} variants and {len(self.variant_attrs)} attribute rows"
            )
        self.variants = tuple(self.variants)
        self.variant_attrs = tuple((int(r), int(m)) for r, m in self.variant_attrs)
        per_candidate = (
            set(self.param_names) | set(VARIANT_ATTR_VARS) if self.param_names else set()
        )
        expect = set(self.data_names) | set(BLOCK_VARS) | {"cfg"} | set(self.hw) | per_candidate
        extra = set(self.model.inputs) - expect
        if extra:
            raise ProgramError(
                f"model program of {self.kernel!r} has unknown inputs {sorted(extra)}"
            )
        cand = np.array(self.candidates, dtype=np.float64)
        self._fixed_blocks = {"bx": cand[:, 0], "by": cand[:, 1], "bz": cand[:, 2]}
        if self.param_names:
            for j, name in enumerate(self.param_names):
                self._fixed_blocks[name] = np.array(
                    [float(v.values()[j]) for v in self.variants], dtype=np.float64
                )
            attrs = np.array(self.variant_attrs, dtype=np.float64)
            self._fixed_blocks["kl_regs"] = attrs[:, 0]
            self._fixed_blocks["kl_static_smem"] = attrs[:, 1]
        self.keys: tuple[Block | Config, ...] = (
            tuple(Config(v, b) for v, b in zip(self.variants, self.candidates))
            if self.param_names
            else self.candidates
        )
        self._key_index = {k: i for i, k in enumerate(self.keys)}
        self._threads = cand.prod(axis=1)
        fixed: dict[str, np.ndarray | float]
        fixed = {k: v for k, v in self._fixed_blocks.items() if k in self.model.inputs}
        if "cfg" in self.model.inputs:
            fixed["cfg"] = np.arange(len(self.candidates), dtype=np.float64)
        fixed.update({k: v for k, v in self.hw.items() if k in self.model.inputs})
        self._model_fn = self.model.specialize(fixed)
        afixed = {k: v for k, v in self._fixed_blocks.items() if k in self.admit.inputs}
        self._admit_fn = self.admit.specialize(afixed)
        self._occ_name = "occupancy" if "occupancy" in self.model.outputs else None
        self._build_lean()

    def _build_lean(self) -> None:
        """The fast path of `choose`: model and admission merged into one specialised program
        that computes only what the choice needs.

        Its outputs are `score` (the predicted cycles where the candidate is admitted and the
        prediction finite and positive, else +inf), the occupancy when it depends on D, and the
        grid; shared subexpressions (e.g. ``ceil(N / bx)`` in both programs) are computed once,
        and everything independent of D is folded at construction.
        """
        taken = set(self.model.inputs) | set(self.admit.inputs) | set(self.data_names)
        taken |= set(self.model._registry) | set(self.admit._registry)

        def fresh(want: str) -> str:
            name, i = want, 2
            while name in taken:
                name, i = f"{want}_{i}", i + 1
            taken.add(name)
            return name

        mkey, akey = fresh("kl_model"), fresh("kl_admit")
        hw = tuple(h for h in self.hw if h in self.model.inputs)
        per_candidate = (*self.param_names, *VARIANT_ATTR_VARS) if self.param_names else ()
        inputs = tuple(self.data_names) + BLOCK_VARS + per_candidate + ("cfg",) + hw
        c, ok, score = fresh("kl_cycles"), fresh("kl_ok"), fresh("kl_score")
        gnames = [fresh(f"kl_{g}") for g in ("gx", "gy", "gz")]
        asg: list[tuple[str, Expr]] = [
            (c, call(mkey, output=self.model.outputs[0])),
            (ok, call(akey, output="ok")),
            # Valid: admitted, finite and positive. An infinite prediction maps to +inf either
            # way, so `score < inf` is exactly `valid` and `c > 0` (false for nan) suffices.
            (score, where(var(ok).ne(0.0) & (var(c) > 0.0), var(c), math.inf)),
        ]
        outs = [score]
        occ = None
        if self._occ_name is not None:
            occ = fresh("kl_occupancy")
            asg.append((occ, call(mkey, output=self._occ_name)))
            outs.append(occ)
        for g, gname in zip(("gx", "gy", "gz"), gnames):
            asg.append((gname, call(akey, output=g)))
            outs.append(gname)
        lean = Program(
            f"{self.model.name}_choose", inputs, asg, outs, {mkey: self.model, akey: self.admit}
        )
        n = len(self.candidates)
        fixed: dict[str, Any] = dict(self._fixed_blocks)
        fixed["cfg"] = np.arange(n, dtype=np.float64)
        fixed.update({k: self.hw[k] for k in hw})
        fn = lean.specialize(fixed, as_tuple=True)
        if fn.inputs != tuple(self.data_names):
            raise ProgramError(
                f"{self.kernel}: choice program inputs {fn.inputs} != {self.data_names}"
            )
        # The order among tied candidates (highest occupancy, fewest threads, lowest index) is
        # fixed when the occupancy does not depend on D. Then the choice program evaluates the
        # candidates in that order (every fixed input permuted; each candidate's value is the
        # same IEEE computation, so the same bits): position is the tie order, and the first
        # position of the smallest prediction is the choice, found by one argmin.
        idx = np.arange(n)
        self._tie_perm: np.ndarray | None = None
        if occ is None:
            self._tie_perm = np.lexsort((idx, self._threads, np.zeros(n)))
        elif occ in fn.constant_outputs:
            self._tie_perm = np.lexsort((idx, self._threads, -fn.constant_outputs[occ]))
        perm = self._tie_perm
        self._positional = perm is not None
        if perm is not None and not np.array_equal(perm, idx):
            fn = lean.specialize(
                {
                    k: v[perm] if isinstance(v, np.ndarray) and v.shape == (n,) else v
                    for k, v in fixed.items()
                },
                as_tuple=True,
            )
        # Position -> candidate index (the identity unless evaluated in tie order).
        self._at: list[int] = perm.tolist() if perm is not None else idx.tolist()
        self._choose_fn = fn
        self._idx = idx
        self._ms_per_cycle = self.clock_mhz * 1e3
        # Per candidate, built once: what a selection hands out (no object made per new D).
        self._configs: tuple[Config, ...] = tuple(
            Config(v, b)
            for v, b in zip(
                self.variants if self.param_names else (ParamValues.NONE,) * n, self.candidates
            )
        )

    # -- candidates ------------------------------------------------------------------------------

    def config(self, index: int) -> Config:
        """The configuration of candidate `index` (its variant and block)."""
        return self._configs[index]

    def index_of(self, key: Block | Config) -> int:
        """The index of a candidate by its key (a block, or a Config with parameters);
        ProgramError when it is not a candidate."""
        if isinstance(key, Config) and not self.param_names and not key.params:
            key = key.block
        elif not isinstance(key, Config):
            key = tuple(int(v) for v in key)  # type: ignore[assignment]
        try:
            return self._key_index[key]
        except (KeyError, TypeError):
            raise ProgramError(f"{self.kernel}: {key} is not a candidate") from None

    # -- what the build recorded in `info` (kept a mapping: stores and exports carry it) -------

    @property
    def tune_once_index(self) -> int | None:
        """The candidate tune-once launches (the best measured at the largest training size), by
        index into `keys`; None where the build recorded none."""
        value = self.info.get("tune_once")
        return None if value is None else int(value)

    @property
    def device_key(self) -> str | None:
        """The profile key of the GPU the helper was built for; None where not recorded."""
        value = self.info.get("device")
        return None if value is None else str(value)

    # -- evaluation ------------------------------------------------------------------------------

    @property
    def data_schema(self) -> DataSchema:
        """Names and ranges of the data parameters (the parser of D when no spec is at hand)."""
        return DataSchema(tuple(self.data_names), self.data_ranges, self.kernel)

    def _dargs(self, D: DataSize, inputs: Sequence[str]) -> dict[str, float]:
        values = dict(zip(self.data_names, D.values()))
        return {n: float(values[n]) for n in inputs}

    def predict(self, D: DataSize) -> Prediction:
        """Every candidate's prediction for D."""
        n = len(self.candidates)
        out = self._model_fn(**self._dargs(D, self._model_fn.inputs))
        adm = self._admit_fn(**self._dargs(D, self._admit_fn.inputs))
        cycles = np.broadcast_to(out[self.model.outputs[0]], (n,))
        admitted = np.broadcast_to(adm["ok"], (n,)) != 0.0
        with np.errstate(invalid="ignore"):
            valid = admitted & np.isfinite(cycles) & (cycles > 0)
        grid = np.stack([np.broadcast_to(adm[g], (n,)) for g in ("gx", "gy", "gz")], axis=1)
        occ = np.broadcast_to(out[self._occ_name], (n,)) if self._occ_name else np.zeros(n)
        order = rank(cycles, occ, self._threads, valid, self.band)
        ms = cycles / (self.clock_mhz * 1e3)
        return Prediction(
            D,
            ms,
            {k: np.broadcast_to(v, (n,)) for k, v in out.items()},
            grid,
            admitted,
            valid,
            order,
        )

    def choose(self, D: DataSize, k: int = 1) -> tuple[list[int], list[float], Grid | None]:
        """The first `k` candidates of `predict(D).order` (fewer when fewer are valid, none when
        no candidate is admissible), their predicted times in ms, and the first one's grid.

        The same result as `predict`, much faster: one specialised program computes only the
        primary prediction, the occupancy (when it depends on D) and the grid, and only the top
        k are ordered; k >= 1.
        """
        if k < 1:
            raise ProgramError(f"choose: k must be >= 1, got {k}")
        out = self._choose_fn(*D.values())
        score = out[0]  # the prediction where valid, else +inf
        if self._positional:
            pos = self._top_positions(score, k)
            if not pos:
                return [], [], None
            at = self._at
            top = [at[p] for p in pos]
        else:
            tmin = float(_min_reduce(score))
            if not tmin < math.inf:
                return [], [], None
            tie = tmin * (1.0 + self.band)
            # The tied group: valid with t <= tie (if tie overflows to inf: every valid one).
            tied_mask = score <= tie if tie < math.inf else score < tie
            # The occupancy depends on D (no fixed order): order only the few candidates that
            # can be chosen, not all of them (a lexsort of a joint space per new D).
            subset = self._top_by_subset(score, tied_mask, out[1], k)
            if subset is None:
                perm = _lexsort((self._idx, self._threads, -out[1]))
                subset = self._top_by_perm(score, tied_mask, perm, k)
            top = pos = subset
        scale = self._ms_per_cycle
        item = score.item
        ms = [item(p) / scale for p in pos]
        b = pos[0]
        gx, gy, gz = out[-3:]
        return top, ms, (int(gx.item(b)), int(gy.item(b)), int(gz.item(b)))

    def _top_positions(self, score: np.ndarray, k: int) -> list[int]:
        """The first k positions of the order where position is the tie order (the choice
        program evaluated the candidates in tie order): the tied group (valid, t <= tie) by
        position, then the other valid ones by (prediction, position); [] when none is valid.

        The smallest prediction at the lowest position is one argmin; where nothing above the
        minimum is tied (band 0, or a nan or negative band) the whole order is (prediction,
        position), so the next ones are argmins too, each masked out in a copy."""
        j = int(score.argmin())
        tmin = score.item(j)
        if not tmin < math.inf:
            return []
        tie = tmin * (1.0 + self.band)
        if tie > tmin:  # candidates above the minimum may be tied: the tied group by position
            tied = (score <= tie if tie < math.inf else score < tie).nonzero()[0]
            if len(tied) >= k:
                return tied[:k].tolist()
            top = tied.tolist()
            rest = score.copy()
            rest[tied] = math.inf
        else:
            if k == 1:
                return [j]
            top = [j]
            rest = score.copy()
            rest[j] = math.inf
        want = k - len(top)
        if want > 8:  # many more: one stable sort beats repeated argmins
            o = _argsort(rest, kind="stable")[:want]
            top += o[rest[o] < math.inf].tolist()
            return top
        for _ in range(want):
            j = int(rest.argmin())
            if not rest.item(j) < math.inf:
                break
            top.append(j)
            rest[j] = math.inf
        return top

    def _top_by_subset(
        self, score: np.ndarray, tied_mask: np.ndarray, occ: np.ndarray, k: int
    ) -> list[int] | None:
        """`_top_by_perm`'s result, from the tied group and the k smallest predictions only:
        each ordered by (prediction,) -occupancy, threads, index on its own. None where the
        k-th smallest prediction is nan (then the full order decides)."""
        threads = self._threads
        tied = _flatnonzero(tied_mask)
        tied = tied[_lexsort((tied, threads[tied], -occ[tied]))]
        if len(tied) >= k:
            return tied[:k].tolist()
        top = tied.tolist()
        kth = _partition(score, k - 1)[k - 1] if 4 * k < len(score) else math.nan
        if not kth == kth:
            return None
        cand = _flatnonzero(score <= kth)
        cand = cand[~tied_mask[cand]]
        rest = cand[_lexsort((cand, threads[cand], -occ[cand], score[cand]))]
        top += rest[: k - len(top)].tolist()
        if not score[top[-1]] < math.inf:
            top = [i for i in top if score[i] < math.inf]
        return top

    def _top_by_perm(
        self, score: np.ndarray, tied_mask: np.ndarray, perm: np.ndarray, k: int
    ) -> list[int]:
        """The first k candidates: the tied group in `perm`'s order (-occupancy, threads,
        index), then the rest by prediction, equal predictions in `perm`'s order."""
        tied_p = tied_mask[perm]
        j = int(tied_p.argmax())  # the first tied one in tie order, if any is tied
        if k == 1 and tied_p[j]:
            top = [int(perm[j])]
        else:
            top = perm[tied_p].tolist()
            c = len(top)
            if c >= k:
                del top[k:]
            else:
                # The rest by prediction, equal predictions in tie order. Sorted by prediction,
                # the tied group (every t <= tie < every other t) comes first: skip it.
                sp = score[perm]
                kth = _partition(sp, k - 1)[k - 1] if 4 * k < len(sp) else math.nan
                if kth == kth:
                    # Only the first k in (prediction, tie order) are needed: every candidate
                    # predicted at most the k-th smallest, stably sorted, begins exactly as the
                    # full stable sort does (a joint space has thousands of candidates).
                    cand = _flatnonzero(sp <= kth)
                    o = cand[_argsort(sp[cand], kind="stable")]
                else:  # a small space (or a NaN k-th): the full stable sort
                    o = _argsort(sp, kind="stable")
                top += perm[o[c:k]].tolist()
                if not score[top[-1]] < math.inf:
                    top = [i for i in top if score[i] < math.inf]
        return top

    def best_index(self, D: DataSize) -> int:
        top = self.choose(D)[0]
        if not top:
            raise ProgramError(f"{self.kernel}: no admissible candidate for D={D}")
        return top[0]

    def grid(self, D: DataSize, index: int) -> Grid:
        """The launch grid of candidate `index` for D."""
        adm = self._admit_fn(**self._dargs(D, self._admit_fn.inputs))
        n = len(self.candidates)
        return tuple(int(np.broadcast_to(adm[g], (n,))[index]) for g in ("gx", "gy", "gz"))  # type: ignore[return-value]

    # -- serialisation ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "model_name": self.model_name,
            "data_names": list(self.data_names),
            "candidates": [list(b) for b in self.candidates],
            "model": self.model.to_dict(),
            "admit": self.admit.to_dict(),
            "hw": dict(self.hw),
            "clock_mhz": self.clock_mhz,
            "band": self.band,
            "info": self.info,
            "data_ranges": [list(r) for r in self.data_ranges],
            # absent without parameters: stored helpers of such kernels stay as they were
            **(
                {
                    "param_names": list(self.param_names),
                    "variants": [list(v.values()) for v in self.variants],
                    "variant_attrs": [list(a) for a in self.variant_attrs],
                }
                if self.param_names
                else {}
            ),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> HelperProgram:
        names = tuple(d.get("param_names") or ())
        return HelperProgram(
            kernel=d["kernel"],
            model_name=d["model_name"],
            data_names=tuple(d["data_names"]),
            candidates=tuple(tuple(b) for b in d["candidates"]),  # type: ignore[misc]
            model=Program.from_dict(d["model"]),
            admit=Program.from_dict(d["admit"]),
            hw={k: float(v) for k, v in d["hw"].items()},
            clock_mhz=float(d["clock_mhz"]),
            band=float(d.get("band", 0.0)),
            info=dict(d.get("info", {})),
            data_ranges=tuple(tuple(r) for r in d.get("data_ranges", ())),  # type: ignore[misc]
            param_names=names,
            variants=tuple(ParamValues(names, v) for v in d.get("variants") or ()),
            variant_attrs=tuple(tuple(a) for a in d.get("variant_attrs") or ()),  # type: ignore[misc]
        )

    # -- code generation -------------------------------------------------------------------------

    @property
    def c_name(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.kernel)

    def _read_input(
        self, name: str, reads: Sequence[str], constant: Callable[[str, float], str]
    ) -> str:
        """How an exported program reads its input `name`: `reads` are the templates (`{j}` the
        index, `{name}` the name) of a data size, a block variable, a program parameter, a
        variant attribute, and `cfg`; a hardware constant is `constant(name, value)`."""
        tables = (self.data_names, BLOCK_VARS, self.param_names, VARIANT_ATTR_VARS)
        for template, names in zip(reads, tables):
            if name in names:
                return template.format(j=list(names).index(name), name=name)
        if name == "cfg":
            return reads[4]
        return constant(name, float(self.hw[name]))

    def to_c_header(self) -> str:
        """A self-contained C header exporting `klaraptor_<kernel>_best(D, grid, block)`."""
        k = self.c_name
        pm, pa = f"kpm_{k}_", f"kpa_{k}_"
        model_c = self.model.to_c(prefix=pm)
        admit_c = self.admit.to_c(prefix=pa)
        mfun = pm + _c_ident(self.model.name)
        afun = pa + _c_ident(self.admit.name)
        nout = len(self.model.outputs)
        occ_idx = self.model.outputs.index(self._occ_name) if self._occ_name else -1
        n = len(self.candidates)

        P = len(self.param_names)

        reads = (
            "(double)D[{j}]",
            f"(double)kp_{k}_cand[i][{{j}}]",
            f"(double)kp_{k}_par[i][{{j}}]",
            f"(double)kp_{k}_vat[i][{{j}}]",
            "(double)i",
        )

        def arg(name: str) -> str:
            return self._read_input(name, reads, lambda _, v: float.hex(v))

        margs = ", ".join(arg(x) for x in self.model.inputs)
        aargs = ", ".join(arg(x) for x in self.admit.inputs)
        cands = ",\n    ".join(f"{{{b[0]}, {b[1]}, {b[2]}}}" for b in self.candidates)
        guard = f"KLARAPTOR_{k.upper()}_H"
        dn = ", ".join(self.data_names)
        if P:
            pars = ",\n    ".join(
                "{" + ", ".join(str(x) for x in v.values()) + "}" for v in self.variants
            )
            vats = ",\n    ".join(f"{{{r}, {m}}}" for r, m in self.variant_attrs)
            tables = (
                f"static const int kp_{k}_par[{n}][{P}] = {{\n    {pars}\n}};\n"
                f"static const int kp_{k}_vat[{n}][2] = {{\n    {vats}\n}};\n"
                f"/* The program parameters, in this order: {', '.join(self.param_names)}. */\n"
                f"#define KLARAPTOR_{k.upper()}_NPARAMS {P}\n"
            )
            signature = (
                f"klaraptor_{k}_best(const long *D, int grid[3], int block[3], int params[{P}])"
            )
            copy_params = f"\n    for (i = 0; i < {P}; ++i) params[i] = kp_{k}_par[best][i];"
            what = (
                f"klaraptor_{k}_best(D, grid, block, params) picks the launch configuration for "
                f"data parameters\n * D = ({dn}): grid, block and the program parameters "
                f"({', '.join(self.param_names)}) of the\n * compiled variant to launch"
            )
        else:
            tables, copy_params = "", ""
            signature = f"klaraptor_{k}_best(const long *D, int grid[3], int block[3])"
            what = (
                f"klaraptor_{k}_best(D, grid, block) picks the launch configuration for data "
                f"parameters\n * D = ({dn})"
            )
        return f"""/* Generated by klaraptor: helper program of kernel {self.kernel!r} (model {self.model_name}).
 * {what}; it returns 0 on success, -1 when no candidate is admissible.
 * Compile as C99 or C++ without -ffast-math and with -ffp-contract=off so that every
 * rounding matches the Python selector. Depends only on <math.h>. */
#ifndef {guard}
#define {guard}
#include <math.h>

{_indent_static(model_c)}
{_indent_static(admit_c)}
static const int kp_{k}_cand[{n}][3] = {{
    {cands}
}};
{tables}
static int {signature} {{
    double t[{n}], occ[{n}], g[{n}][3];
    int ok[{n}], i, best = -1;
    double tmin = INFINITY, tie, bocc = 0.0, bthr = 0.0;
    for (i = 0; i < {n}; ++i) {{
        double mo[{nout}], ao[4];
        {afun}({aargs}, ao);
        {mfun}({margs}, mo);
        t[i] = mo[0];
        occ[i] = {f"mo[{occ_idx}]" if occ_idx >= 0 else "0.0"};
        g[i][0] = ao[0]; g[i][1] = ao[1]; g[i][2] = ao[2];
        ok[i] = ao[3] != 0.0 && isfinite(t[i]) && t[i] > 0.0;
        if (ok[i] && t[i] < tmin) tmin = t[i];
    }}
    if (tmin == INFINITY) return -1;
    tie = tmin * (1.0 + {float.hex(float(self.band))});
    for (i = 0; i < {n}; ++i) {{
        double thr;
        if (!ok[i] || !(t[i] <= tie)) continue;
        thr = (double)kp_{k}_cand[i][0] * (double)kp_{k}_cand[i][1] * (double)kp_{k}_cand[i][2];
        if (best < 0 || occ[i] > bocc || (occ[i] == bocc && thr < bthr)) {{
            best = i; bocc = occ[i]; bthr = thr;
        }}
    }}
    for (i = 0; i < 3; ++i) {{
        grid[i] = (int)g[best][i];
        block[i] = kp_{k}_cand[best][i];
    }}{copy_params}
    return 0;
}}
#endif /* {guard} */
"""

    def to_python_module(self) -> str:
        """A standalone Python module (stdlib only) with `best(D) -> (grid, block)`."""
        model_py = self.model.to_python(prefix="model_")
        admit_py = self.admit.to_python(prefix="admit_")
        mfun = "model_" + _c_ident(self.model.name)
        afun = "admit_" + _c_ident(self.admit.name)
        occ_idx = self.model.outputs.index(self._occ_name) if self._occ_name else -1

        reads = (
            "{name}=float(D[{j}])",
            "{name}=float(c[{j}])",
            "{name}=float(PARAMS[i][{j}])",
            "{name}=float(VARIANT_ATTRS[i][{j}])",
            "cfg=float(i)",
        )

        def arg(name: str) -> str:
            return self._read_input(name, reads, lambda n, v: f"{n}={v!r}")

        margs = ", ".join(arg(x) for x in self.model.inputs)
        aargs = ", ".join(arg(x) for x in self.admit.inputs)
        one_out = len(self.model.outputs) == 1
        if self.param_names:
            doc = (
                f"best(D) -> (grid, block, params) for D = {self.data_names}, params a dict of the "
                f"program parameters {self.param_names} (the compiled variant to launch);"
            )
            tables = (
                f"PARAM_NAMES = {self.param_names!r}\n"
                f"PARAMS = {[tuple(v.values()) for v in self.variants]!r}\n"
                f"VARIANT_ATTRS = {[tuple(a) for a in self.variant_attrs]!r}\n"
            )
            ret = "return r[4], r[0], dict(zip(PARAM_NAMES, PARAMS[i]))"
        else:
            doc = f"best(D) -> (grid, block) for D = {self.data_names};"
            tables = ""
            ret = "return r[4], r[0]"
        return f'''"""Generated by klaraptor: helper program of kernel {self.kernel!r} (model {self.model_name}).

{doc} predict(D) -> [(block, cycles, admitted)].
Standalone: needs only the standard library.
"""

import math

{model_py}

{admit_py}

DATA_NAMES = {self.data_names!r}
CANDIDATES = {[tuple(b) for b in self.candidates]!r}
BAND = {float(self.band)!r}
{tables}

def predict(D):
    rows = []
    for i, c in enumerate(CANDIDATES):
        mo = {mfun}({margs})
        ao = {afun}({aargs})
        t = {"mo" if one_out else "mo[0]"}
        occ = {"0.0" if occ_idx < 0 else ("mo" if one_out else f"mo[{occ_idx}]")}
        ok = ao[3] != 0.0 and math.isfinite(t) and t > 0.0
        rows.append((c, t, occ, ok, (int(ao[0]), int(ao[1]), int(ao[2]))))
    return rows


def best(D):
    rows = predict(D)
    valid = [r for r in rows if r[3]]
    if not valid:
        raise ValueError("no admissible candidate for D=%r" % (tuple(D),))
    tie = min(r[1] for r in valid) * (1.0 + BAND)
    tied = [(i, r) for i, r in enumerate(rows) if r[3] and r[1] <= tie]
    i, r = min(tied, key=lambda ir: (-ir[1][2], ir[1][0][0] * ir[1][0][1] * ir[1][0][2], ir[0]))
    {ret}
'''


def rank(
    cycles: np.ndarray, occ: np.ndarray, threads: np.ndarray, valid: np.ndarray, band: float
) -> np.ndarray:
    """Candidate indices best first: the tied group by the tie rule, then the rest by prediction."""
    idx = np.flatnonzero(valid)
    if idx.size == 0:
        return idx
    t = cycles[idx]
    tie = float(np.min(t)) * (1.0 + band)
    tied = t <= tie
    # lexsort: last key is primary.
    key_tied = np.lexsort((idx, threads[idx], -occ[idx], t * ~tied, ~tied))
    return idx[key_tied]


def admit_program(
    name: str,
    data_names: Sequence[str],
    grid: Sequence[Expr],
    constraints: Sequence[Expr],
    smem: Expr | None,
    *,
    static_smem: int,
    smem_limit: int,
    max_grid: Sequence[int],
    data_ranges: Sequence[tuple[int, int]] = (),
    param_names: Sequence[str] = (),
) -> Program:
    """The admission program: grid (gx, gy, gz) and ok for one (D, configuration).

    `ok` also requires every data parameter inside its sane range, so generated code refuses a D
    the spec rejects (the C function then returns -1). With program parameters the expressions
    read them, and the static shared memory is the candidate's variant's (`kl_static_smem`)."""
    inputs = tuple(data_names) + tuple(param_names) + BLOCK_VARS
    if param_names:
        inputs += ("kl_static_smem",)
    asg: list[tuple[str, Expr]] = [("gx", grid[0]), ("gy", grid[1]), ("gz", grid[2])]
    conds: list[Expr] = []
    for name, (lo, hi) in zip(data_names, data_ranges):
        conds += [var(name) >= float(lo), var(name) <= float(hi)]
    for g, lim in zip(("gx", "gy", "gz"), max_grid):
        v = var(g)
        conds += [v >= 1, v <= float(lim), v.eq(floor(v))]
    for c in constraints:
        conds.append(c.ne(0.0))
    # Without parameters the static shared memory is a number, as it always was (the exported
    # helpers of such kernels stay byte-identical).
    static: Expr | float = var("kl_static_smem") if param_names else float(static_smem)
    if smem is not None:
        asg.append(("dyn_smem", smem))
        conds += [var("dyn_smem") >= 0, var("dyn_smem") + static <= float(smem_limit)]
    elif param_names:  # a variant's static shared memory alone may exceed the limit
        conds.append(var("kl_static_smem") <= float(smem_limit))
    ok = conds[0]
    for c in conds[1:]:
        ok = ok & c
    asg.append(("ok", where(ok, 1.0, 0.0)))
    return Program(name, inputs, asg, ("gx", "gy", "gz", "ok"))


def _c_ident(name: str) -> str:
    s = "".join(c if (c.isalnum() or c == "_") and c.isascii() else "_" for c in name)
    return s if s[:1].isalpha() else "p" + s


def _indent_static(c_source: str) -> str:
    """Make the generated top-level functions `static` so several headers can be included."""
    out = []
    for line in c_source.splitlines():
        if line.startswith("double ") and "(" in line:
            line = "static " + line
        out.append(line)
    return "\n".join(out)


__all__ = ["HelperProgram", "Prediction", "admit_program", "rank"]
