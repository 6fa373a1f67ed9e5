"""Device profile: the hardware parameters H the models read.

A profile combines the device query (limits, clocks, SMs, memory) with microbenchmark results
(memory latencies, departure delays, bandwidth, issue cycles for MWP-CWP; a latency and a gap per
resource for SAAKE, see klaraptor.collect.resources; `None` until measured, listed by
`missing_microbench`). Profiles are
cached in the store per `DeviceProfile.key`: what changes performance (GPU model, SM count, SM and
memory clocks, memory size). The driver is recorded beside it, not in it: a driver update keeps
the key (and every build made under it), and `klaraptor.load` warns instead of refusing. A
measured H200 profile is committed under `klaraptor/data/` so the models run without a GPU.

`provenance` records how the numbers were obtained. Convention: top-level "date", "command",
"commit", "host", "source" describe the run; an entry keyed by a field name (or under a
"fields" sub-dict) describes that one number, e.g.
`{"mem_latency_dram_cycles": "pointer chase, 1 GiB array, 4 KiB stride, median of 5"}`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import warnings
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from klaraptor.core.errors import KlaraptorError

# Microbenchmark fields: (field, unit, what it is). None until measured.
# The MWP-CWP inputs (hardware_params), measured by klaraptor.microbench:
MODEL_INPUT_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("mem_latency_dram_cycles", "cycles", "DRAM load latency (pointer chase), Mem_LD"),
    ("mem_latency_l2_cycles", "cycles", "L2 hit latency (pointer chase)"),
    ("departure_delay_coal", "cycles", "departure delay, coalesced warp load"),
    ("departure_delay_uncoal", "cycles", "departure delay, uncoalesced (per transaction)"),
    ("dram_bandwidth_gbs", "GB/s", "achievable DRAM bandwidth (streaming copy)"),
    ("issue_cycles", "cycles", "cycles to issue one warp instruction"),
)
# SAAKE's latency and gap per resource, measured by klaraptor.collect.resources (definitions there):
# latency = cycles from issue to a dependent instruction's issue; gap = SM cycles between
# successive warp instructions (128-B requests for l2/dram) the resource accepts per SM.
RESOURCES: tuple[tuple[str, str], ...] = (
    ("fp32", "FP32 pipe (FFMA)"),
    ("fp64", "FP64 pipe (DFMA)"),
    ("sfu", "special function unit (MUFU.EX2)"),
    ("alu", "integer ALU (LOP3, IADD3)"),
    ("imad", "integer multiply-add (IMAD)"),
    ("smem", "shared memory (LDS.32, conflict-free)"),
    ("issue", "warp instruction issue"),
    ("l2", "L2 hit (128-B warp request)"),
    ("l2_scatter", "L2 hit, scattered (a warp request of 32 lines, one 32-B sector each)"),
    ("dram", "DRAM (128-B warp request)"),
    ("dram_scatter", "DRAM, scattered (a warp request of 32 lines, one 32-B sector each)"),
    ("launch", "block dispatch (a thread block started on an SM)"),
)
# Figures a resource's benchmark measures beside its latency and gap (no latency of their own):
# the scatter benchmarks also write their lines, since the L2 serves a scattered store at about
# half the rate of a scattered load, and DRAM at about a third (H200, 2026-11-29).
RESOURCE_EXTRA_FIELDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "l2_scatter": (
        (
            "gap_l2_scatter_store_cycles",
            "cycles",
            "gap per SM, L2 hit, scattered stores (a warp store to 32 lines, one 32-B sector each)",
        ),
    ),
    "dram_scatter": (
        (
            "gap_dram_scatter_store_cycles",
            "cycles",
            "gap per SM, DRAM, scattered stores (a warp store to 32 fresh lines, one sector each)",
        ),
    ),
}
RESOURCE_FIELDS: tuple[tuple[str, str, str], ...] = tuple(
    item
    for res, what in RESOURCES
    for item in (
        (f"lat_{res}_cycles", "cycles", f"latency, {what}"),
        (f"gap_{res}_cycles", "cycles", f"gap per SM, {what}"),
        *RESOURCE_EXTRA_FIELDS.get(res, ()),
    )
)
MICROBENCH_FIELDS: tuple[tuple[str, str, str], ...] = MODEL_INPUT_FIELDS + RESOURCE_FIELDS
_MICROBENCH_NAMES = frozenset(f for f, _, _ in MICROBENCH_FIELDS)
# SAAKE's gap per busy SM with b SMs busy, per GPU-wide resource (SaakeResources).
BUSY_CURVE_FIELDS: frozenset[str] = frozenset({"l2_gap_by_busy_sms", "dram_gap_by_busy_sms"})
# Keys to_dict never writes but from_dict accepts quietly (derived values some writers add).
_DERIVED_KEYS = frozenset({"key", "peak_dram_bandwidth_gbs"})


@dataclass
class DeviceLimits:
    """What the device query says: the GPU's identity, clocks and limits (one field per
    cudaDeviceAttr read by `query_device`). The part of a profile occupancy and launch checks need."""

    name: str
    cc: tuple[int, int]
    driver: str
    runtime: str
    sm_clock_mhz: float
    mem_clock_mhz: float
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    smem_per_sm: int
    smem_per_block: int
    smem_per_block_optin: int
    reserved_smem_per_block: int
    l2_bytes: int
    mem_bus_width_bits: int
    total_mem_bytes: int | None = None

    @property
    def key(self) -> str:
        """The key of builds and measurements: what changes performance (GPU model, SM count, SM
        and memory clocks, memory size), not the driver (recorded separately, see `driver`)."""
        return device_key(
            self.name, self.sm_count, self.sm_clock_mhz, self.mem_clock_mhz, self.total_mem_bytes
        )

    @property
    def legacy_key(self) -> str:
        """The key klaraptor <= 0.1 (store schema 1) used: GPU name, driver and SM clock."""
        return f"{self.name}|driver {self.driver}|{self.sm_clock_mhz:.0f} MHz"

    @property
    def peak_dram_bandwidth_gbs(self) -> float:
        """Theoretical DRAM bandwidth: double data rate × memory clock × bus width."""
        return 2.0 * self.mem_clock_mhz * 1e6 * (self.mem_bus_width_bits / 8) / 1e9

    @property
    def arch(self) -> str:
        """`sm_90` style architecture name."""
        return f"sm_{self.cc[0]}{self.cc[1]}"


@dataclass
class MwpCwpParams:
    """The MWP-CWP model's measured inputs (`MODEL_INPUT_FIELDS`, by klaraptor.collect.microbench);
    None until measured."""

    mem_latency_dram_cycles: float | None = None
    mem_latency_l2_cycles: float | None = None
    departure_delay_coal: float | None = None
    departure_delay_uncoal: float | None = None
    dram_bandwidth_gbs: float | None = None
    issue_cycles: float | None = None

    @property
    def missing_model_inputs(self) -> list[str]:
        """MWP-CWP inputs not measured yet."""
        return [f for f, _, _ in MODEL_INPUT_FIELDS if getattr(self, f) is None]


@dataclass
class SaakeResources:
    """SAAKE's latency and gap per resource (`RESOURCE_FIELDS`, by klaraptor.collect.resources);
    None until measured. `klaraptor.device.resources.resource_params` reads them for the
    emulator."""

    lat_fp32_cycles: float | None = None
    gap_fp32_cycles: float | None = None
    lat_fp64_cycles: float | None = None
    gap_fp64_cycles: float | None = None
    lat_sfu_cycles: float | None = None
    gap_sfu_cycles: float | None = None
    lat_alu_cycles: float | None = None
    gap_alu_cycles: float | None = None
    lat_imad_cycles: float | None = None
    gap_imad_cycles: float | None = None
    lat_smem_cycles: float | None = None
    gap_smem_cycles: float | None = None
    lat_issue_cycles: float | None = None
    gap_issue_cycles: float | None = None
    lat_l2_cycles: float | None = None
    gap_l2_cycles: float | None = None
    lat_l2_scatter_cycles: float | None = None
    gap_l2_scatter_cycles: float | None = None
    gap_l2_scatter_store_cycles: float | None = None
    lat_dram_cycles: float | None = None
    gap_dram_cycles: float | None = None
    lat_dram_scatter_cycles: float | None = None
    gap_dram_scatter_cycles: float | None = None
    gap_dram_scatter_store_cycles: float | None = None
    lat_launch_cycles: float | None = None
    gap_launch_cycles: float | None = None
    # (busy SMs b, SM cycles per 128-B line per busy SM) with only b SMs loading, b ascending up
    # to every SM (scripts/device_sm_bandwidth.py): the L2 and DRAM rate an SM gets when few
    # are busy, which the emulator's share of the GPU-wide gap follows.
    l2_gap_by_busy_sms: tuple[tuple[int, float], ...] | None = None
    dram_gap_by_busy_sms: tuple[tuple[int, float], ...] | None = None


def _part(cls: type[Any], profile: Any) -> Any:
    return cls(**{f.name: getattr(profile, f.name) for f in dataclasses.fields(cls)})


# The bases in reverse order of their fields: a dataclass lays out its bases' fields from the
# last base to the first, so the flat field order (and `to_dict`'s) is limits, MWP-CWP inputs,
# SAAKE resources, provenance.
@dataclass
class DeviceProfile(SaakeResources, MwpCwpParams, DeviceLimits):
    """Hardware parameters of one GPU: its device limits (`DeviceLimits`), the MWP-CWP model's
    inputs (`MwpCwpParams`) and SAAKE's resources (`SaakeResources`), measured once per device
    key, with their provenance. A profile is each of the three (code that needs one part takes
    that type); `limits`, `mwp_cwp` and `resources` give each part alone."""

    provenance: dict[str, Any] = field(default_factory=dict)
    # The median relative IQR of this device's precisely timed points (klaraptor.collect.noise):
    # measured once, by the first collection on the device, and kept with the profile.
    timing_noise_band: float | None = None

    @property
    def limits(self) -> DeviceLimits:
        return _part(DeviceLimits, self)  # type: ignore[no-any-return]

    @property
    def mwp_cwp(self) -> MwpCwpParams:
        return _part(MwpCwpParams, self)  # type: ignore[no-any-return]

    @property
    def resources(self) -> SaakeResources:
        return _part(SaakeResources, self)  # type: ignore[no-any-return]

    @property
    def missing_microbench(self) -> list[str]:
        """Microbenchmark fields not measured yet (MWP-CWP inputs and SAAKE resources)."""
        return [f for f, _, _ in MICROBENCH_FIELDS if getattr(self, f) is None]

    def with_microbench(
        self, provenance: dict[str, Any] | None = None, **values: float
    ) -> DeviceProfile:
        """A copy with microbenchmark results filled in (and their provenance merged)."""
        unknown = set(values) - _MICROBENCH_NAMES
        if unknown:
            raise KlaraptorError(f"not microbenchmark fields: {sorted(unknown)}")
        prov = {**self.provenance, **(provenance or {})}
        return dataclasses.replace(self, provenance=prov, **values)  # type: ignore[arg-type]

    # -- model inputs -------------------------------------------------------------------------

    def hardware_params(self, *, allow_missing: bool = False) -> dict[str, float]:
        """The model inputs `hw_*` as floats.

        The memory bandwidth is the measured one when available, else the theoretical peak.
        Missing microbenchmark numbers raise (or are NaN with `allow_missing=True`), because a
        model silently evaluated on a made-up latency would pick configurations for no reason.
        """
        if self.missing_model_inputs and not allow_missing:
            raise KlaraptorError(
                f"device profile {self.key!r} lacks microbenchmark results "
                f"{self.missing_model_inputs}; run the microbenchmarks on this GPU "
                "(klaraptor.collect.microbench) or use the recorded profile (recorded_profile())"
            )

        def num(x: float | None) -> float:
            return math.nan if x is None else float(x)

        bw = self.dram_bandwidth_gbs
        return {
            "hw_clock_ghz": self.sm_clock_mhz / 1000.0,
            "hw_mem_bw_gbs": float(bw) if bw is not None else self.peak_dram_bandwidth_gbs,
            "hw_n_sm": float(self.sm_count),
            "hw_mem_ld": num(self.mem_latency_dram_cycles),
            "hw_mem_ld_l2": num(self.mem_latency_l2_cycles),
            "hw_dep_del_coal": num(self.departure_delay_coal),
            "hw_dep_del_uncoal": num(self.departure_delay_uncoal),
            "hw_issue_cycles": num(self.issue_cycles),
            "hw_l2_bytes": float(self.l2_bytes),
            "hw_max_threads_per_sm": float(self.max_threads_per_sm),
            "hw_max_blocks_per_sm": float(self.max_blocks_per_sm),
            "hw_regs_per_sm": float(self.regs_per_sm),
            "hw_smem_per_sm": float(self.smem_per_sm),
            "hw_reserved_smem": float(self.reserved_smem_per_block),
        }

    # -- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of every field (tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "timing_noise_band" and v is None:
                continue  # a profile without it reads and writes as before it existed
            if f.name in BUSY_CURVE_FIELDS:
                if v is not None:  # a profile without them reads and writes as before
                    out[f.name] = [[b, g] for b, g in v]
                continue
            out[f.name] = list(v) if isinstance(v, tuple) else v
        out["provenance"] = json.loads(json.dumps(self.provenance, default=str))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceProfile:
        """Inverse of to_dict. Unknown keys warn (a newer writer); missing required keys raise."""
        if not isinstance(data, dict):
            raise KlaraptorError(
                f"a device profile must be a JSON object, got {type(data).__name__}"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        required = [
            n
            for n, f in fields.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        label = data.get("name", "<unnamed>")
        missing = [n for n in required if n not in data]
        if missing:
            raise KlaraptorError(f"device profile {label!r} is missing required fields {missing}")
        unknown = sorted(set(data) - set(fields) - _DERIVED_KEYS)
        if unknown:
            warnings.warn(
                f"device profile {label!r}: ignoring unknown fields {unknown}",
                stacklevel=2,
            )
        kw: dict[str, Any] = {}
        try:
            for n in fields:
                if n not in data:
                    continue
                v = data[n]
                if n in ("cc",):
                    kw[n] = _int_tuple(v, 2, n)
                elif n in ("max_block_dim", "max_grid_dim"):
                    kw[n] = _int_tuple(v, 3, n)
                elif n in ("name", "driver", "runtime"):
                    kw[n] = str(v)
                elif n == "provenance":
                    kw[n] = dict(v or {})
                elif n in ("sm_clock_mhz", "mem_clock_mhz"):
                    kw[n] = float(v)
                elif n in _MICROBENCH_NAMES:
                    kw[n] = None if v is None else float(v)
                elif n in BUSY_CURVE_FIELDS:
                    kw[n] = None if v is None else _busy_curve(v, n)
                elif n == "timing_noise_band":
                    kw[n] = None if v is None else _fraction(v, n)
                elif n == "total_mem_bytes":
                    kw[n] = None if v is None else _int(v, n)
                else:
                    kw[n] = _int(v, n)
        except (TypeError, ValueError) as exc:
            raise KlaraptorError(f"device profile {label!r}: {exc}") from exc
        return cls(**kw)


def device_key(
    name: str,
    sm_count: int,
    sm_clock_mhz: float,
    mem_clock_mhz: float,
    total_mem_bytes: int | None,
) -> str:
    """`DeviceProfile.key` from its parts. The memory size is in whole GiB: the device query and
    nvidia-smi count a few hundred MiB differently, which must not split one GPU in two."""
    mem = "" if total_mem_bytes is None else f"|{round(total_mem_bytes / 2**30)} GiB"
    return f"{name}|{sm_count} SMs|{sm_clock_mhz:.0f} MHz|mem {mem_clock_mhz:.0f} MHz{mem}"


def _fraction(v: Any, name: str) -> float:
    f = float(v)
    if not (math.isfinite(f) and 0.0 <= f < 1.0):
        raise ValueError(f"field {name!r} must be a fraction in [0, 1), got {v!r}")
    return f


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"field {name!r} must be an integer, got {v!r}")
    return int(v)


def _busy_curve(v: Any, name: str) -> tuple[tuple[int, float], ...]:
    """A (busy SMs, gap) curve: pairs of a positive integer, ascending, and a positive gap."""
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"field {name!r} must be a non-empty list of [busy SMs, gap], got {v!r}")
    out: list[tuple[int, float]] = []
    for item in v:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValueError(f"field {name!r}: each entry must be [busy SMs, gap], got {item!r}")
        b, g = _int(item[0], name), float(item[1])
        if b < 1 or not (math.isfinite(g) and g > 0):
            raise ValueError(f"field {name!r}: busy SMs >= 1 and gap > 0, got {item!r}")
        if out and b <= out[-1][0]:
            raise ValueError(f"field {name!r}: busy SMs must ascend, got {b} after {out[-1][0]}")
        out.append((b, g))
    return tuple(out)


def _int_tuple(v: Any, n: int, name: str) -> tuple[int, ...]:
    t = tuple(_int(x, name) for x in v)
    if len(t) != n:
        raise ValueError(f"field {name!r} must have {n} entries, got {list(t)}")
    return t


# ---------------------------------------------------------------------------------------------
# Query, recorded profile, cache

# cudaDeviceAttr values (driver_types.h). Attributes, not cudaDeviceProp, because CUDA 13 removed
# clockRate and memoryClockRate from the struct.
_ATTRS: dict[str, int] = {
    "max_threads_per_block": 1,
    "max_block_dim_x": 2,
    "max_block_dim_y": 3,
    "max_block_dim_z": 4,
    "max_grid_dim_x": 5,
    "max_grid_dim_y": 6,
    "max_grid_dim_z": 7,
    "smem_per_block": 8,
    "warp_size": 10,
    "regs_per_block": 12,
    "clock_khz": 13,
    "sm_count": 16,
    "mem_clock_khz": 36,
    "mem_bus_width_bits": 37,
    "l2_bytes": 38,
    "max_threads_per_sm": 39,
    "cc_major": 75,
    "cc_minor": 76,
    "smem_per_sm": 81,
    "regs_per_sm": 82,
    "smem_per_block_optin": 97,
    "max_blocks_per_sm": 106,
    "reserved_smem_per_block": 111,
}


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _kernel_driver_version() -> str | None:
    """The NVIDIA kernel-module version (e.g. 580.95.05), finer than the CUDA driver API version."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    for tok in text.split():
        parts = tok.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return tok
    return None


