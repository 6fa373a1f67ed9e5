"""Kernel Tuner interop: its files become klaraptor measurements; klaraptor's timings a T4 file.

A kernel tuned once with Kernel Tuner gets klaraptor's per-call model without re-measuring:

    for f in ["scale_n1048576.json", "scale_n4194304.json", ...]:   # one cache per problem size
        import_kernel_tuner(f, spec, store=store, device=profile)
    k = klaraptor.build(spec, sizes, model="time_fit", store=store, device=profile,
                        collect_data=False)

What maps to what (see `kernel_tuner_files` for the formats):
- block: the tunables `block_size_x/y/z` (Kernel Tuner's default names; others through
  `mapping={"bx": "threads"}`). One that is not a tunable takes Kernel Tuner's default:
  x = 256, y = z = 1.
- D: each data parameter from `mapping`: "problem_size" or "problem_size[i]" (a cache records
  it), the name of a tunable (per configuration), or an int (the whole file). Default: a data
  parameter named like a tunable takes it; else a single data parameter takes the cache's scalar
  problem size or its first entry.
- program parameters: a tunable named like one of the spec's program parameters (or mapped
  to it: `mapping={"TILE": "tile_size_x"}`) gives each configuration's variant; configurations
  with values the spec does not declare are skipped. `kernel_tuner_spec.spec_from_tune_params`
  makes such a spec from Kernel Tuner's own arguments (every non-block tunable a parameter).
- other tunables: fixed by the user (`fixed={"tile": 4}` imports only the configurations with
  tile = 4); one with a single value is fixed by itself. Any other is refused, because the
  measurements would mix variants of the kernel the spec cannot tell apart.
- times: samples ("times", T4 "runtimes": ms per launch, one launch each) give the median,
  quartiles and spread as klaraptor's own timing does; with only "time" (Kernel Tuner's mean)
  that mean stands for all three and the spread is unknown (NaN).
- failed configurations: InvalidConfig → 'rejected', compile / runtime failures → 'failed',
  with the reason.
- device: the GPU the file names must be the device profile's (GPUs are never mixed); the
  measurements are stored under the profile's key.

Kernel Tuner compiles each configuration with its tunables as #defines, while klaraptor launches
one compiled kernel with a run-time block. An import is therefore valid when the kernel reads its
block shape from blockDim (not block_size_x) and the spec's grid rule is the one Kernel Tuner
launched with (by default ceil(problem_size / block_size) per axis). Kernel Tuner records no
kernel attributes except registers (RegisterObserver's "num_regs"); the others are stored as
assumed values and named in the report and the kernel summary ("attributes_missing").
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaraptor.core.errors import KlaraptorError, SpecError
from klaraptor.core.types import Block, Config, DataSize, ParamValues
from klaraptor.core.validate import check_output_file
from klaraptor.device.profile import DeviceProfile
from klaraptor.frontends.kernel_tuner_files import (
    BLOCK_NAMES,
    ERRORS,
    NO_PROBLEM_SIZE,
    T4_SCHEMA_VERSION,
    KernelTunerFileError,
    KernelTunerImportError,
    KTFile,
    Record,
    is_num,
    metadata_path_for,
    read_kt_file,
    t4_metadata,
    t4_result,
)
from klaraptor.frontends.kernel_tuner_record import (
    check_fingerprint,
    check_same_variant,
    known_regs,
    record_kernel,
)
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.store import KernelRecord, Measurement, Store

__all__ = [
    "ImportReport",
    "KernelTunerFileError",
    "KernelTunerImportError",
    "export_t4",
    "import_kernel_tuner",
]


KT_DEFAULT_BLOCK = (256, 1, 1)  # kernel_tuner.util.get_thread_block_dimensions
_PROBLEM = re.compile(r"^problem_size(?:\[(\d+)\])?$")
_AXES = ("bx", "by", "bz")


@dataclass
class ImportReport:
    """What one import did. `uncovered`: the spec's default candidates with no successful time at
    a size (a per-configuration fit needs them all; Configs of the joint space for a spec with
    program parameters); `outside`: imported blocks that are not candidates (stored, unused by
    the models)."""

    path: Path
    format: str
    kernel: str
    device_key: str
    device_name: str
    mapping: dict[str, str]
    fixed: dict[str, Any]
    counts: dict[str, int]
    new: int
    replaced: int
    skipped: int
    sizes: list[DataSize]
    uncovered: dict[DataSize, list[Block] | list[Config]]
    outside: list[Block]
    attributes_missing: list[str]
    interrupted: bool = False
    dropped_partial: bool = False
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        c = self.counts
        lines = [
            f"{self.path} ({self.format}) → {self.kernel} on {self.device_key}",
            f"  {c['ok']} timed, {c['failed']} failed, {c['rejected']} rejected; "
            f"{self.new} new, {self.replaced} replaced, {self.skipped} skipped (other fixed values)",
            f"  sizes {self.sizes}; mapping {self.mapping}; fixed {self.fixed}",
        ]
        if self.interrupted:
            lines.append(
                "  unterminated cache (interrupted run)"
                + ("; its last, partial record was dropped" if self.dropped_partial else "")
            )
        gaps = {d: len(b) for d, b in self.uncovered.items() if b}
        if gaps:
            lines.append(f"  candidates without a time: {gaps}")
        if self.outside:
            lines.append(f"  blocks outside the candidate set: {self.outside}")
        if self.attributes_missing:
            lines.append(f"  assumed kernel attributes: {self.attributes_missing}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Import


def import_kernel_tuner(
    path: str | Path,
    spec: KernelSpec,
    *,
    store: Store,
    device: DeviceProfile,
    mapping: Mapping[str, str | int] | None = None,
    fixed: Mapping[str, Any] | None = None,
    metadata: str | Path | None = None,
    device_name: str | None = None,
    kernel_name: str | None = None,
    ignore: Iterable[str] = (),
) -> ImportReport:
    """Import a Kernel Tuner cache, T4 results file or dumped results list into `store`.

    `mapping` maps the spec's data names and bx/by/bz to sources in the file (module docstring);
    `fixed` fixes the other tunables. `metadata`: the T4 metadata file (default: the results
    file's name with "results" → "metadata", when it exists). `device_name`: the GPU, for files
    that do not name it. `kernel_name`: the kernel's name in a cache when it differs from
    `spec.kernel`. `ignore`: fields of a results list that are metrics, not tunables.
    Points already stored are replaced (upsert), never duplicated.
    """
    f = read_kt_file(path, metadata)
    warnings: list[str] = []
    named = _check_device(f, device, device_name, warnings)
    _check_kernel(f, spec, kernel_name)
    plan = _plan(f, spec, dict(mapping or {}), dict(fixed or {}), set(ignore))
    rows, skipped, regs, variant_regs = _measurements(f, spec, device.key, plan)
    if not rows:
        raise KernelTunerFileError(
            f.path,
            "records",
            f"no configuration to import (the file holds {len(f.records)}, "
            f"{skipped} of them with other values of the fixed tunables or parameter values "
            "the spec does not declare)",
        )
    check_fingerprint(store, spec)
    check_same_variant(store, spec, device.key, plan.fixed, f.path)
    before = {
        (m.D, m.block, m.params) for m in store.measurements(spec.name, device.key, kind="time")
    }
    if store.device_profile(device.key) is None:
        store.save_profile(device)
    store.put_kernel(
        KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
    )
    store.put_measurements(rows)
    missing = record_kernel(
        store,
        spec,
        device,
        fixed=plan.fixed,
        regs=regs,
        source=f"{f.fmt} {f.path}",
        n=len(rows),
        variant_regs=variant_regs,
    )
    if len(regs) > 1 and not spec.params:
        warnings.append(
            f"num_regs differs between configurations {sorted(regs)} (Kernel Tuner compiles each "
            f"one separately); the largest, {max(regs)}, is recorded"
        )
    counts = {s: sum(m.status == s for m in rows) for s in ("ok", "failed", "rejected")}
    sizes = sorted({m.D for m in rows}, key=DataSize.values)
    space = ConfigSpace.for_spec(spec, max_threads=device.max_threads_per_block)
    timed = {(m.D, m.block) for m in rows if m.status == "ok"}
    timed_configs = {(m.D, m.params, m.block) for m in rows if m.status == "ok"}
    return ImportReport(
        path=f.path,
        format=f.fmt,
        kernel=spec.name,
        device_key=device.key,
        device_name=named,
        mapping=plan.shown,
        fixed=plan.fixed,
        counts=counts,
        new=sum((m.D, m.block, m.params) not in before for m in rows),
        replaced=sum((m.D, m.block, m.params) in before for m in rows),
        skipped=skipped,
        sizes=sizes,
        uncovered={
            d: (
                [
                    Config(p.params, p.block)
                    for p in space.dry_run(spec, [d])
                    if p.status == "measure" and (d, p.params, p.block) not in timed_configs
                ]
                if spec.params
                else [b for b in space.candidates if (d, b) not in timed]
            )
            for d in sizes
        },
        outside=sorted({m.block for m in rows} - set(space.candidates)),
        attributes_missing=missing,
        interrupted=f.interrupted,
        dropped_partial=f.dropped_partial,
        warnings=warnings + plan.notes,
    )


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def _check_device(
    f: KTFile, device: DeviceProfile, device_name: str | None, warnings: list[str]
) -> str:
    named, where = f.device_name, f.device_field
    if device_name is not None:
        if named is not None and _norm(named) != _norm(device_name):
            raise KernelTunerFileError(
                f.path,
                where,
                f"the file names the GPU {named!r}, but device_name={device_name!r} was given",
            )
        named, where = device_name, "device_name="
    if named is None:
        hint = (
            " (a T4 results file never does: its GPU is in the metadata file that "
            "store_metadata_file wrote, and none was found beside it)"
            if f.fmt == "t4"
            else ""
        )
        raise KernelTunerFileError(
            f.path,
            f.device_field or "device",
            f"the file does not name the GPU it was measured on{hint}",
            "pass metadata=<T4 metadata file> or device_name='<GPU name>'",
        )
    if _norm(named) != _norm(device.name):
        raise KernelTunerImportError(
            f"Kernel Tuner file {f.path} was measured on {named!r} ({where}), but the device "
            f"profile given is {device.name!r} ({device.key}); klaraptor never mixes GPUs: "
            f"pass the profile of {named!r}"
        )
    if f.driver and f.driver != device.driver:
        warnings.append(
            f"the file was measured under driver {f.driver}, the profile is for {device.driver}"
        )
    return named


def _check_kernel(f: KTFile, spec: KernelSpec, kernel_name: str | None) -> None:
    if f.kernel_name is not None and f.kernel_name != (kernel_name or spec.kernel):
        raise KernelTunerFileError(
            f.path,
            "kernel_name",
            f"the file tuned kernel {f.kernel_name!r}, the spec is for {spec.kernel!r}",
            "pass kernel_name= if they are the same kernel under two names",
        )
    own = f.klaraptor or {}
    if own.get("fingerprint") and own["fingerprint"] != spec.fingerprint():
        raise KernelTunerFileError(
            f.path,
            "metadata.klaraptor.fingerprint",
            f"exported for another version of {own.get('kernel')!r} (source, options, grid, "
            f"constraints or data parameters differ from spec {spec.name!r})",
        )


# ---------------------------------------------------------------------------------------------
# Mapping the file's terms to klaraptor's


@dataclass
class _Plan:
    block: list[tuple[str, Any]]  # per axis: ("tunable", name) or ("const", value)
    data: dict[str, tuple[str, Any]]  # per data name: ("tunable", name) or ("const", value)
    fixed: dict[str, Any]
    shown: dict[str, str]
    notes: list[str]
    params: dict[str, str] = field(default_factory=dict)  # program parameter -> tunable


def _tunables(f: KTFile, ignore: set[str]) -> list[str]:
    if f.tunables is not None:
        return [t for t in f.tunables if t not in ignore]
    seen: dict[str, None] = {}
    for r in f.records:
        seen.update(dict.fromkeys(k for k in r.params if k not in ignore))
    return list(seen)


def _where_tunables(f: KTFile) -> str:
    return {"cache": "tune_params_keys", "t4": "results[].configuration"}.get(
        f.fmt, "fields of the results"
    )


def _plan(
    f: KTFile, spec: KernelSpec, mapping: dict[str, Any], fixed: dict[str, Any], ignore: set[str]
) -> _Plan:
    tunables = _tunables(f, ignore)
    field_name = _where_tunables(f)
    unknown = [k for k in mapping if k not in (*spec.data_names, *spec.param_names, *_AXES)]
    if unknown:
        raise KernelTunerImportError(
            f"mapping keys {unknown} are neither data parameters of {spec.name!r} "
            f"{list(spec.data_names)}, program parameters {list(spec.param_names)} nor bx, by, bz"
        )
    for k, v in mapping.items():
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise KernelTunerImportError(
                f"mapping[{k!r}] must be a field name, 'problem_size[i]' or an int, got {v!r}"
            )
    shown: dict[str, str] = {}
    block: list[tuple[str, Any]] = []
    for axis, name, default in zip(_AXES, BLOCK_NAMES, KT_DEFAULT_BLOCK):
        src = mapping.get(axis, name if name in tunables else default)
        if isinstance(src, str) and src not in tunables:
            raise KernelTunerFileError(
                f.path,
                field_name,
                f"mapping {axis}={src!r} names no tunable (tunables: {tunables})",
            )
        block.append(("tunable", src) if isinstance(src, str) else ("const", src))
        shown[axis] = str(src)
    if not any(kind == "tunable" for kind, _ in block):
        raise KernelTunerFileError(
            f.path,
            field_name,
            f"no block dimensions: none of {list(BLOCK_NAMES)} is a tunable (tunables: "
            f"{tunables}), so every configuration ran with the same block",
            "if the block sizes are tunables under other names (block_size_names=), map them: "
            "mapping={'bx': '<name>', 'by': ...}",
        )
    notes: list[str] = []
    data = {
        n: _data_source(f, spec, n, mapping.get(n), tunables, shown, notes) for n in spec.data_names
    }
    params: dict[str, str] = {}
    for p in spec.param_names:
        src = mapping.get(p, p)
        if not isinstance(src, str) or src not in tunables:
            raise KernelTunerFileError(
                f.path,
                field_name,
                f"program parameter {p!r} of {spec.name!r}: {src!r} names no tunable "
                f"(tunables: {tunables})",
                f"map it: mapping={{{p!r}: '<tunable>'}}",
            )
        params[p] = src
        shown[p] = src
    used = {v for kind, v in [*block, *data.values()] if kind == "tunable"} | set(params.values())
    bad = [k for k in fixed if k not in tunables or k in used]
    if bad:
        raise KernelTunerImportError(
            f"fixed={fixed!r}: {bad} {'are' if len(bad) > 1 else 'is'} not a free tunable of "
            f"{f.path} (tunables: {tunables}; block and data sources: {sorted(used)})"
        )
    values = _values(f, tunables)
    fixed_all = dict(fixed)
    for k, v in fixed.items():
        if not any(_same(v, x) for x in values[k]):
            raise KernelTunerFileError(
                f.path, field_name, f"no configuration has {k} = {v!r} (values: {values[k]})"
            )
    for t in tunables:
        if t not in used and t not in fixed and len(values[t]) == 1:
            fixed_all[t] = values[t][0]
            notes.append(f"tunable {t!r} has one value, {values[t][0]!r}: taken as fixed")
    free = [t for t in tunables if t not in used and t not in fixed_all]
    if free:
        listed = "; ".join(f"{t}: {values[t][:8]}" for t in free)
        raise KernelTunerFileError(
            f.path,
            field_name,
            f"tunables {free} are neither block dimensions nor data parameters ({listed}); "
            "importing them all would mix variants of the kernel",
            f"fix each to one value, e.g. fixed={{{free[0]!r}: {values[free[0]][0]!r}}}"
            + ("; name metrics in ignore=[...]" if f.fmt == "results" else ""),
        )
    return _Plan(block, data, fixed_all, shown, notes, params)


def _data_source(
    f: KTFile,
    spec: KernelSpec,
    name: str,
    src: Any,
    tunables: list[str],
    shown: dict[str, str],
    notes: list[str],
) -> tuple[str, Any]:
    """Where data parameter `name` comes from: ("tunable", field) or ("const", value)."""
    ps = f.problem_size
    defaulted = src is None
    if src is None:
        if name in tunables:
            src = name
        elif len(spec.data_names) == 1 and ps is not NO_PROBLEM_SIZE:
            src = "problem_size" if not isinstance(ps, list) else "problem_size[0]"
        else:
            where = "problem_size" if ps is not NO_PROBLEM_SIZE else _where_tunables(f)
            recorded = (
                f"the problem size is {ps!r}"
                if ps is not NO_PROBLEM_SIZE
                else f"a {f.fmt} file does not record the problem size"
            )
            raise KernelTunerFileError(
                f.path,
                where,
                f"cannot map data parameter {name!r}: {recorded} and no tunable is named {name!r}",
                f"pass mapping={{{name!r}: 'problem_size[0]'}}, the name of a tunable, or the "
                "value (an int)",
            )
    if isinstance(src, int):
        shown[name] = str(src)
        return ("const", src)
    m = _PROBLEM.match(src)
    if m is None:
        if src not in tunables:
            raise KernelTunerFileError(
                f.path,
                _where_tunables(f),
                f"mapping {name}={src!r} names no tunable (tunables: {tunables})",
            )
        shown[name] = src
        return ("tunable", src)
    if ps is NO_PROBLEM_SIZE:
        raise KernelTunerFileError(
            f.path,
            "problem_size",
            f"mapping {name}={src!r}, but a {f.fmt} file does not record the problem size",
            f"give the value: mapping={{{name!r}: <int>}}",
        )
    if isinstance(ps, str):
        raise KernelTunerFileError(
            f.path,
            "problem_size",
            f"Kernel Tuner recorded {ps!r} (the problem size was a function of the tunables)",
            f"map {name!r} to a tunable or give its value as an int",
        )
    index = m.group(1)
    if isinstance(ps, list):
        if index is None and len(ps) != 1:
            raise KernelTunerFileError(
                f.path,
                "problem_size",
                f"{ps} has {len(ps)} entries; mapping {name}='problem_size' needs one",
                f"pick one: mapping={{{name!r}: 'problem_size[0]'}}",
            )
        i = int(index or 0)
        if i >= len(ps):
            raise KernelTunerFileError(
                f.path, "problem_size", f"{ps} has no entry {i} (mapping {name}={src!r})"
            )
        value = ps[i]
        if defaulted and len({v for v in ps if v != 1}) > 1:
            notes.append(f"problem_size {ps} has several entries; {name} took entry 0")
    elif index not in (None, "0"):
        raise KernelTunerFileError(
            f.path, "problem_size", f"{ps!r} is a scalar; mapping {name}={src!r} indexes it"
        )
    else:
        value = ps
    shown[name] = f"{src} = {value!r}"
    return ("const", value)


def _values(f: KTFile, tunables: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {t: [] for t in tunables}
    for r in f.records:
        for t in tunables:
            if t in r.params and not any(_same(r.params[t], x) for x in out[t]):
                out[t].append(r.params[t])
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (is_num(a) and is_num(b) and a == b)


# ---------------------------------------------------------------------------------------------
# Records → measurements


def _pos_int(f: KTFile, where: str, v: Any) -> int:
    if is_num(v) and float(v).is_integer() and v >= 1:
        return int(v)
    raise KernelTunerFileError(f.path, where, f"expected a positive integer, got {v!r}")


def _measurements(
    f: KTFile, spec: KernelSpec, device_key: str, plan: _Plan
) -> tuple[list[Measurement], int, set[int], dict[ParamValues, int]]:
    rows: list[Measurement] = []
    seen: dict[tuple[Any, Any, Any], str] = {}
    skipped = 0
    regs: set[int] = set()
    variant_regs: dict[ParamValues, int] = {}
    declared = {p.name: p.values for p in spec.params}
    for r in f.records:
        if any(not _same(r.params.get(k), v) for k, v in plan.fixed.items()):
            skipped += 1
            continue
        # each parameter's declared value that the record's tunable equals, None for none
        matched = {
            p: next((x for x in declared[p] if _same(r.params.get(t), x)), None)
            for p, t in plan.params.items()
        }
        chosen = {p: x for p, x in matched.items() if x is not None}
        if len(chosen) != len(matched):
            skipped += 1  # a variant the spec does not declare
            continue
        pv = spec.param_values(chosen)

        def value_of(src: tuple[str, Any], what: str, r: Record = r) -> Any:
            kind, v = src
            if kind == "const":
                return v
            if v not in r.params:
                raise KernelTunerFileError(f.path, r.where, f"lacks {v!r} ({what})")
            return r.params[v]

        block = tuple(
            _pos_int(f, f"{r.where}.{src[1] if src[0] == 'tunable' else axis}", value_of(src, axis))
            for axis, src in zip(_AXES, plan.block)
        )
        raw = {n: value_of(src, n) for n, src in plan.data.items()}
        try:
            D = spec.size(raw)
        except SpecError as exc:
            raise KernelTunerFileError(
                f.path, f"{r.where} (data {raw})", f"the problem size does not map: {exc}"
            ) from None
        if (D, block, pv) in seen:
            shown_pv = f", params={dict(pv)}" if pv else ""
            raise KernelTunerFileError(
                f.path,
                r.where,
                f"maps to the same point (D={D}, block={block}{shown_pv}) as "
                f"{seen[(D, block, pv)]}",
                "a tunable that tells them apart must be fixed (fixed=...) or be a program "
                "parameter of the spec",
            )
        seen[(D, block, pv)] = r.where
        given = r.extra.get("reason")
        reason = given if isinstance(given, str) else ""
        if r.error is None:
            status, value = "ok", _time_value(f, r)
            if r.extra.get("num_regs") is not None:
                n_regs = _pos_int(f, f"{r.where}.num_regs", r.extra["num_regs"])
                regs.add(n_regs)
                variant_regs[pv] = max(n_regs, variant_regs.get(pv, 0))
        else:
            status, why = ERRORS.get(r.error, ("failed", f"Kernel Tuner: {r.error}"))
            reason, value = reason or why, {"source": "kernel_tuner"}
        rows.append(
            Measurement(
                spec.name,
                device_key,
                D,
                block,  # type: ignore[arg-type]
                "time",
                status,
                value,
                reason,
                _created(r.timestamp),
                params=pv,
            )
        )
    return rows, skipped, regs, variant_regs


def _created(stamp: str | None) -> float:
    if stamp:
        try:
            t = _dt.datetime.fromisoformat(stamp)
            return (t if t.tzinfo else t.replace(tzinfo=_dt.UTC)).timestamp()
        except ValueError:
            pass
    return _dt.datetime.now(_dt.UTC).timestamp()


def _time_value(f: KTFile, r: Record) -> dict[str, Any]:
    """A 'time' value as klaraptor's own timing stores it (ms per launch); a time that is not
    positive is no measurement (a launch takes time) and refuses the file."""
    value = _time_value_raw(f, r)
    if not value["median_ms"] > 0:
        raise KernelTunerFileError(
            f.path,
            r.where,
            f"its time is {value['median_ms']!r} ms: a launch takes time, so this is no "
            "measurement (was the kernel timed? Kernel Tuner records failures as error strings)",
        )
    return value


def _time_value_raw(f: KTFile, r: Record) -> dict[str, Any]:
    from klaraptor.backends.cupy_backend import summarize  # one definition of the order statistics

    samples = r.samples
    if isinstance(samples, list) and samples:
        if not all(is_num(s) and math.isfinite(s) and s >= 0 for s in samples):
            raise KernelTunerFileError(
                f.path, f"{r.where}.times", f"expected milliseconds, got {samples[:4]!r}..."
            )
        inner = r.extra.get("inner")
        v = summarize(
            [float(s) for s in samples],
            inner=int(inner) if is_num(inner) and inner >= 1 else 1,
            flush_l2=bool(r.extra.get("flush_l2", False)),
        )
        if is_num(r.time_ms):
            v["kt_time_ms"] = float(r.time_ms)
        return {**v, "source": "kernel_tuner"}
    q = [r.extra.get(k) for k in ("time_median", "time_q1", "time_q3")]
    finite = [float(x) for x in q if is_num(x) and math.isfinite(x)]
    if len(finite) == len(q):
        med, q1, q3 = finite
        spread = (q3 - q1) / med if med > 0 else math.nan
        return {
            "median_ms": med,
            "q1_ms": q1,
            "q3_ms": q3,
            "spread": spread,
            "source": "kernel_tuner",
        }
    t = r.time_ms
    if not (is_num(t) and math.isfinite(t) and t >= 0):
        raise KernelTunerFileError(
            f.path, f"{r.where}.time", f"expected milliseconds (a number), got {t!r}"
        )
    t = float(t)
    return {
        "median_ms": t,
        "q1_ms": t,
        "q3_ms": t,
        "spread": math.nan,
        "statistic": "mean (the file holds no samples)",
        "source": "kernel_tuner",
    }


# ---------------------------------------------------------------------------------------------
# Export


def export_t4(
    store: Store,
    spec: KernelSpec,
    device_key: str,
    path: str | Path,
    *,
    metadata_path: str | Path | None = None,
) -> tuple[Path, Path]:
    """Write the timing measurements of `spec` on `device_key` as a T4 results file, plus the T4
    metadata file (default: "results" → "metadata" in the name, else `<stem>-metadata.json`).

    The configuration holds the data parameters and block_size_x/y/z; each result carries the
    samples as "runtimes" and "time" (mean, ms), "time_median", "time_q1", "time_q3",
    "num_regs" (when known) and the reason of a failure as measurements, so that importing the
    file gives the same rows back. Returns (results path, metadata path).
    """
    rows = store.measurements(spec.name, device_key, kind="time")
    if not rows:
        raise KlaraptorError(
            f"no timing measurements of {spec.name!r} on {device_key!r} in {store.path}"
        )
    regs = known_regs(store, spec, device_key)
    profile = store.device_profile(device_key) or {"name": device_key.split("|")[0]}
    out = Path(path)
    meta = Path(metadata_path) if metadata_path is not None else metadata_path_for(out)
    results = {
        "schema_version": T4_SCHEMA_VERSION,
        "results": [t4_result(spec, m, regs) for m in rows],
        "metadata": {
            "timeunit": "milliseconds",
            "klaraptor": {
                "kernel": spec.name,
                "kernel_function": spec.kernel,
                "fingerprint": spec.fingerprint(),
                "data_names": list(spec.data_names),
                "device_key": device_key,
                "device_name": profile.get("name"),
            },
        },
    }
    for target, what in ((out, "results"), (meta, "metadata")):
        check_output_file(target, f"the T4 {what} file")  # no directory is made for it
    out.write_text(json.dumps(results, allow_nan=False), encoding="utf-8")
    meta.write_text(json.dumps(t4_metadata(profile, device_key), indent=1), encoding="utf-8")
    return out, meta
