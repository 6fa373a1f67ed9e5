"""Writing the recorded dataset (`klaraptor bench export`) and adding to it: from a store, the
per-phase wall times of `bench collect` logs, the L2-flushed timings of `benchmarks/bench_cold.py`
and the bytes of the array arguments; and the evaluation's walk over each recorded kernel.
Reading a dataset is the product's (`klaraptor.suite.recorded`: `klaraptor demo` and
`klaraptor import-recorded` use it).

Raw timing samples are dropped (the quartiles are kept) and counter values are rounded to 7
significant digits, which keeps a file at about a megabyte.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.metrics import LAUNCH_COLUMNS, PIPE_METRICS, RAW_METRICS
from klaraptor.core.types import DataSize
from klaraptor.spec import KernelSpec
from klaraptor.store import Store
from klaraptor.suite.recorded import KernelData, RecordedDataset

_KEEP_NCU = (
    set(RAW_METRICS)
    | set(PIPE_METRICS)
    | set(LAUNCH_COLUMNS) - {f"launch__{a}_dim_{x}" for a in ("block", "grid") for x in "xyz"}
)


def _sig(v: float) -> float:
    return float(f"{v:.7g}") if math.isfinite(v) else v


def export_dataset(
    store: Store,
    specs: Sequence[KernelSpec],
    out: Path,
    *,
    provenance: Mapping[str, Any] | None = None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
) -> Path:
    """Write the compact dataset of `specs` from `store` (one device) to `out` (.json.gz)."""
    profiles = store.device_profiles()
    if len(profiles) != 1:
        raise KlaraptorError(
            f"export needs a store with exactly one device profile, found {list(profiles)}"
        )
    key, device = next(iter(profiles.items()))
    kernels: dict[str, KernelData] = {}
    for spec in specs:
        kern = store.kernel(spec.name)
        if kern is None:
            continue
        time, cold = [], []
        for kind, rows in (("time", time), ("time_cold", cold)):
            for m in store.measurements(spec.name, key, kind=kind, status="ok"):
                v = m.value
                rows.append(
                    [
                        *m.D.values(),
                        *m.block,
                        _sig(v["median_ms"]),
                        _sig(v["q1_ms"]),
                        _sig(v["q3_ms"]),
                    ]
                )
        ncu = []
        for m in store.measurements(spec.name, key, kind="ncu", status="ok"):
            raw = {
                k: _sig(float(v))
                for k, v in m.value.items()
                if k in _KEEP_NCU and isinstance(v, (int, float))
            }
            ncu.append([*m.D.values(), *m.block, raw])
        summary = dict(kern.spec)
        facts = store.collect_facts(spec.name, key)
        if facts is not None:
            summary["collect"] = {key: facts.to_dict()}
        truth = store.truth_decisions(spec.name, key)
        if truth:
            summary["truth"] = {
                key: {
                    str(D.values()[0]): {
                        "measure": t.measure,
                        "estimate_s": t.estimate_s,
                        "reason": t.reason,
                        "decided": t.decided,
                    }
                    for D, t in truth.items()
                }
            }
        kernels[spec.name] = KernelData(
            spec.name,
            kern.fingerprint,
            summary,
            sorted(time),
            sorted(ncu, key=lambda r: r[:-1]),
            dict((costs or {}).get(spec.name, {})),
            sorted(cold),
        )
    return write_recorded(RecordedDataset(dict(provenance or {}), device, kernels), out)


def costs_from_logs(paths: Iterable[Path]) -> dict[str, dict[str, float]]:
    """Per-kernel wall seconds of each collection phase from `bench collect --log` files.

    Rows that only skipped points (a resumed session) add nothing; a phase split over sessions
    is summed.
    """
    out: dict[str, dict[str, float]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            counts = row.get("counts") or {}
            kind = "ncu" if row["phase"] == "ncu" else "time"
            if not (counts.get(kind) or {}).get("ok"):
                continue
            key = {"time": "train_time_s", "ncu": "train_ncu_s", "truth": "truth_s"}[row["phase"]]
            per = out.setdefault(row["kernel"], {})
            per[key] = per.get(key, 0.0) + float(row["wall_s"])
    return out


def add_cold_timings(
    data: RecordedDataset, path: Path, provenance: Mapping[str, Any]
) -> dict[str, str]:
    """Put the L2-flushed timings of a `benchmarks/bench_cold.py` log (one JSON line per
    (kernel, pass)) into `data`: each kernel's `cold` rows, and the measured walls of both passes
    in its costs (`sweep_hot_s`, `sweep_cold_s`: one collection each, info step included, no
    output check). Returns per kernel of `data` what was done ("added", or why not)."""
    status = {n: "no line in the log" for n in data.kernels}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        k = data.kernels.get(row.get("kernel", ""))
        if k is None:
            continue
        if row.get("error") or not row.get("points"):
            status[k.name] = f"{row['pass']} pass failed: {row.get('error', 'no points')}"
            continue
        k.costs[f"sweep_{row['pass']}_s"] = float(row["wall_s"])
        if row["pass"] != "cold":
            if status[k.name] == "no line in the log":
                status[k.name] = "hot pass only (no cold line in the log)"
            continue
        D = [int(row["N"])] if k.n_data == 1 else list(row["D"])
        k.cold = sorted(
            [*D, *p["block"], _sig(p["median_ms"]), _sig(p["q1_ms"]), _sig(p["q3_ms"])]
            for p in row["points"]
        )
        status[k.name] = "added"
    data.provenance["cold"] = {**dict(provenance), "kernels": status}
    return status


def add_argument_bytes(data: RecordedDataset, sizes_of: Mapping[str, Sequence[DataSize]]) -> None:
    """Bytes of each kernel's array arguments at `sizes_of[name]` into its collection facts
    (`CollectFacts.arg_bytes`), from `make_args(D, rng, device=False)` of the suite spec: the
    same arrays a GPU run allocates, counted on the CPU."""
    import dataclasses

    import numpy as np

    from klaraptor import suite

    for name, sizes in sizes_of.items():
        k = data.kernels[name]
        spec = suite.get(name)
        out = []
        for D in sizes:
            args = spec.make_args(D, np.random.default_rng(0), device=False)
            out.append((D.values(), sum(int(a.nbytes) for a in args if np.ndim(a) > 0)))
        for device in k.summary.get("collect") or {}:
            facts = dataclasses.replace(k.facts(device), arg_bytes=tuple(out))
            k.summary["collect"][device] = facts.to_dict()


def write_recorded(data: RecordedDataset, out: Path) -> Path:
    """Write `data` as a compressed dataset file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(data.to_json(), separators=(",", ":")).encode(), 9))
    return out


def each_recorded_kernel(
    datasets: Iterable[RecordedDataset],
    kernels: Collection[str] | None,
    folder: Path,
    prefix: str,
) -> Iterator[tuple[RecordedDataset, Store, str]]:
    """Each kernel of `datasets` (those in `kernels`; all when None) with its dataset and a store
    of that dataset's chosen kernels, written under `folder` as `<prefix><k>.sqlite` and closed
    once its kernels are done."""
    for k, data in enumerate(datasets):
        names = [n for n in data.kernels if kernels is None or n in kernels]
        if not names:
            continue
        store = data.to_store(folder / f"{prefix}{k}.sqlite", kernels=names)
        for name in names:
            yield data, store, name
        store.close()