def query_device(device_id: int = 0) -> DeviceProfile:
    """Read a GPU's limits through CuPy (microbenchmark fields stay None)."""
    try:
        import cupy  # lazy: the CPU test suite runs without CuPy
    except ImportError as exc:
        raise KlaraptorError("query_device needs CuPy (pip install 'klaraptor[cuda]')") from exc
    rt = cupy.cuda.runtime
    try:
        props = rt.getDeviceProperties(device_id)
        total_mem = int(props["totalGlobalMem"]) if "totalGlobalMem" in props else None
        a = {k: int(rt.deviceGetAttribute(v, device_id)) for k, v in _ATTRS.items()}
        cuda_driver = _cuda_version(int(rt.driverGetVersion()))
        cuda_runtime = _cuda_version(int(rt.runtimeGetVersion()))
    except Exception as exc:  # CUDARuntimeError and friends: no device, bad id, driver issue
        raise KlaraptorError(f"cannot query CUDA device {device_id}: {exc}") from exc
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    kernel_driver = _kernel_driver_version()
    driver = kernel_driver or f"cuda {cuda_driver}"
    return DeviceProfile(
        name=name,
        cc=(a["cc_major"], a["cc_minor"]),
        driver=driver,
        runtime=cuda_runtime,
        sm_clock_mhz=a["clock_khz"] / 1000.0,
        mem_clock_mhz=a["mem_clock_khz"] / 1000.0,
        sm_count=a["sm_count"],
        warp_size=a["warp_size"],
        max_threads_per_block=a["max_threads_per_block"],
        max_block_dim=(a["max_block_dim_x"], a["max_block_dim_y"], a["max_block_dim_z"]),
        max_grid_dim=(a["max_grid_dim_x"], a["max_grid_dim_y"], a["max_grid_dim_z"]),
        max_threads_per_sm=a["max_threads_per_sm"],
        max_blocks_per_sm=a["max_blocks_per_sm"],
        regs_per_sm=a["regs_per_sm"],
        regs_per_block=a["regs_per_block"],
        smem_per_sm=a["smem_per_sm"],
        smem_per_block=a["smem_per_block"],
        smem_per_block_optin=a["smem_per_block_optin"],
        reserved_smem_per_block=a["reserved_smem_per_block"],
        l2_bytes=a["l2_bytes"],
        mem_bus_width_bits=a["mem_bus_width_bits"],
        total_mem_bytes=total_mem,
        provenance={
            "source": "device query: cudaDeviceGetAttribute via CuPy",
            "device_id": device_id,
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "cuda_driver": cuda_driver,
            "cuda_runtime": cuda_runtime,
            "kernel_driver": kernel_driver,
            "cupy": getattr(cupy, "__version__", "?"),
        },
    )


