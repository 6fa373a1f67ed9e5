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

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources as importlib_resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.errors import KlaraptorError
from klaraptor.isa.analysis import FEATURE_VERSION as ISA_FEATURE_VERSION
from klaraptor.occupancy import active_blocks_per_sm, arch_params
from klaraptor.store.records import StaticFeatures
from klaraptor.types import WARP_SIZE, Block, DataSize, KernelAttributes

if TYPE_CHECKING:
    from klaraptor.device_profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

FEATURE_SET = f"snowpack-2/isa-{ISA_FEATURE_VERSION}"
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
    "add_sub": ("ptx_add", "ptx_sub"),
    "mul_mad": ("ptx_mul", "ptx_mad"),
    "div_rem": ("ptx_div", "ptx_rem"),
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
    "loops": ("ptx_loops",),
    "max_loop_depth": ("ptx_max_loop_depth_with_calls",),
    "nested_loops": ("ptx_nested_loops",),
    # kernel interface and resources
    "params": ("params",),
    "only_reads_memory": ("only_reads_memory",),
    "no_memory_access": ("no_memory_access",),
    "registers": ("registers",),
    "shared_static_bytes": ("ptx_shared_static_bytes",),  # cuobjdump adds the reserved 1 KB
    "local_bytes": ("local_bytes", "stack_bytes"),
    "dynamic_shared": ("dynamic_shared",),
}
# Flags and small figures enter as they are; counts and bytes as log(1 + x).
_LINEAR = {"only_reads_memory", "no_memory_access", "dynamic_shared", "max_loop_depth"}

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
)


def static_names() -> tuple[str, ...]:
    return tuple(STATIC)


def feature_names() -> tuple[str, ...]:
    """The columns of a feature matrix, in order (static, then dynamic)."""
    return (*(f"s_{n}" for n in STATIC), *DYNAMIC)


def from_isa_features(isa_features: Mapping[str, float], kernel: str) -> dict[str, float]:
    """SNOWPACK's static features from `KernelISA.features` (this ISA feature version)."""
    missing = sorted({k for parts in STATIC.values() for k in parts} - set(isa_features))
    if missing:
        raise SnowpackError(
            f"{kernel}: the static analysis lacks features {missing[:5]} that feature set "
            f"{FEATURE_SET} reads (a klaraptor.isa of another feature version?); re-record the "
            "ISA (scripts/record_isa.py) and retrain with " + RETRAIN
        )
    return {name: float(sum(isa_features[k] for k in parts)) for name, parts in STATIC.items()}


def attributes_from(static: Mapping[str, float], device: DeviceProfile) -> KernelAttributes:
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
        [static[n] if n in _LINEAR else math.log1p(max(static[n], 0.0)) for n in STATIC],
        dtype=np.float64,
    )


def dynamic_matrix(
    spec: KernelSpec,
    D: DataSize,
    blocks: Sequence[Block],
    static: Mapping[str, float],
    device: DeviceProfile,
) -> np.ndarray:
    """The dynamic features of every block at D (rows aligned with `blocks`), vectorised.
    Blocks that cannot launch at D get NaN rows (the caller leaves them out)."""
    b = np.asarray(blocks, dtype=np.float64).reshape(-1, 3)
    bx, by, bz = b[:, 0], b[:, 1], b[:, 2]
    gx, gy, gz = spec.grid_arrays(D, bx, by, bz)
    ok = spec.grid_valid(gx, gy, gz)
    threads = bx * by * bz
    grid_blocks = np.where(ok, gx * gy * gz, np.nan)
    dyn = spec.dynamic_smem_arrays(D, bx, by, bz)
    smem = float(static["shared_static_bytes"]) + dyn
    active = active_blocks_per_sm(
        threads.astype(np.int64), int(static["registers"]), smem.astype(np.int64), device.cc
    ).astype(np.float64)
    active = np.where(active > 0, active, np.nan)
    max_warps = arch_params(device.cc).max_warps_per_sm
    warps = np.ceil(threads / WARP_SIZE)
    waves = grid_blocks / (active * device.sm_count)
    launched = grid_blocks * threads
    fewest = np.nanmin(launched) if np.isfinite(launched).any() else np.nan
    n = float(np.prod([max(v, 1) for v in D.values()]))
    cols = [
        np.full(len(b), math.log2(n)),
        np.log2(launched),
        np.log2(threads),
        np.log2(bx),
        np.log2(by),
        np.log2(bz),
        np.log2(grid_blocks),
        active * warps / max_warps,
        active,
        np.log2(waves),
        waves / np.ceil(waves),
        np.log2(launched / fewest),
        np.log2(1.0 + dyn),
    ]
    return np.stack(cols, axis=1)


def feature_matrix(
    spec: KernelSpec,
    D: DataSize,
    blocks: Sequence[Block],
    static: Mapping[str, float],
    device: DeviceProfile,
    static_vec: np.ndarray | None = None,
) -> np.ndarray:
    """Static and dynamic features of every block at D: one row per block (NaN rows where a
    block cannot launch)."""
    dyn = dynamic_matrix(spec, D, blocks, static, device)
    sv = static_vector(static) if static_vec is None else static_vec
    return np.hstack([np.broadcast_to(sv, (dyn.shape[0], sv.size)), dyn])


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
    return StaticFeatures(
        spec.name, arch, FEATURE_SET, from_isa_features(isa.features, spec.name), "nvrtc"
    )


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
    "dynamic_matrix",
    "extract_static",
    "feature_matrix",
    "feature_names",
    "from_isa_features",
    "load_recorded_features",
    "static_features",
]
