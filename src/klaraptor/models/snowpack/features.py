"""SNOWPACK's features: static ones per kernel (Table 1 in spirit), dynamic ones per (D, block).

Static features are read from the compiler's output (`klaraptor.isa`): PTX and SASS instruction
mix by class (loads and stores by state space, arithmetic by kind and type, SFU, branches,
barriers, calls), loads/stores/FMAs by loop depth, basic blocks, loops and their nesting,
parameters, whether the kernel only reads memory, registers, static/dynamic/local memory. Counts
enter as log(1 + count): kernels differ by orders of magnitude.

Dynamic features are exact per (D, block): the input size, the total threads launched (the
paper's "input size"), the block's shape, the grid, and what klaraptor knows exactly about the
launch on the GPU: occupancy (active blocks and warps per SM), waves and the last wave's fill,
and padding (threads launched beyond the fewest any candidate launches at this D).

`FEATURE_SET` names the feature set; it includes the ISA feature version it reads, so a change
on either side makes stored features and fitted models refuse to mix (`SnowpackError`).
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources as importlib_resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import WARP_SIZE, Block, DataSize, KernelAttributes
from klaraptor.device.occupancy import active_blocks_per_sm, arch_params
from klaraptor.isa.analysis import FEATURE_VERSION as ISA_FEATURE_VERSION
from klaraptor.models.snowpack.access import ACCESS, access_features
from klaraptor.program import Program
from klaraptor.store.records import StaticFeatures

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceLimits, DeviceProfile
    from klaraptor.isa.analysis import KernelISA
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

FEATURE_SET = f"snowpack-4/isa-{ISA_FEATURE_VERSION}"
ARCH = "sm_90"
RECORDED_FEATURES = "snowpack_features_sm90.json.gz"
RETRAIN = "`klaraptor bench train-snowpack` (trains it again from the store)"


class SnowpackError(KlaraptorError):
    """SNOWPACK cannot extract features or use a stored model (the message says how to fix it)."""


# Static features: name -> the ISA features (klaraptor.isa.feature_names) summed into it.
STATIC: dict[str, tuple[str, ...]] = {
    # memory instructions by state space (PTX)
    "ld_global": ("ptx_load_global", "ptx_load_generic"),
    "st_global": ("ptx_store_global", "ptx_store_generic"),
    "ld_shared": ("ptx_load_shared",),
    "st_shared": ("ptx_store_shared",),
    "ldst_local": ("ptx_load_local", "ptx_store_local"),
    "ld_param_const": ("ptx_load_param", "ptx_load_const"),
    "atomic": ("ptx_atomic",),
    # arithmetic (PTX)
    "add": ("ptx_add",),
    "sub": ("ptx_sub",),
    "mul_mad": ("ptx_mul", "ptx_mad"),
    "div": ("ptx_div",),
    "rem": ("ptx_rem",),
    "logic": ("ptx_logic", "ptx_shift", "ptx_bit"),
    "compare": ("ptx_compare", "ptx_select"),
    "convert": ("ptx_convert",),
    "sfu": ("ptx_sfu",),
    "arith_int": ("ptx_arith_int",),
    "arith_f32": ("ptx_arith_f32",),
    "arith_f64": ("ptx_arith_f64",),
    "pointer_arith": ("ptx_int64_arith",),
    "ptx_total": ("ptx_total",),
    # control (PTX)
    "branch": ("ptx_branch",),
    "call": ("calls",),
    "barrier": ("barriers",),
    # by loop depth (PTX global memory; SASS loads and FMAs)
    "ld_global_depth0": ("ptx_load_global_depth0",),
    "ld_global_depth1": ("ptx_load_global_depth1",),
    "ld_global_depth2": ("ptx_load_global_depth2+",),
    "st_global_depth0": ("ptx_store_global_depth0",),
    "st_global_depth1": ("ptx_store_global_depth1",),
    "st_global_depth2": ("ptx_store_global_depth2+",),
    "sass_ld_shared_depth1": ("sass_shared_load_depth1", "sass_shared_load_depth2+"),
    "sass_fma_depth1": ("sass_fma_depth1",),
    "sass_fma_depth2": ("sass_fma_depth2+",),
    # SASS mix
    "sass_total": ("sass_total",),
    "sass_global_load": ("sass_global_load",),
    "sass_global_store": ("sass_global_store",),
    "sass_shared": ("sass_shared_load", "sass_shared_store"),
    "sass_fma": ("sass_fma",),
    "sass_alu": ("sass_alu",),
    "sass_fp64": ("sass_fp64",),
    "sass_sfu": ("sass_sfu",),
    "sass_control": ("sass_control",),
    # basic blocks and loops (PTX)
    "basic_blocks": ("ptx_blocks",),
    "bb_size_min": ("ptx_block_size_min",),
    "bb_size_max": ("ptx_block_size_max",),
    "bb_size_mean": ("ptx_block_size_mean",),
    "has_loop": ("ptx_loops",),
    "loops": ("ptx_loops",),
    "max_loop_depth": ("ptx_max_loop_depth_with_calls",),
    "has_nested_loops": ("ptx_nested_loops",),
    "nested_loops": ("ptx_nested_loops",),
    # kernel interface and resources
    "params": ("params",),
    "only_reads_memory": ("only_reads_memory",),
    "no_memory_access": ("no_memory_access",),
    "registers": ("registers",),
    "shared_static_bytes": ("ptx_shared_static_bytes",),  # cuobjdump adds the reserved 1 KB
    "local_bytes": ("local_bytes", "stack_bytes"),
    "stack_allocs": ("ptx_local_decls",),  # the paper's stack allocation instructions
    "dynamic_shared": ("dynamic_shared",),
}
# Flags and small figures enter as they are; counts and bytes as log(1 + x).
_FLAGS = {"has_loop", "has_nested_loops"}  # 1 when the count is positive (Table 1's booleans)
_LINEAR = {"only_reads_memory", "no_memory_access", "dynamic_shared", "max_loop_depth", *_FLAGS}

DYNAMIC: tuple[str, ...] = (
    "log_n",  # log2 of the product of the data parameters (the input size)
    "log_total_threads",  # log2 of the threads launched (SNOWPACK's input size)
    "log_block_threads",
    "log_bx",
    "log_by",
    "log_bz",
    "log_grid_blocks",
    "occupancy",  # active warps / max warps per SM
    "active_blocks",  # per SM
    "log_waves",  # log2 of grid blocks / (active blocks per SM × SMs)
    "last_wave_fill",  # waves / ceil(waves)
    "padding",  # log2 of threads launched / the fewest any candidate launches at this D
    "log_dyn_smem",  # log2(1 + dynamic shared bytes per block)
    "tail_weight",  # 1 / ceil(waves): the share of the time in the last wave (bounded in size)
    # Grids smaller than the GPU (a few long-running threads per column, one block): how many
    # SMs get work at all and how many threads each carries. 4: added in feature set 4.
    "busy_sms",  # min(grid blocks, SMs) / SMs
    "log_threads_per_busy_sm",  # log2 of threads launched / min(grid blocks, SMs)
)


def static_names() -> tuple[str, ...]:
    """The static features: the instruction mix (`STATIC`), then the access patterns."""
    return (*STATIC, *ACCESS)


@functools.cache
def feature_names() -> tuple[str, ...]:
    """The columns of a feature matrix, in order (static, then dynamic)."""
    return (*(f"s_{n}" for n in static_names()), *DYNAMIC)


def from_isa_features(isa_features: Mapping[str, float], kernel: str) -> dict[str, float]:
    """SNOWPACK's static features from `KernelISA.features` (this ISA feature version)."""
    missing = sorted({k for parts in STATIC.values() for k in parts} - set(isa_features))
    if missing:
        raise SnowpackError(
            f"{kernel}: the static analysis lacks features {missing[:5]} that feature set "
            f"{FEATURE_SET} reads (a klaraptor.isa of another feature version?); re-record the "
            "ISA (scripts/record_isa.py) and retrain with " + RETRAIN
        )
    out = {name: float(sum(isa_features[k] for k in parts)) for name, parts in STATIC.items()}
    for name in _FLAGS:
        out[name] = float(out[name] > 0)
    return out