def recorded_profile(name: str = "h200") -> DeviceProfile:
    """The committed, measured profile `klaraptor/data/<name>_profile.json`."""
    fname = f"{name}_profile.json"
    ref = resources.files("klaraptor") / "data" / fname
    try:
        text = ref.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise KlaraptorError(
            f"no recorded device profile {name!r}: {ref} does not exist; measure one on that GPU "
            "(query_device() plus the microbenchmarks) and commit it as data/" + fname
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KlaraptorError(f"recorded device profile {ref} is not valid JSON: {exc}") from exc
    # Accept both the bare profile and a {"profile": {...}, ...} envelope.
    if isinstance(data, dict) and isinstance(data.get("profile"), dict) and "name" not in data:
        data = data["profile"]
    return DeviceProfile.from_dict(data)


def with_known_memory_size(profile: dict[str, Any]) -> dict[str, Any]:
    """A profile dict with its memory size (part of the key). Profiles recorded before that field
    existed take it from the committed profile of the same GPU (name, SMs and clocks equal)."""
    if not isinstance(profile, dict) or profile.get("total_mem_bytes") is not None:
        return profile
    for ref in (resources.files("klaraptor") / "data").iterdir():
        if not ref.name.endswith("_profile.json"):
            continue
        known = recorded_profile(ref.name.removesuffix("_profile.json"))
        same = (known.name, known.sm_count, known.sm_clock_mhz, known.mem_clock_mhz) == (
            profile.get("name"),
            profile.get("sm_count"),
            profile.get("sm_clock_mhz"),
            profile.get("mem_clock_mhz"),
        )
        if same and known.total_mem_bytes is not None:
            return {**profile, "total_mem_bytes": known.total_mem_bytes}
    return profile


# ---------------------------------------------------------------------------------------------
# Display


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.4g} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.4g} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.4g} KiB"
    return f"{n} B"


