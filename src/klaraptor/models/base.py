"""The model contract: what every performance model declares and does.

A model turns a kernel's training data (`HelperJob`) into a predictor for every candidate block
at any D: usually a `HelperProgram` (a rational program, so `select` costs microseconds and the
C/Python exporters work). Every model declares, as class attributes, its registry `name` and
its capabilities (`tags`, a `ModelTags`, as scikit-learn's estimators declare theirs): the build
asks the tags, never a list of model names. A model that needs no measurements implements
`static_job`, the job built with no measurements; one that ranks candidates without measuring
them implements `rank` (a prior for a budgeted build's sweep).

`TemplateModel` is the family KLARAPTOR defines: a rational-program template over fitted
per-kernel metrics, exact quantities and hardware parameters. It declares `metrics`,
`hardware`, `fit` (how its metrics are fitted) and implements `point_values` and `program`;
`make_helper` fits the metrics and binds them. `klaraptor.models.checks.check_model` tests a
model against this contract.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from klaraptor.core.errors import BuildError, UnmeasuredError
from klaraptor.core.types import (
    BLOCK_VARS,
    WARP_SIZE,
    Block,
    Config,
    DataSize,
    KernelAttributes,
    ParamValues,
)
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit.training import (
    FitOptions,
    TrainingSet,
    exact_subprograms,
    fit_metric,
    hardware_inputs,
)
from klaraptor.helper.program import VARIANT_ATTR_VARS, HelperProgram, admit_program
from klaraptor.program import Program
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

# Exactly known per-kernel sub-programs every template calls (never fitted).
KERNEL_QUANTITIES: tuple[str, ...] = ("blocks", "threads", "regs", "smem")


@dataclass
class HelperJob:
    """Everything a model may use to build the helper program of one kernel on one GPU.

    `candidates` are the configurations that can launch (in canonical order), keyed as the
    helper program keys them: by block for a kernel without program parameters, by `Config`
    for one with them (`configs` and `blocks` give both forms); `rejected` the others with why.
    `attrs` are the kernel's attributes (the default variant's with parameters;
    `variant_attrs` has every variant's). `sync_per_warp` is the static barrier count from the
    PTX (None when unknown). `arg_bytes` are the bytes of the array arguments `make_args` builds
    at some sizes (the argument footprint, exact; empty when unknown).
    """

    spec: KernelSpec
    profile: DeviceProfile
    attrs: KernelAttributes
    train: TrainingSet
    candidates: tuple[Any, ...]
    rejected: dict[Any, str] = field(default_factory=dict)
    sync_per_warp: float | None = None
    fit: FitOptions = field(default_factory=FitOptions)
    arg_bytes: tuple[tuple[DataSize, int], ...] = ()
    variant_attrs: dict[ParamValues, KernelAttributes] = field(default_factory=dict)

    @property
    def configs(self) -> tuple[Config, ...]:
        """Every candidate as a Config (variant and block)."""
        return tuple(
            c if isinstance(c, Config) else Config(ParamValues.NONE, tuple(c))  # type: ignore[arg-type]
            for c in self.candidates
        )

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Every candidate's block."""
        return tuple(c.block for c in self.configs)

    def key(self, config: Config) -> Any:
        """How this job keys a configuration: its block without program parameters."""
        return config if self.spec.params else config.block

    def attrs_of(self, pv: ParamValues) -> KernelAttributes:
        """The attributes of one compiled variant."""
        if not pv:
            return self.attrs
        try:
            return self.variant_attrs[pv]
        except KeyError:
            raise BuildError(
                f"{self.spec.name}: no attributes for the compiled variant {pv}; collect it first"
            ) from None

    def subset(self, sizes: Sequence[Any]) -> HelperJob:
        """The same job trained on some of its sizes only (model-selection folds)."""
        return replace(self, train=self.train.subset(sizes))

    def measured_only(self) -> HelperJob:
        """The job over the candidates with at least one training point, the others moved to
        `rejected`: what a model that fits each candidate from its own points can build.
        Raises UnmeasuredError when no candidate has one."""
        timed = {self.key(c) for c in self.train.configs()}
        kept = tuple(b for b in self.candidates if b in timed)
        if not kept:
            sizes = [str(D) for D in self.train.sizes()]
            order = (
                sorted(timed, key=lambda c: (c.params.values(), c.block))
                if self.spec.params
                else sorted(timed)
            )
            out = [b for b in order if b in self.rejected]
            why = f" (the store's timed blocks are all out: {out[0]}: {self.rejected[out[0]]})"
            raise UnmeasuredError(
                f"{self.spec.name}: none of the {len(self.candidates)} candidate blocks has a "
                f"successful measurement at the training sizes {sizes}{why if out else ''}; "
                "collect again (klaraptor build on a GPU) and see the store's failed points"
            )
        if len(kept) == len(self.candidates):
            return self
        missing = "no successful measurement at the training sizes (failed or not collected)"
        rejected = {**self.rejected, **{b: missing for b in self.candidates if b not in timed}}
        return replace(self, candidates=kept, rejected=rejected)

    def admit(self) -> Program:
        """The admission program: grid and launchability of every (D, configuration)."""
        spec, attrs, profile = self.spec, self.attrs, self.profile
        return admit_program(
            "admit",
            spec.data_names,
            spec.grid_exprs(),
            spec.constraint_exprs(),
            spec.smem_expr(),
            static_smem=attrs.static_smem,
            smem_limit=profile.smem_per_block_optin,
            max_grid=profile.max_grid_dim,
            data_ranges=[(p.lo, p.hi) for p in spec.data],
            param_names=spec.param_names,
        )

    def tune_once(self) -> int | None:
        """Index of the candidate measured fastest (hot) at the largest training size: what a
        user who tunes once would launch everywhere (None when none was timed there)."""
        sizes = self.train.sizes()
        if not sizes:
            return None
        L = np.array(sizes[-1].values(), dtype=np.float64)
        index = {b: i for i, b in enumerate(self.candidates)}
        best, t_best = None, math.inf
        for i in range(self.train.n):
            b = self.key(self.train.config(i))
            t = float(self.train.derived[i].get("time_ms", math.nan))
            if b in index and np.array_equal(self.train.D[i], L) and t < t_best:
                best, t_best = index[b], t
        return best

    def fitted_helper(
        self,
        model_name: str,
        program: Program,
        hw: Mapping[str, float],
        report: dict[str, Any],
        **more: Any,
    ) -> HelperProgram:
        """`helper_program` of a model of fitted metrics: within the noise band, with its fits'
        `report`, the kernel attributes and the device in the info, then `more`."""
        info = {"fits": report, "attributes": self.attrs.to_dict(), "device": self.profile.key}
        return self.helper_program(
            model_name, program, hw=hw, band=self.noise_band(), info={**info, **more}
        )

    def helper_program(
        self,
        model_name: str,
        program: Program,
        *,
        hw: Mapping[str, float],
        band: float,
        info: dict[str, Any],
    ) -> HelperProgram:
        """The helper program of this job's kernel and candidates for a model's `program`."""
        spec = self.spec
        configs = self.configs
        variant_attrs: tuple[tuple[int, int], ...] = ()
        if spec.params:
            variant_attrs = tuple(
                (self.attrs_of(c.params).num_regs, self.attrs_of(c.params).static_smem)
                for c in configs
            )
        return HelperProgram(
            kernel=spec.name,
            model_name=model_name,
            data_names=spec.data_names,
            candidates=tuple(c.block for c in configs),
            model=program,
            admit=self.admit(),
            hw=dict(hw),
            clock_mhz=self.profile.sm_clock_mhz,
            band=band,
            info=info,
            data_ranges=tuple((p.lo, p.hi) for p in spec.data),
            param_names=spec.param_names,
            variants=tuple(c.params for c in configs) if spec.params else (),
            variant_attrs=variant_attrs,
        )

    def noise_band(self) -> float:
        """The median relative IQR of the training timings: the tie band of choices."""
        spreads = self.train.spread[np.isfinite(self.train.spread)]
        return float(np.median(spreads)) if spreads.size else 0.0


