"""Reading Kernel Tuner's files: the cache, T4 results (+ metadata) and a dumped results list.

The formats, as Kernel Tuner 1.x writes them (read from the source of 1.5.0):

- **cache** (`tune_kernel(cache=...)`): one JSON object `{"device_name", "kernel_name",
  "problem_size", "tune_params_keys", "tune_params", "objective", "cache": {"v1,v2,...": record}}`,
  written incrementally: the header first, then one `"key": {...},` line per configuration; it is
  closed (`}` `}`) only when tuning ends, so an interrupted run leaves it unterminated, possibly
  in the middle of a record. `problem_size` is an int, a list, or "callable".
- **record**: the tunables, "time" (ms, the mean of "times"), "times" (ms, one per launch),
  "compile_time", "verification_time", "benchmark_time", "timestamp", observer outputs (e.g.
  "num_regs" from RegisterObserver) and metrics; a configuration that failed carries
  `"__error__": "InvalidConfig" | "CompilationFailedConfig" | "RuntimeFailedConfig"` (before 1.0
  the error name stood in "time" instead).
- **T4 results** (`file_utils.store_output_file`): `{"schema_version", "results": [{"configuration",
  "times": {"runtimes", ...}, "invalidity", "correctness", "measurements": [{"name", "value",
  "unit"}], "objectives", "timestamp"}], "metadata": {"timeunit": "milliseconds"}}`. It names
  neither the GPU nor the problem size; the GPU is in the **T4 metadata** file
  (`store_metadata_file`: nvidia-smi's XML as JSON under `metadata.environment.device_query`).
- **results list**: what `tune_kernel` returns, dumped as JSON, alone or as the pair
  `[results, env]`. It does not say which fields are tunables, and a dumped error becomes
  `"__error__": ""` (the class name is lost).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from klaraptor.core.errors import KlaraptorError

if TYPE_CHECKING:
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Measurement

# Kernel Tuner's error classes → (klaraptor status, reason).
ERRORS: dict[str, tuple[str, str]] = {
    "InvalidConfig": ("rejected", "Kernel Tuner: InvalidConfig (restrictions or device limits)"),
    "CompilationFailedConfig": ("failed", "Kernel Tuner: CompilationFailedConfig"),
    "RuntimeFailedConfig": ("failed", "Kernel Tuner: RuntimeFailedConfig (launch failed)"),
    "ErrorConfig": ("failed", "Kernel Tuner: ErrorConfig"),
    # T4 "invalidity" values
    "constraints": ("rejected", "Kernel Tuner (T4): invalid by constraints"),
    "compile": ("failed", "Kernel Tuner (T4): compilation failed"),
    "runtime": ("failed", "Kernel Tuner (T4): runtime failure"),
    "timeout": ("failed", "Kernel Tuner (T4): timeout"),
    "correctness": ("failed", "Kernel Tuner (T4): wrong output"),
    "": ("failed", "Kernel Tuner: failed (the error kind was lost when the results were dumped)"),
}
T4_INVALIDITY = ("timeout", "compile", "runtime", "correctness", "constraints", "correct")
# Fields of a result record that Kernel Tuner itself writes (never tunables).
KT_FIELDS = frozenset(
    {
        "time",
        "times",
        "compile_time",
        "verification_time",
        "benchmark_time",
        "strategy_time",
        "framework_time",
        "timestamp",
        "__error__",
        "num_regs",
    }
)
_NOT_EXTRA = KT_FIELDS - {"num_regs"}
NO_PROBLEM_SIZE = object()
BLOCK_NAMES = ("block_size_x", "block_size_y", "block_size_z")
T4_SCHEMA_VERSION = "1.0.0"  # the T4 results/metadata schema Kernel Tuner 1.x writes  # the format does not record a problem size


class KernelTunerImportError(KlaraptorError):
    """A Kernel Tuner file cannot be imported as asked (device, kernel, mapping, tunables)."""


class KernelTunerFileError(KernelTunerImportError):
    """A Kernel Tuner file that cannot be read as needed; names the file and the field."""

    def __init__(self, path: Path | str, where: str, problem: str, fix: str = "") -> None:
        self.path = Path(path)
        self.field = where
        msg = f"Kernel Tuner file {self.path}: {where}: {problem}"
        super().__init__(f"{msg}; {fix}" if fix else msg)


@dataclass
class Record:
    """One configuration as a file holds it, before any mapping to klaraptor's terms."""

    where: str  # e.g. "cache['32,4']" or "results[3]", for error messages
    params: dict[str, Any]  # tunables (T4: the configuration; results list: every field)
    error: str | None  # None when the configuration ran, else its error / invalidity name
    time_ms: Any = None
    samples: Any = None
    extra: dict[str, Any] = field(default_factory=dict)  # measurements and observer outputs
    timestamp: str | None = None