def _provenance_of(profile: DeviceProfile, name: str) -> str:
    p = profile.provenance
    entry = p.get(name, (p.get("fields") or {}).get(name))
    if entry is None:
        return ""
    if isinstance(entry, dict):
        return ", ".join(f"{k}={v}" for k, v in entry.items())
    return str(entry)


def format_profile(profile: DeviceProfile, *, full: bool = True) -> str:
    """A readable table of the profile with units; `full`: also where each measured number came
    from (each microbenchmark's method and raw samples, long lines)."""
    p = profile
    rows: list[tuple[str, str, str]] = [
        ("name", p.name, ""),
        ("compute capability", f"{p.cc[0]}.{p.cc[1]} ({p.arch})", ""),
        ("driver / runtime", f"{p.driver} / {p.runtime}", ""),
        ("cache key", p.key, ""),
        ("SM clock", f"{p.sm_clock_mhz:.0f} MHz", ""),
        ("memory clock", f"{p.mem_clock_mhz:.0f} MHz", ""),
        ("SMs", str(p.sm_count), ""),
        ("warp size", str(p.warp_size), "threads"),
        ("max threads / block", str(p.max_threads_per_block), "threads"),
        ("max block dims", "×".join(map(str, p.max_block_dim)), "threads"),
        ("max grid dims", "×".join(map(str, p.max_grid_dim)), "blocks"),
        ("max threads / SM", str(p.max_threads_per_sm), "threads"),
        ("max blocks / SM", str(p.max_blocks_per_sm), "blocks"),
        ("registers / SM", str(p.regs_per_sm), "32-bit"),
        ("registers / block", str(p.regs_per_block), "32-bit"),
        ("shared memory / SM", _fmt_bytes(p.smem_per_sm), ""),
        ("shared memory / block", _fmt_bytes(p.smem_per_block), "(default)"),
        ("shared memory / block (opt-in)", _fmt_bytes(p.smem_per_block_optin), ""),
        ("reserved shared memory / block", _fmt_bytes(p.reserved_smem_per_block), ""),
        ("L2 cache", _fmt_bytes(p.l2_bytes), ""),
        ("memory bus width", str(p.mem_bus_width_bits), "bits"),
        (
            "memory size",
            "unknown" if p.total_mem_bytes is None else _fmt_bytes(p.total_mem_bytes),
            "",
        ),
        ("peak DRAM bandwidth", f"{p.peak_dram_bandwidth_gbs:.0f}", "GB/s (2 × clock × bus)"),
    ]
    w0 = max(len(r[0]) for r in rows)
    lines = [f"Device profile: {p.name}", ""]
    lines += [f"  {a:<{w0}}  {b} {c}".rstrip() for a, b, c in rows]
    lines += ["", "Microbenchmarks:"]
    mrows = []
    for name, unit, what in MICROBENCH_FIELDS:
        v = getattr(p, name)
        shown = "not measured" if v is None else f"{v:.4g} {unit}"
        mrows.append((name, shown, what, _provenance_of(p, name)))
    w1 = max(len(r[0]) for r in mrows)
    w2 = max(len(r[1]) for r in mrows)
    for name, shown, what, prov in mrows:
        lines.append(f"  {name:<{w1}}  {shown:<{w2}}  {what}")
        if prov and full:
            lines.append(f"  {'':<{w1}}  {'':<{w2}}  ↳ {prov}")
    run = [
        (k, p.provenance[k])
        for k in ("source", "date", "command", "commit", "host")
        if k in p.provenance
    ]
    if run:
        lines += ["", "Provenance:"]
        lines += [f"  {k}: {v}" for k, v in run]
    if not full:
        lines += ["", "(--full adds how each microbenchmark measured its number, with its samples)"]
    return "\n".join(lines)