@dataclass(frozen=True)
class ModelTags:
    """What a model can do and needs, declared by the model itself.

    - `needs_counters`: it reads hardware counters (Nsight Compute) at training points;
    - `needs_measurements`: it needs timed points at all (False: it predicts from static
      information and implements `Model.static_job`);
    - `budgeted`: a budgeted measurement plan serves it (a sweep of every candidate at the
      largest training size, a ladder of smaller sizes for the most promising); otherwise it
      fits each configuration from its own points, so every candidate is measured at every
      training size;
    - `auto_rank`: its place among the candidates of `model="auto"` (0 is the default the others
      must beat; None: not a candidate);
    - `ranks_without_measuring`: it orders candidates before any measurement (`Model.rank`), so
      it can be a build's prior;
    - `supports_params`: it models kernels with compile-time program parameters (a
      configuration is then a compiled variant and a block);
    - `ranks_params`: its `rank` also orders the configurations (compiled variant, block) of a
      kernel with program parameters, so it can be the prior of such a kernel's build.
    """

    needs_counters: bool = False
    needs_measurements: bool = True
    budgeted: bool = False
    auto_rank: int | None = None
    ranks_without_measuring: bool = False
    supports_params: bool = False
    ranks_params: bool = False


# The built-in models' tags, in one place: each model class takes its own from here, and the
# registry reads them without importing the model (every build reads every model's tags, and
# importing them pulled SciPy's optimize package and the SAAKE emulator, 0.3-1.3 s, onto the
# build's critical path before the GPU had work).
BUILTIN_TAGS: dict[str, ModelTags] = {
    "scaling": ModelTags(budgeted=True, auto_rank=0, supports_params=True),
    "mwp_cwp": ModelTags(needs_counters=True, auto_rank=2),
    "mwp_cwp_fenced": ModelTags(needs_counters=True),
    "time_fit": ModelTags(auto_rank=1, supports_params=True),
    "saake": ModelTags(needs_counters=True, ranks_without_measuring=True, ranks_params=True),
    "snowpack": ModelTags(needs_measurements=False, ranks_without_measuring=True),
}