@dataclass
class KTFile:
    """A parsed Kernel Tuner file."""

    path: Path
    fmt: str  # "cache", "t4" or "results"
    records: list[Record]
    tunables: list[str] | None  # None: the format does not say (a results list)
    tune_values: dict[str, list[Any]] | None = None
    kernel_name: str | None = None
    device_name: str | None = None
    device_field: str = ""  # where the device name was read
    driver: str | None = None
    problem_size: Any = NO_PROBLEM_SIZE
    interrupted: bool = False  # an unterminated cache
    dropped_partial: bool = False  # its last record was cut off and dropped
    klaraptor: dict[str, Any] | None = None  # our own export's provenance


def read_kt_file(path: str | Path, metadata: str | Path | None = None) -> KTFile:
    """Parse any of the formats above; `metadata` is a T4 metadata file (found beside T4
    results when not given)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KernelTunerFileError(p, "file", f"cannot read it ({exc})") from None
    interrupted = dropped = False
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        if not _looks_like_cache(text):
            raise KernelTunerFileError(
                p, f"line {exc.lineno} column {exc.colno}", f"malformed JSON ({exc.msg})"
            ) from None
        obj, dropped = _repair_cache(p, text, exc)
        interrupted = True
    if isinstance(obj, dict) and "cache" in obj and "tune_params_keys" in obj:
        f = _cache(p, obj)
        f.interrupted, f.dropped_partial = interrupted, dropped
        return f
    if isinstance(obj, dict) and isinstance(obj.get("results"), list) and "schema_version" in obj:
        return _t4(p, obj, metadata)
    if isinstance(obj, list):
        return _results(p, obj)
    if isinstance(obj, dict) and "metadata" in obj and "schema_version" in obj:
        raise KernelTunerFileError(
            p,
            "metadata",
            "this is a T4 metadata file, which holds no measurements",
            "import the T4 results file and pass this one as metadata=",
        )
    if isinstance(obj, dict) and "data" in obj and "tunable_parameters" in obj:
        raise KernelTunerFileError(
            p,
            "data",
            "this is a kernel_tuner.integration results file (store_results), which keeps only "
            "the best configurations",
            "import the cache file of the same tuning run (tune_kernel(cache=...)) instead",
        )
    keys = sorted(obj)[:12] if isinstance(obj, dict) else type(obj).__name__
    raise KernelTunerFileError(
        p,
        "top level",
        f"unknown format (found {keys})",
        "expected a Kernel Tuner cache (tune_params_keys, cache), a T4 results file "
        "(schema_version, results) or a dumped tune_kernel results list",
    )


# ---------------------------------------------------------------------------------------------
# Cache


def _looks_like_cache(text: str) -> bool:
    s = text.lstrip()
    return s.startswith("{") and '"tune_params_keys"' in s and bool(re.search(r'"cache":\s*\{', s))


def _repair_cache(p: Path, text: str, first: json.JSONDecodeError) -> tuple[Any, bool]:
    """Close an unterminated cache as Kernel Tuner does; drop a last record cut mid-write."""
    s = text.rstrip()
    attempts = [(s, False)]
    cut = s.rfind("\n")  # records are one per line: the last line may be a partial record
    if cut > 0:
        attempts.append((s[:cut].rstrip(), True))
    for body, dropped in attempts:
        if body.endswith(","):
            body = body[:-1]
        try:
            return json.loads(body + "}\n}"), dropped
        except json.JSONDecodeError:
            continue
    raise KernelTunerFileError(
        p,
        f"line {first.lineno} column {first.colno}",
        f"malformed JSON ({first.msg}), and it cannot be read as an unterminated cache either",
    )


def _cache(p: Path, obj: dict[str, Any]) -> KTFile:
    keys = obj["tune_params_keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise KernelTunerFileError(p, "tune_params_keys", f"expected a list of names, got {keys!r}")
    entries = obj["cache"]
    if not isinstance(entries, dict):
        raise KernelTunerFileError(p, "cache", f"expected an object, got {type(entries).__name__}")
    for name in ("device_name", "kernel_name"):
        if not isinstance(obj.get(name), str):
            raise KernelTunerFileError(p, name, f"missing or not a string ({obj.get(name)!r})")
    records = []
    for key, rec in entries.items():
        where = f"cache[{key!r}]"
        if not isinstance(rec, dict):
            raise KernelTunerFileError(p, where, f"expected an object, got {rec!r}")
        missing = [k for k in keys if k not in rec]
        if missing:
            raise KernelTunerFileError(p, where, f"lacks the tunables {missing}")
        error = rec.get("__error__")
        if error is None:  # before 1.0 the error name stood in place of a value
            error = next((v for v in rec.values() if isinstance(v, str) and v in ERRORS), None)
        records.append(
            Record(
                where,
                {k: rec[k] for k in keys},
                None if error is None else str(error),
                rec.get("time"),
                rec.get("times"),
                {k: v for k, v in rec.items() if k not in keys and k not in _NOT_EXTRA},
                _str_or_none(rec.get("timestamp")),
            )
        )
    tune = obj.get("tune_params")
    return KTFile(
        p,
        "cache",
        records,
        list(keys),
        {k: list(v) for k, v in tune.items() if isinstance(v, list)}
        if isinstance(tune, dict)
        else None,
        kernel_name=obj["kernel_name"],
        device_name=obj["device_name"],
        device_field="device_name",
        problem_size=obj.get("problem_size", NO_PROBLEM_SIZE),
    )


# ---------------------------------------------------------------------------------------------
# T4


def _t4(p: Path, obj: dict[str, Any], metadata: str | Path | None) -> KTFile:
    records = []
    order: dict[str, None] = {}
    for i, item in enumerate(obj["results"]):
        where = f"results[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("configuration"), dict):
            raise KernelTunerFileError(p, f"{where}.configuration", "missing or not an object")
        inv = item.get("invalidity")
        if inv not in T4_INVALIDITY:
            raise KernelTunerFileError(
                p, f"{where}.invalidity", f"{inv!r} is not one of {list(T4_INVALIDITY)}"
            )
        meas = {}
        for j, m in enumerate(item.get("measurements") or []):
            if not isinstance(m, dict) or not isinstance(m.get("name"), str):
                raise KernelTunerFileError(p, f"{where}.measurements[{j}]", "no name")
            meas[m["name"]] = m.get("value")
        times = item.get("times")
        if not isinstance(times, dict):
            raise KernelTunerFileError(p, f"{where}.times", "missing or not an object")
        order.update(dict.fromkeys(item["configuration"]))
        records.append(
            Record(
                where,
                dict(item["configuration"]),
                None if inv == "correct" else inv,
                meas.get("time"),
                times.get("runtimes"),
                {k: v for k, v in meas.items() if k != "time"},
                _str_or_none(item.get("timestamp")),
            )
        )
    f = KTFile(p, "t4", records, list(order))
    own = (
        (obj.get("metadata") or {}).get("klaraptor")
        if isinstance(obj.get("metadata"), dict)
        else None
    )
    if isinstance(own, dict):
        f.klaraptor = own
        f.device_name, f.device_field = own.get("device_name"), "metadata.klaraptor.device_name"
    meta = Path(metadata) if metadata is not None else _sibling_metadata(p)
    if meta is not None:
        name, drv, where = _metadata_device(meta)
        if f.device_name is None:
            f.device_name, f.device_field = name, f"{meta.name}: {where}"
        f.driver = drv
    return f


def _sibling_metadata(p: Path) -> Path | None:
    """`X-results.json` → `X-metadata.json`, as Kernel Tuner's examples name the pair."""
    i = p.name.rfind("results")
    if i < 0:
        return None
    sib = p.with_name(p.name[:i] + "metadata" + p.name[i + len("results") :])
    return sib if sib.is_file() else None