def from_isa(isa: KernelISA) -> dict[str, float]:
    """Every static feature of a kernel's static analysis: the mix and the access patterns."""
    return {**from_isa_features(isa.features, isa.name), **access_features(isa)}


def attributes_from(static: Mapping[str, float], device: DeviceLimits) -> KernelAttributes:
    """Kernel attributes as the compiler states them (no GPU query): registers, static shared
    memory, local memory; the thread limit follows from the registers."""
    regs = int(static["registers"])
    arch = arch_params(device.cc)
    limit = device.max_threads_per_block
    if regs > 0:
        # The register file must hold one block: floor to whole warps.
        per_warp = int(math.ceil(regs * WARP_SIZE / arch.reg_alloc_unit) * arch.reg_alloc_unit)
        limit = min(limit, max(WARP_SIZE, (arch.regs_per_block // per_warp) * WARP_SIZE))
    return KernelAttributes(
        num_regs=regs,
        static_smem=int(static["shared_static_bytes"]),
        const_size=0,
        local_size=int(static["local_bytes"]),
        max_threads_per_block=int(limit),
        # Not opted in (the CUDA default), as collection found for every suite kernel.
        max_dynamic_smem=int(arch.smem_per_block) - int(static["shared_static_bytes"]),
    )


def static_vector(static: Mapping[str, float]) -> np.ndarray:
    return np.array(
        [static[n] if n in _LINEAR else math.log1p(max(static[n], 0.0)) for n in static_names()],
        dtype=np.float64,
    )


# Output names of the launch program (not valid spec names, so no data parameter collides).
_LAUNCH_OUT = ("_grid_x", "_grid_y", "_grid_z", "_dyn_smem")


class CandidateFeatures:
    """Feature rows of one kernel's candidate blocks at any D.

    Built once per (kernel, candidate list): the static columns and everything that depends on
    the block alone (shape, threads, warps) are filled in a preallocated matrix; `at(D)` then
    recomputes only the D-dependent columns (grid, launched threads, waves, padding, the input
    size) and occupancy only when the dynamic shared memory changed (it rarely depends on D).
    Rows of blocks that cannot launch at D are NaN (the caller leaves them out).
    """

    def __init__(
        self,
        spec: KernelSpec,
        blocks: Sequence[Block] | np.ndarray,
        static: Mapping[str, float],
        device: DeviceProfile,
        static_vec: np.ndarray | None = None,
    ) -> None:
        self.spec = spec
        self.device = device
        b = np.asarray(blocks, dtype=np.float64).reshape(-1, 3)
        self.bx, self.by, self.bz = (np.ascontiguousarray(b[:, i]) for i in range(3))
        self.threads = self.bx * self.by * self.bz
        self._warps = np.ceil(self.threads / WARP_SIZE)
        self._threads_int = self.threads.astype(np.int64)
        self._regs = int(static["registers"])
        self._static_smem = float(static["shared_static_bytes"])
        self._max_warps = arch_params(device.cc).max_warps_per_sm
        # The launch formulas as one program, built once (evaluating it is most of a call).
        items = list(zip(_LAUNCH_OUT, spec.grid_exprs()))
        smem = spec.smem_expr()
        if smem is not None:
            items.append((_LAUNCH_OUT[3], smem))
        self._launch = Program(
            "snowpack_launch",
            (*spec.data_names, "bx", "by", "bz"),
            items,
            [n for n, _ in items],
        )
        self._dyn: np.ndarray | None = None  # dynamic shared memory of the cached occupancy
        self._active = np.zeros(0)
        sv = static_vector(static) if static_vec is None else static_vec
        self._base = np.empty((len(b), len(sv) + len(DYNAMIC)))
        self._base[:, : len(sv)] = sv
        col = len(sv) + np.arange(len(DYNAMIC))
        self._col = dict(zip(DYNAMIC, col.tolist()))
        for name, v in (
            ("log_block_threads", np.log2(self.threads)),
            ("log_bx", np.log2(self.bx)),
            ("log_by", np.log2(self.by)),
            ("log_bz", np.log2(self.bz)),
        ):
            self._base[:, self._col[name]] = v

    def __len__(self) -> int:
        return len(self.threads)

    def _occupancy(self, dyn: np.ndarray) -> np.ndarray:
        if self._dyn is None or not np.array_equal(dyn, self._dyn):
            smem = (self._static_smem + dyn).astype(np.int64)
            act = active_blocks_per_sm(self._threads_int, self._regs, smem, self.device.cc)
            self._active = np.where(act > 0, act, np.nan).astype(np.float64)
            self._dyn = dyn
        return self._active

    def at(self, D: DataSize) -> np.ndarray:
        """The feature matrix at D (a new array; one row per candidate)."""
        env: dict[str, Any] = {n: D[n] for n in self.spec.data_names}
        env.update(bx=self.bx, by=self.by, bz=self.bz)
        out = self._launch.evaluate(env)  # float64 arrays, one entry per candidate
        gx, gy, gz = (out[k] for k in _LAUNCH_OUT[:3])
        ok = self.spec.grid_valid(gx, gy, gz)
        dyn = out[_LAUNCH_OUT[3]] if _LAUNCH_OUT[3] in out else np.zeros(len(self.threads))
        active = self._occupancy(dyn)
        grid_blocks = np.where(ok, gx * gy * gz, np.nan)
        waves = grid_blocks / (active * self.device.sm_count)
        full_waves = np.ceil(waves)
        launched = grid_blocks * self.threads
        fewest = np.nanmin(launched) if np.isfinite(launched).any() else np.nan
        n = float(np.prod([max(v, 1) for v in D.values()]))
        X = self._base.copy()
        c = self._col
        X[:, c["log_n"]] = math.log2(n)
        X[:, c["log_total_threads"]] = np.log2(launched)
        X[:, c["log_grid_blocks"]] = np.log2(grid_blocks)
        X[:, c["occupancy"]] = active * self._warps / self._max_warps
        X[:, c["active_blocks"]] = active
        X[:, c["log_waves"]] = np.log2(waves)
        X[:, c["last_wave_fill"]] = waves / full_waves
        X[:, c["tail_weight"]] = 1.0 / full_waves
        X[:, c["padding"]] = np.log2(launched / fewest)
        busy = np.minimum(grid_blocks, self.device.sm_count)
        X[:, c["busy_sms"]] = busy / self.device.sm_count
        X[:, c["log_threads_per_busy_sm"]] = np.log2(launched / busy)
        X[:, c["log_dyn_smem"]] = np.log2(1.0 + dyn)
        return X


def feature_matrix(
    spec: KernelSpec,
    D: DataSize,
    blocks: Sequence[Block],
    static: Mapping[str, float],
    device: DeviceProfile,
    static_vec: np.ndarray | None = None,
) -> np.ndarray:
    """Static and dynamic features of every block at D: one row per block (NaN rows where a
    block cannot launch). For many D over the same blocks, keep a `CandidateFeatures`."""
    return CandidateFeatures(spec, blocks, static, device, static_vec).at(D)


# -- where static features come from ---------------------------------------------------------


def recorded_features_path() -> Path:
    return Path(str(importlib_resources.files("klaraptor") / "data" / RECORDED_FEATURES))


def load_recorded_features(path: str | Path | None = None) -> dict[str, StaticFeatures]:
    """The shipped static features of every suite kernel (derived from `isa_sm90.json.gz`).
    A file of another feature set is refused: mixing versions would give wrong predictions."""
    p = Path(path) if path is not None else recorded_features_path()
    try:
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SnowpackError(
            f"cannot read the recorded SNOWPACK features {p} ({exc}); write them again with "
            "`python scripts/record_snowpack.py`"
        ) from None
    if data.get("feature_set") != FEATURE_SET:
        raise SnowpackError(
            f"{p} holds feature set {data.get('feature_set')!r}, this klaraptor uses "
            f"{FEATURE_SET!r}; write it again with `python scripts/record_snowpack.py`"
        )
    return {
        k: StaticFeatures(k, data["arch"], FEATURE_SET, dict(v), data.get("source", "recorded"))
        for k, v in data["kernels"].items()
    }


def extract_static(spec: KernelSpec, arch: str = ARCH) -> StaticFeatures:
    """Compile `spec` with NVRTC and read its static features (needs the `isa` extra)."""
    from klaraptor.isa import analyze

    try:
        isa = analyze(spec, arch, strict=False)
    except KlaraptorError as exc:
        raise SnowpackError(
            f"cannot extract the static features of {spec.name!r}: {exc}. SNOWPACK reads them "
            "from the compiled kernel (pip install 'klaraptor[isa]' gives NVRTC and cuobjdump "
            "on any CPU); fix the kernel source so it compiles for " + arch
        ) from None
    return StaticFeatures(spec.name, arch, FEATURE_SET, from_isa(isa), "nvrtc")


def static_features(
    spec: KernelSpec | None,
    name: str,
    *,
    store: Store | None = None,
    arch: str = ARCH,
    recorded: Mapping[str, StaticFeatures] | None = None,
) -> StaticFeatures:
    """A kernel's static features: from the store, else the shipped recorded ones (suite kernels
    whose spec is unchanged), else NVRTC. What is found or extracted is kept in the store."""
    if store is not None:
        rec = store.static_features(name, arch, FEATURE_SET)
        if rec is not None:
            return rec
    found = None
    table = recorded if recorded is not None else _recorded_cache()
    rec = table.get(name)
    if rec is not None and (spec is None or _recorded_fingerprint(name) == spec.fingerprint()):
        found = rec
    if found is None:
        if spec is None:
            others = store.static_feature_versions(name) if store is not None else []
            extra = (
                f" (the store has features of other versions {others}; extract them again)"
                if others
                else ""
            )
            raise SnowpackError(
                f"no static features of kernel {name!r} for feature set {FEATURE_SET}{extra}; "
                "SNOWPACK needs the kernel's spec to compile it"
            )
        found = extract_static(spec, arch)
    if store is not None:
        store.put_static_features(found)
    return found


_CACHE: dict[str, Any] = {}


def _recorded_cache() -> dict[str, StaticFeatures]:
    if "features" not in _CACHE:
        _CACHE["features"] = load_recorded_features()
    return _CACHE["features"]


def _recorded_fingerprint(name: str) -> str | None:
    if "fingerprints" not in _CACHE:
        with gzip.open(recorded_features_path(), "rt", encoding="utf-8") as fh:
            _CACHE["fingerprints"] = json.load(fh).get("fingerprints", {})
    return _CACHE["fingerprints"].get(name)


__all__ = [
    "ARCH",
    "DYNAMIC",
    "FEATURE_SET",
    "STATIC",
    "SnowpackError",
    "attributes_from",
    "CandidateFeatures",
    "extract_static",
    "feature_matrix",
    "feature_names",
    "from_isa",
    "from_isa_features",
    "static_names",
    "load_recorded_features",
    "static_features",
]