class Model(ABC):
    """A performance model (see the module docstring for the contract)."""

    name: ClassVar[str]
    tags: ClassVar[ModelTags] = ModelTags()

    @property
    def needs_counters(self) -> bool:
        return self.tags.needs_counters

    @property
    def needs_measurements(self) -> bool:
        return self.tags.needs_measurements

    @property
    def supports_params(self) -> bool:
        return self.tags.supports_params

    def rank(
        self,
        spec: KernelSpec,
        D: Any,
        candidates: Sequence[Any],
        *,
        device: DeviceProfile,
        store: Store | None,
    ) -> list[Any]:
        """The candidates at D best first, without measuring (models tagged
        `ranks_without_measuring`)."""
        raise NotImplementedError(f"model {self.name!r} cannot rank candidates without measuring")

    @abstractmethod
    def make_helper(self, job: HelperJob) -> tuple[HelperProgram, dict[str, Any]]:
        """The helper program for `job`, and a JSON-safe report of how it was fitted."""

    def static_job(self, spec: KernelSpec, device: DeviceProfile, store: Store) -> HelperJob:
        """The job of a build without measurements (models with `needs_measurements` False)."""
        raise NotImplementedError(f"model {self.name!r} needs measurements: it has no static job")


class TemplateModel(Model):
    """A rational-program template over fitted metrics (KLARAPTOR's model family)."""

    metrics: ClassVar[tuple[str, ...]]
    hardware: ClassVar[tuple[str, ...]]
    # (max numerator degree, max denominator degree) per data variable of the per-configuration
    # fits; None keeps the build's FitOptions.
    fit_degrees: ClassVar[tuple[int, int] | None] = None

    @abstractmethod
    def point_values(
        self, derived: Mapping[str, float], block: Sequence[int], threads: int, warps: int
    ) -> dict[str, float]:
        """One measured point's canonical metrics as the values of the template's metrics."""

    @abstractmethod
    def program(self, inputs: Sequence[str]) -> Program:
        """The template: first output predicted cycles, the others diagnostics."""

    def fit_options(self, base: FitOptions) -> FitOptions:
        if self.fit_degrees is None:
            return base
        num, den = self.fit_degrees
        return replace(
            base,
            table=replace(base.table, max_degree=num, max_den_degree=den),
            joint=replace(base.joint, max_den_degree=den),
        )

    def make_helper(self, job: HelperJob) -> tuple[HelperProgram, dict[str, Any]]:
        spec, train = job.spec, job.train
        fit = self.fit_options(job.fit)
        index = {b: i for i, b in enumerate(job.candidates)}
        # Per-point metric values (points without counters are skipped by counter models).
        rows: list[tuple[int, dict[str, float]]] = []
        for i, d in enumerate(train.derived):
            key = job.key(train.config(i))
            if key not in index or (self.needs_counters and "inst_per_warp" not in d):
                continue
            b = train.config(i).block
            if job.sync_per_warp is not None and "sync_per_warp" not in d:
                d = {**d, "sync_per_warp": float(job.sync_per_warp)}
            threads = b[0] * b[1] * b[2]
            rows.append((i, self.point_values(d, b, threads, -(-threads // WARP_SIZE))))
        if not rows:
            raise BuildError(
                f"{spec.name}: no training point has hardware counters; the {self.name} model "
                "needs them (collect with counters, i.e. with Nsight Compute available)"
            )
        sel = np.array([i for i, _ in rows])
        D = train.D[sel]
        blocks = train.blocks[sel]
        cfg = np.array([index[job.key(train.config(i))] for i in sel], dtype=np.float64)
        subs = exact_subprograms(spec, job.attrs)
        report: dict[str, Any] = {"metrics": {}, "n_points": int(len(rows))}
        t0 = time.perf_counter()
        n_cfg = len(job.candidates)
        for metric in self.metrics:
            y = np.array([vals[metric] for _, vals in rows], dtype=np.float64)
            ok = np.isfinite(y)
            if not ok.all():
                report.setdefault("dropped_non_finite", {})[metric] = int((~ok).sum())
            # A joint fit in (D, bx, by, bz) cannot tell variants apart: per configuration only.
            mode_fit = replace(fit, mode="table") if spec.params else fit
            mf = fit_metric(
                metric, spec.data_names, D[ok], blocks[ok], cfg[ok], y[ok], n_cfg, mode_fit
            )
            subs[metric] = mf.program
            report["metrics"][metric] = mf.summary()
        report["fit_s"] = time.perf_counter() - t0
        per_candidate = (*spec.param_names, *VARIANT_ATTR_VARS) if spec.params else ()
        inputs = tuple(spec.data_names) + BLOCK_VARS + per_candidate + ("cfg",)
        template = self.program(inputs)
        bound = template.bind({k: v for k, v in subs.items() if k in template.unbound_calls()})
        hw_all = hardware_inputs(job.profile)
        hw = {k: hw_all[k] for k in self.hardware if k in bound.inputs}
        missing = [
            k for k in self.hardware if k in bound.inputs and not math.isfinite(hw.get(k, math.nan))
        ]
        if missing:
            raise BuildError(
                f"device profile {job.profile.key!r} lacks {missing} needed by {self.name}"
            )
        helper = job.fitted_helper(self.name, bound, hw, report, tune_once=job.tune_once())
        return helper, report


__all__ = ["KERNEL_QUANTITIES", "HelperJob", "Model", "ModelTags", "TemplateModel"]