def _metadata_device(meta: Path) -> tuple[str | None, str | None, str]:
    """(GPU name, driver, where) from a T4 metadata file (klaraptor's or nvidia-smi's entry)."""
    try:
        obj = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KernelTunerFileError(meta, "file", f"cannot read the T4 metadata ({exc})") from None
    query = (((obj or {}).get("metadata") or {}).get("environment") or {}).get("device_query")
    if not isinstance(query, dict):
        return None, None, ""
    own = query.get("klaraptor")
    if isinstance(own, dict) and own.get("name"):
        return str(own["name"]), own.get("driver"), "device_query.klaraptor.name"
    log = (query.get("nvidia-smi") or {}).get("nvidia_smi_log") or {}
    gpus = log.get("gpu")
    gpus = gpus if isinstance(gpus, list) else [gpus] if isinstance(gpus, dict) else []
    names = sorted({str(g.get("product_name")) for g in gpus if g.get("product_name")})
    where = "device_query.nvidia-smi.nvidia_smi_log.gpu.product_name"
    if len(names) > 1:
        raise KernelTunerFileError(
            meta,
            where,
            f"the machine had several kinds of GPU {names}, so which one ran is unknown",
            "pass device_name= to say which",
        )
    return (names[0] if names else None), log.get("driver_version"), where


