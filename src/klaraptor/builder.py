"""build(): collect → fit → helper program, kept in the store; load(): bring a build back.

The fitting step (thesis §4.2 step 2, DESIGN.md "Fitting"):
- quantities known exactly are never fitted: total blocks (the spec's grid formula), threads per
  block, registers and shared memory (the kernel's attributes and the spec's formula);
- each metric the model reads is fitted from the training points two ways — one rational function
  of D per configuration (`fit_rational_table`: no poisedness problem in the block shape) and one
  joint function of (D, bx, by, bz) (`fit_rational`) — and the one with the smaller held-out error
  (largest D held out: we extrapolate) is kept; a metric that is the same constant at every point
  is bound as that constant;
- the model's template is bound to those sub-programs, giving the helper program.

Only measurements at the training sizes given to `build` are used, so evaluation points stored in
the same store never leak into a fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.configspace import ConfigSpace, KernelAttributes
from klaraptor.device_profile import DeviceProfile, cached_profile, save_profile
from klaraptor.errors import BuildError, FitError, KlaraptorError
from klaraptor.fitting import fit_rational, fit_rational_table
from klaraptor.helper import HelperProgram, admit_program
from klaraptor.metrics import collected
from klaraptor.models import get_model
from klaraptor.occupancy import arch_params
from klaraptor.program import Program, const, var
from klaraptor.selector import Selector
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

Block = tuple[int, int, int]
DEFAULT_MODEL = "auto"
# Candidates of model="auto", in the order ties are broken (the first wins a tie).
AUTO_MODELS = ("mwp_cwp", "time_fit")
BLOCK_VARS = ("bx", "by", "bz")


@dataclass
class FitOptions:
    """How metrics are fitted. `mode`: "auto" (keep the better of table and joint), "table" or
    "joint"; degree bounds apply per data variable (table) and per variable (joint)."""

    mode: str = "auto"
    max_degree: int = 2
    max_den_degree: int = 1
    joint_max_degree: int = 2
    joint_max_total_degree: int = 3


# ---------------------------------------------------------------------------------------------
# Hardware and exact quantities


def hardware_inputs(profile: DeviceProfile, *, allow_missing: bool = False) -> dict[str, float]:
    """Every `hw_*` value a model may read: architecture table merged with the device profile."""
    arch = arch_params(profile.cc)
    hw = arch.hw_inputs()
    hw.update(profile.hardware_params(allow_missing=allow_missing))
    return hw


def exact_subprograms(spec: KernelSpec, attrs: KernelAttributes) -> dict[str, Program]:
    """`blocks`, `threads`, `regs`, `smem` as programs: known exactly, never fitted."""
    dn = spec.data_names
    gx, gy, gz = spec.grid_exprs()
    smem_expr = spec.smem_expr()
    smem_asg = [
        ("smem", const(float(attrs.static_smem)) + (smem_expr if smem_expr is not None else 0.0))
    ]
    smem_inputs = tuple(
        n for n in dn + BLOCK_VARS if smem_expr is not None and n in smem_expr.variables()
    )
    return {
        "blocks": Program(
            "blocks",
            dn + BLOCK_VARS,
            [("gx", gx), ("gy", gy), ("gz", gz), ("blocks", var("gx") * var("gy") * var("gz"))],
            ["blocks"],
        ),
        "threads": Program(
            "threads", BLOCK_VARS, [("threads", var("bx") * var("by") * var("bz"))], ["threads"]
        ),
        "regs": Program("regs", (), [("regs", const(float(attrs.num_regs)))], ["regs"]),
        "smem": Program("smem", smem_inputs, smem_asg, ["smem"]),
    }


# ---------------------------------------------------------------------------------------------
# Metric fitting


@dataclass
class MetricFit:
    name: str
    method: str  # "constant", "table", "joint"
    program: Program
    validation_max: float
    validation_median: float
    detail: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "validation_max": _jsonf(self.validation_max),
            "validation_median": _jsonf(self.validation_median),
            **self.detail,
        }


def _jsonf(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def fit_metric(
    name: str,
    data_names: Sequence[str],
    D: np.ndarray,
    blocks: np.ndarray,
    cfg: np.ndarray,
    y: np.ndarray,
    n_cfg: int,
    options: FitOptions,
) -> MetricFit:
    """Fit one metric over the training points; see the module docstring for the choice."""
    inputs = tuple(data_names) + BLOCK_VARS + ("cfg",)
    if np.all(y == y[0]):
        prog = Program(name, (), [("value", const(float(y[0])))], ["value"])
        return MetricFit(name, "constant", prog, 0.0, 0.0, {"value": float(y[0])})
    fits: list[MetricFit] = []
    errors: list[str] = []
    if options.mode in ("auto", "table"):
        try:
            tf = fit_rational_table(
                D,
                y,
                cfg,
                n_cfg,
                names=list(data_names),
                max_degree=options.max_degree,
                max_den_degree=options.max_den_degree,
            )
            fitted = int(np.count_nonzero(tf.fitted))
            if fitted == n_cfg:
                fits.append(
                    MetricFit(
                        name,
                        "table",
                        tf.to_program(name),
                        tf.validation_error.max,
                        tf.validation_error.median,
                        {"n_samples": tf.n_samples},
                    )
                )
            else:
                errors.append(f"table fit covers {fitted}/{n_cfg} configurations")
        except FitError as e:
            errors.append(f"table: {e}")
    if options.mode in ("auto", "joint"):
        X = np.column_stack([D, blocks])
        names = list(data_names) + list(BLOCK_VARS)
        keep = [i for i in range(X.shape[1]) if np.unique(X[:, i]).size > 1 or i < len(data_names)]
        try:
            rf = fit_rational(
                X[:, keep],
                y,
                names=[names[i] for i in keep],
                data_vars=list(data_names),
                max_degree=options.joint_max_degree,
                max_den_degree=options.max_den_degree,
                max_total_degree=options.joint_max_total_degree,
            )
            fits.append(
                MetricFit(
                    name,
                    "joint",
                    rf.to_program(name),
                    rf.validation_error.max,
                    rf.validation_error.median,
                    {"n_samples": rf.n_samples, "formula": repr(rf)[:400]},
                )
            )
        except FitError as e:
            errors.append(f"joint: {e}")
    if not fits:
        raise BuildError(f"metric {name!r} could not be fitted: {'; '.join(errors)}")

    def score(f: MetricFit) -> tuple[float, float]:
        m = f.validation_median if math.isfinite(f.validation_median) else math.inf
        return (m, f.validation_max if math.isfinite(f.validation_max) else math.inf)

    best = min(fits, key=score)
    best.detail["alternatives"] = {
        f.method: [_jsonf(f.validation_median), _jsonf(f.validation_max)] for f in fits
    }
    if errors:
        best.detail["notes"] = errors
    # Sub-programs are called with inputs resolved by name from the helper's inputs.
    unused = set(best.program.inputs) - set(inputs)
    if unused:
        raise BuildError(f"metric {name!r}: fitted program reads unknown inputs {sorted(unused)}")
    return best


@dataclass
class TrainingSet:
    """The training points of one kernel on one device, as arrays aligned per point."""

    data_names: tuple[str, ...]
    D: np.ndarray  # (n, d)
    blocks: np.ndarray  # (n, 3)
    derived: list[dict[str, float]]
    spread: np.ndarray  # relative IQR of each point's timing samples

    @property
    def n(self) -> int:
        return len(self.derived)

    def sizes(self) -> list[tuple[int, ...]]:
        return sorted({tuple(int(v) for v in d) for d in self.D})

    def subset(self, keep: Sequence[tuple[int, ...]]) -> TrainingSet:
        """The points whose D is in `keep`."""
        wanted = {tuple(k) for k in keep}
        rows = [i for i, d in enumerate(self.D) if tuple(int(v) for v in d) in wanted]
        return TrainingSet(
            self.data_names,
            self.D[rows],
            self.blocks[rows],
            [self.derived[i] for i in rows],
            self.spread[rows],
        )


def training_set(
    store: Store, spec: KernelSpec, device_key: str, sizes: Sequence[Mapping[str, int]]
) -> TrainingSet:
    """Successfully timed points of `spec` at the training `sizes` (with counters when collected)."""
    wanted = {spec.data_tuple(D) for D in sizes}
    pts = collected(store, spec, device_key)
    spreads = {
        (m.D, m.block): float(m.value.get("spread", math.nan))
        for m in store.measurements(spec.name, device_key, kind="time", status="ok")
    }
    keys = sorted(k for k in pts if k[0] in wanted)
    if not keys:
        raise BuildError(
            f"no successful measurement of {spec.name!r} on {device_key!r} at the training sizes "
            f"{sorted(wanted)}; collect first (klaraptor build with a GPU)"
        )
    return TrainingSet(
        data_names=spec.data_names,
        D=np.array([k[0] for k in keys], dtype=np.float64).reshape(len(keys), -1),
        blocks=np.array([k[1] for k in keys], dtype=np.float64),
        derived=[pts[k] for k in keys],
        spread=np.array([spreads.get(k, math.nan) for k in keys]),
    )


def make_helper(
    spec: KernelSpec,
    model_name: str,
    profile: DeviceProfile,
    attrs: KernelAttributes,
    train: TrainingSet,
    *,
    sync_per_warp: float | None = None,
    space: ConfigSpace | None = None,
    fit: FitOptions | None = None,
) -> tuple[HelperProgram, dict[str, Any], dict[Block, str]]:
    """Fit the model's metrics on `train` and bind them into the model: the helper program."""
    model = get_model(model_name)
    fit = fit or FitOptions()
    if hasattr(model, "fit_degrees"):
        fit = FitOptions(
            **{
                **fit.__dict__,
                "max_degree": model.fit_degrees[0],
                "max_den_degree": model.fit_degrees[1],
            }
        )
    needs_counters = getattr(model, "needs_counters", True)
    space = space or ConfigSpace.for_spec(spec, max_threads=profile.max_threads_per_block)
    D0 = dict(zip(spec.data_names, (int(v) for v in train.D[0])))
    candidates, rejected = space.filter_launchable(list(space.candidates), D0, attrs, profile)
    candidates = list(candidates)
    if not candidates:
        raise BuildError(f"{spec.name}: no candidate block can launch ({dict(rejected)})")
    index = {tuple(b): i for i, b in enumerate(candidates)}

    # Per-point model metric values (points without counters are skipped).
    rows: list[tuple[int, dict[str, float]]] = []
    for i, d in enumerate(train.derived):
        b = tuple(int(v) for v in train.blocks[i])
        if b not in index or (needs_counters and "inst_per_warp" not in d):
            continue
        if sync_per_warp is not None and "sync_per_warp" not in d:
            d = {**d, "sync_per_warp": float(sync_per_warp)}
        threads = b[0] * b[1] * b[2]
        rows.append((i, model.point_values(d, b, threads, -(-threads // 32))))
    if not rows:
        raise BuildError(
            f"{spec.name}: no training point has hardware counters; the {model_name} model needs "
            "them (collect with counters, i.e. with Nsight Compute available)"
        )
    sel = np.array([i for i, _ in rows])
    D = train.D[sel]
    blocks = train.blocks[sel]
    cfg = np.array([index[tuple(int(v) for v in train.blocks[i])] for i in sel], dtype=np.float64)
    subs = exact_subprograms(spec, attrs)
    report: dict[str, Any] = {"metrics": {}, "n_points": int(len(rows))}
    t0 = time.perf_counter()
    for metric in model.metrics:
        y = np.array([vals[metric] for _, vals in rows], dtype=np.float64)
        ok = np.isfinite(y)
        if not ok.all():
            report.setdefault("dropped_non_finite", {})[metric] = int((~ok).sum())
        mf = fit_metric(
            metric, spec.data_names, D[ok], blocks[ok], cfg[ok], y[ok], len(candidates), fit
        )
        subs[metric] = mf.program
        report["metrics"][metric] = mf.summary()
    report["fit_s"] = time.perf_counter() - t0
    inputs = tuple(spec.data_names) + BLOCK_VARS + ("cfg",)
    template = model.program(inputs)
    bound = template.bind({k: v for k, v in subs.items() if k in template.unbound_calls()})
    hw_all = hardware_inputs(profile)
    hw = {k: hw_all[k] for k in model.hardware if k in bound.inputs}
    missing = [
        k for k in model.hardware if k in bound.inputs and not math.isfinite(hw.get(k, math.nan))
    ]
    if missing:
        raise BuildError(f"device profile {profile.key!r} lacks {missing} needed by {model_name}")
    admit = admit_program(
        "admit",
        spec.data_names,
        spec.grid_exprs(),
        spec.constraint_exprs(),
        spec.smem_expr(),
        static_smem=attrs.static_smem,
        smem_limit=profile.smem_per_block_optin,
        max_grid=profile.max_grid_dim,
        data_ranges=[(p.lo, p.hi) for p in spec.data],
    )
    spreads = train.spread[np.isfinite(train.spread)]
    band = float(np.median(spreads)) if spreads.size else 0.0
    helper = HelperProgram(
        kernel=spec.name,
        model_name=model_name,
        data_names=spec.data_names,
        candidates=tuple(candidates),
        model=bound,
        admit=admit,
        hw=hw,
        clock_mhz=profile.sm_clock_mhz,
        band=band,
        info={"fits": report, "attributes": attrs.to_dict(), "device": profile.key},
    )
    return helper, report, {tuple(b): why for b, why in rejected}


def select_model(
    spec: KernelSpec,
    profile: DeviceProfile,
    attrs: KernelAttributes,
    train: TrainingSet,
    *,
    sync_per_warp: float | None = None,
    candidates: Sequence[str] = AUTO_MODELS,
    fit: FitOptions | None = None,
    folds: int = 2,
) -> tuple[str, dict[str, Any]]:
    """Pick the model that extrapolates best INSIDE the training data.

    For each of the `folds` largest training sizes, every candidate is built on the sizes below
    it and chooses a block there; the score is the geometric mean over folds of the measured
    slowdown of those choices, r = t(choice) / t(best). Scores within the measured noise band of
    the best are tied; among tied models the one whose predictions rank all candidates best
    (mean Spearman correlation with the measured times over the folds) wins, then the earlier in
    `candidates`. No evaluation-size data is used.
    """
    import warnings

    from scipy.stats import spearmanr

    sizes = train.sizes()
    if len(sizes) < folds + 2:
        raise BuildError(
            f"{spec.name}: model='auto' needs at least {folds + 2} training sizes, got {sizes}"
        )
    band = float(np.nanmedian(train.spread)) if np.isfinite(train.spread).any() else 0.0
    scores: dict[str, Any] = {}
    for name in candidates:
        rs, rhos, per = [], [], []
        try:
            for k in range(len(sizes) - folds, len(sizes)):
                held = sizes[k]
                helper, _, _ = make_helper(
                    spec,
                    name,
                    profile,
                    attrs,
                    train.subset(sizes[:k]),
                    sync_per_warp=sync_per_warp,
                    fit=fit,
                )
                measured = {
                    tuple(int(v) for v in train.blocks[i]): train.derived[i]["time_ms"]
                    for i in range(train.n)
                    if tuple(int(v) for v in train.D[i]) == held
                }
                pred = helper.predict(held)
                block = helper.candidates[int(pred.order[0])]
                rs.append(
                    measured[block] / min(measured.values()) if block in measured else math.inf
                )
                both = [
                    (float(pred.ms[i]), measured[b])
                    for i, b in enumerate(helper.candidates)
                    if b in measured and pred.valid[i]
                ]
                with warnings.catch_warnings():  # a model may predict one time for every block
                    warnings.simplefilter("ignore")
                    rho = spearmanr(*zip(*both)).statistic if len(both) > 2 else math.nan
                rhos.append(float(rho) if math.isfinite(rho) else -1.0)
                per.append(
                    {
                        "held_out": list(held),
                        "block": list(block),
                        "r": rs[-1],
                        "spearman": rhos[-1],
                    }
                )
        except (BuildError, KlaraptorError) as e:
            scores[name] = {"error": str(e)}
            continue
        scores[name] = {
            "r": float(np.exp(np.mean(np.log(rs)))),
            "spearman": float(np.mean(rhos)),
            "folds": per,
        }
    ok = {n: s for n, s in scores.items() if "r" in s and math.isfinite(s["r"])}
    if not ok:
        raise BuildError(f"{spec.name}: no model could be validated: {scores}")
    r_min = min(s["r"] for s in ok.values())
    tied = [n for n in candidates if n in ok and ok[n]["r"] <= r_min * (1 + band)]
    chosen = max(tied, key=lambda n: (ok[n]["spearman"], -tied.index(n)))
    return chosen, {"folds": folds, "noise_band": band, "scores": scores, "chosen": chosen}


# ---------------------------------------------------------------------------------------------
# The user-facing kernel object


class Kernel:
    """A built kernel: `select(D)`, `explain(D)`, `tuned(*args)`, code export."""

    def __init__(
        self,
        helper: HelperProgram,
        *,
        spec: KernelSpec | None,
        store: Store | None,
        device_key: str,
        rejected: Mapping[Block, str] | None = None,
        report: Mapping[str, Any] | None = None,
    ) -> None:
        self.helper = helper
        self.spec = spec
        self.store = store
        self.device_key = device_key
        self.report = dict(report or {})
        self.selector = Selector(
            helper, store=store, device_key=device_key, spec=spec, rejected=rejected
        )
        self._tuned: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return self.helper.kernel

    def select(self, D: Mapping[str, int] | Sequence[int] | int) -> Any:
        return self.selector.select(D)

    def explain(self, D: Mapping[str, int] | Sequence[int] | int) -> Any:
        return self.selector.explain(D)

    def tuned(self, *args: Any, stream: Any | None = None, refine: int = 0) -> None:
        """Launch with the configuration chosen for the arguments' D (see launcher.TunedKernel)."""
        self.launcher(refine=refine)(*args, stream=stream)

    def launcher(self, refine: int = 0) -> Any:
        """The TunedKernel (cached per refine setting) for repeated launches."""
        from klaraptor.launcher import TunedKernel

        if self.spec is None:
            raise KlaraptorError(
                f"{self.name}: launching needs the KernelSpec; pass spec= to klaraptor.load()"
            )
        if refine not in self._tuned:
            self._tuned[refine] = TunedKernel(self.spec, self.selector, refine=refine)
        return self._tuned[refine]

    def export_c(self) -> str:
        return self.helper.to_c_header()

    def export_python(self) -> str:
        return self.helper.to_python_module()


# ---------------------------------------------------------------------------------------------
# build / load


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False


def current_profile(store: Store, *, measure: bool = True, device_id: int = 0) -> DeviceProfile:
    """This machine's GPU profile: cached in the store, else measured (microbenchmarks)."""
    from klaraptor.device_profile import query_device

    found = query_device(device_id)
    cached = cached_profile(store, found.key)
    if cached is not None and not cached.missing_microbench:
        return cached
    if not measure:
        raise BuildError(f"no measured device profile for {found.key!r} in {store.path}")
    from klaraptor.microbench import measure_profile

    profile = measure_profile(device_id, store)
    save_profile(store, profile)
    return profile


def _default_sizes(spec: KernelSpec) -> list[dict[str, int]]:
    sizes = spec.meta.get("train_sizes")
    if not sizes:
        raise BuildError(
            f"{spec.name}: no training sizes given and the spec has no meta['train_sizes']"
        )
    return [spec.normalize_data(s) for s in sizes]


def build(
    spec: KernelSpec,
    sizes: Iterable[Mapping[str, int] | Sequence[int] | int] | None = None,
    *,
    model: str = DEFAULT_MODEL,
    store: Store | None = None,
    device: DeviceProfile | None = None,
    collect_options: Any | None = None,
    collect_data: bool | None = None,
    fit: FitOptions | None = None,
    progress: bool = True,
) -> Kernel:
    """Collect (where needed), fit and store the helper program of `spec`; returns the Kernel.

    Builds are incremental: points already in the store are not measured again, so adding sizes
    only measures the new ones. Without a GPU (`collect_data=False`, or none found), the points
    must already be in the store (e.g. imported from a recorded dataset) and `device` given.
    """
    t0 = time.perf_counter()
    store = store or Store()
    size_list = (
        [spec.normalize_data(s) for s in sizes] if sizes is not None else _default_sizes(spec)
    )
    if collect_data is None:
        collect_data = gpu_available()
    collect_report = None
    if collect_data:
        from klaraptor.collect import CollectOptions, collect

        device = device or current_profile(store)
        collect_report = collect(
            spec,
            size_list,
            store=store,
            device=device,
            options=collect_options or CollectOptions(),
            progress=progress,
        )
    elif device is None:
        raise BuildError(
            f"{spec.name}: no GPU to collect on; pass device= (e.g. recorded_profile('h200')) to "
            "build from measurements already in the store"
        )
    t_fit = time.perf_counter()
    kern = store.kernel(spec.name)
    info = ((kern or {}).get("summary", {}).get("collect") or {}).get(device.key)
    if not info or "attributes" not in info:
        raise BuildError(
            f"{spec.name}: the store has no kernel attributes for {device.key!r}; collect first"
        )
    attrs = KernelAttributes.from_dict(info["attributes"])
    train = training_set(store, spec, device.key, size_list)
    selection = None
    if model == "auto":
        model, selection = select_model(
            spec, device, attrs, train, sync_per_warp=info.get("sync_per_warp"), fit=fit
        )
    helper, report, rejected = make_helper(
        spec, model, device, attrs, train, sync_per_warp=info.get("sync_per_warp"), fit=fit
    )
    if selection is not None:
        report["model_selection"] = selection
    build_report = {
        "sizes": [dict(s) for s in size_list],
        "model": model,
        "fit_wall_s": time.perf_counter() - t_fit,
        "total_wall_s": time.perf_counter() - t0,
        "collect": None
        if collect_report is None
        else {
            "wall_s": collect_report.wall_s,
            "counts": collect_report.counts,
            "ncu": collect_report.ncu_status,
        },
        "rejected": {str(list(b)): why for b, why in rejected.items()},
        "fits": report,
    }
    store.put_build(
        spec.name, device.key, model, {"helper": helper.to_dict(), "report": build_report}
    )
    if selection is not None:  # also findable as the "auto" build
        store.put_build(
            spec.name, device.key, "auto", {"helper": helper.to_dict(), "report": build_report}
        )
    return Kernel(
        helper,
        spec=spec,
        store=store,
        device_key=device.key,
        rejected=rejected,
        report=build_report,
    )


def load(
    name: str,
    *,
    store: Store | None = None,
    device: str | None = None,
    model: str | None = None,
    spec: KernelSpec | None = None,
    force: bool = False,
) -> Kernel:
    """A built kernel from the store, without touching the GPU.

    `device` is the profile key of the GPU the choices are for; it defaults to this machine's GPU
    when there is one, else to any build. A build made on another GPU is refused with BuildError
    (its choices may not suit this GPU) unless `force`, which uses it with a warning.
    """
    import warnings

    store = store or Store()
    if device is None and gpu_available():
        from klaraptor.device_profile import query_device

        device = query_device().key
    rec = store.latest_build(name, device, model)
    if rec is None:
        builds = store.builds(name)
        if model is not None:
            builds = [b for b in builds if b["model"] == model]
        if not builds:
            raise BuildError(
                f"no build of kernel {name!r}{'' if model is None else f' with model {model!r}'} in "
                f"{store.path} (run klaraptor build first)"
            )
        others = sorted({b["device"] for b in builds})
        if not force:
            raise BuildError(
                f"{name} was built on {others}, not on {device!r}; its choices may not suit this GPU. "
                "Rebuild here, or pass force=True (--force) to use it anyway"
            )
        warnings.warn(
            f"using the build of {name} made on {others[0]!r} for {device!r} (forced)", stacklevel=2
        )
        rec = store.latest_build(name, others[0], model)
        assert rec is not None
    payload = rec["payload"]
    helper = HelperProgram.from_dict(payload["helper"])
    report = payload.get("report", {})
    rejected = {
        tuple(int(v) for v in k.strip("[]").split(",")): why
        for k, why in report.get("rejected", {}).items()
    }
    if spec is None:
        spec = _find_spec(name)
    return Kernel(
        helper, spec=spec, store=store, device_key=rec["device"], rejected=rejected, report=report
    )  # type: ignore[arg-type]


def _find_spec(name: str) -> KernelSpec | None:
    """The spec of a suite kernel by name, if it is one (others need spec= to launch)."""
    from klaraptor import suite

    try:
        return suite.get(name)
    except KlaraptorError:
        return None