# ---------------------------------------------------------------------------------------------
# Results list


def _results(p: Path, obj: list[Any]) -> KTFile:
    env: dict[str, Any] = {}
    if len(obj) == 2 and isinstance(obj[0], list) and isinstance(obj[1], dict):
        obj, env = obj[0], obj[1]  # the (results, env) pair tune_kernel returns
    records = []
    for i, item in enumerate(obj):
        if item is None:  # a strategy's placeholder for a configuration it did not run
            continue
        if not isinstance(item, dict):
            raise KernelTunerFileError(p, f"results[{i}]", f"expected an object, got {item!r}")
        error = item.get("__error__")
        if error is None:
            error = next((v for v in item.values() if isinstance(v, str) and v in ERRORS), None)
        records.append(
            Record(
                f"results[{i}]",
                {k: v for k, v in item.items() if k not in KT_FIELDS},
                None if error is None else str(error),
                item.get("time"),
                item.get("times"),
                {"num_regs": item["num_regs"]} if "num_regs" in item else {},
                _str_or_none(item.get("timestamp")),
            )
        )
    name = env.get("device_name")
    return KTFile(
        p,
        "results",
        records,
        None,
        device_name=name if isinstance(name, str) else None,
        device_field="env.device_name",
    )


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def is_num(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ---------------------------------------------------------------------------------------------
# Writing T4 (klaraptor's measurements in Kernel Tuner's results format)


def metadata_path_for(out: Path) -> Path:
    i = out.name.rfind("results")
    if i >= 0:
        return out.with_name(out.name[:i] + "metadata" + out.name[i + len("results") :])
    return out.with_name(out.stem + "-metadata.json")


def t4_result(spec: KernelSpec, m: Measurement, regs: int | None) -> dict[str, Any]:
    conf: dict[str, Any] = dict(m.D.items())
    for i, name in enumerate(BLOCK_NAMES):
        if i < spec.dim or m.block[i] != 1:
            conf[name] = m.block[i]
    v = m.value
    meas: list[dict[str, Any]] = []

    def add(name: str, x: Any, unit: str = "") -> None:
        if isinstance(x, str) or (is_num(x) and math.isfinite(x)):
            meas.append({"name": name, "value": x, "unit": unit})

    samples = [float(s) for s in v.get("samples_ms") or []] if m.status == "ok" else []
    if m.status == "ok":
        add("time", v.get("mean_ms", v.get("median_ms")), "ms")
        for key, name in (("median_ms", "time_median"), ("q1_ms", "time_q1"), ("q3_ms", "time_q3")):
            add(name, v.get(key), "ms")
        if "inner" in v:
            add("inner", int(v["inner"]))
        if "flush_l2" in v:
            add("flush_l2", int(bool(v["flush_l2"])))
    if regs is not None:
        add("num_regs", regs)
    if m.reason:
        add("reason", m.reason)
    if m.status == "ok":
        invalidity = "correct"
    elif m.status == "rejected":
        invalidity = "constraints"
    elif "output check" in m.reason:
        invalidity = "correctness"
    else:
        invalidity = "compile" if "compil" in m.reason.lower() else "runtime"
    stamp = _dt.datetime.fromtimestamp(m.created, _dt.UTC)
    return {
        "timestamp": str(stamp),
        "configuration": conf,
        "times": {"runtimes": samples},
        "invalidity": invalidity,
        "correctness": 0 if invalidity == "correctness" else 1,
        "measurements": meas,
        "objectives": ["time"],
    }


def t4_metadata(profile: Mapping[str, Any], device_key: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    reqs = []
    for pkg in ("klaraptor", "numpy", "scipy"):
        try:
            reqs.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            pass
    return {
        "schema_version": T4_SCHEMA_VERSION,
        "metadata": {
            "hardware": {"hardware_description": [{"klaraptor_device_key": device_key}]},
            "environment": {"device_query": {"klaraptor": dict(profile)}, "requirements": reqs},
        },
    }
