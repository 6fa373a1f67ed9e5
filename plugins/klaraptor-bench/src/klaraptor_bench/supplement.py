"""Measurements added to the recorded datasets after they were shipped (issue 36).

`scripts/device_table61.py` measures on the GPU what Tables 6.1 and 6.2 lack: the ground truth of
the PolyBench pairs the recorded budget rule skipped (and 3DCONV at 512), real build times per
kernel, and every candidate at N = 128 (the smallest power of two of the thesis's exhaustive sum).
It writes a supplement: a recorded dataset (`klaraptor.suite.recorded`, format 1) whose kernels
carry only the new rows, plus per kernel

- `supplement.estimated`: [N, bx, by, bz] of the truth rows that are a race's first estimate
  (a candidate that could not win; for a partial launch, its time scaled by the rows left out),
  not a full measurement;
- `supplement.partial_check`: per fully measured candidate that had a partial estimate, the
  estimate and the full time (the check of the scaling);
- `supplement.sweep`: rows [N, bx, by, bz, median, q1, q3] at N = 128 (kept out of the training
  and truth rows: they only enter the exhaustive-search sum of Table 6.2);
- `supplement.build`: the measured `klaraptor.build` of the kernel (its wall, plan, model).

`merge(base, supplement)` puts a supplement into a suite's dataset without ever replacing a
recorded row; `load_suite(suite)` is the shipped dataset with the shipped supplements merged, oldest first
(what `klaraptor bench report` evaluates).
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import math
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block
from klaraptor.suite.recorded import FORMAT, RecordedDataset, load_recorded, recorded_path
from klaraptor_bench.dataset import _sig

if TYPE_CHECKING:
    from klaraptor.collect.plan import CostModel
    from klaraptor.suite.recorded import KernelData

SUPPLEMENT_NAME = "h200_table61.json.gz"
SWEEP_N = 128
# Kernels whose every thread does the same work over a 2D grid (one output element, an N-long
# loop): a launch of the first rows of blocks runs the same waves the full grid starts with.
PARTIAL_KERNELS = frozenset(
    f"polybench.{k}"
    for k in (
        "gemm.gemm",
        "mm2.k1",
        "mm2.k2",
        "mm3.k1",
        "mm3.k2",
        "mm3.k3",
        "syrk.syrk",
        "syr2k.syr2k",
    )  # fmt: skip
)
PARTIAL_FRACTION = 1.0 / 8.0
TRUTH_REASON = (
    "measured by scripts/device_table61.py: a race over the recorded candidates (first estimates "
    "for all, the full protocol for the contenders, the default block and the three best "
    "estimates); rows in supplement.estimated are first estimates"
)


# ---------------------------------------------------------------------------------------------
# What is missing, and what measuring it costs (from the recorded data only)


@cache
def _base(suite: str) -> RecordedDataset:
    return load_recorded(recorded_path(suite))


def _suite_of(name: str) -> str:
    return name.split(".")[0]


def missing_pairs(data: RecordedDataset | None = None) -> list[tuple[str, int]]:
    """PolyBench (kernel, evaluation size) pairs without a recorded truth row, cheapest first."""
    from klaraptor import suite

    data = data or _base("polybench")
    out = []
    for name, kd in sorted(data.kernels.items()):
        have = {D.values()[0] for D in kd.sizes()}
        out += [(name, int(n)) for n in suite.get(name).meta["eval_sizes"] if int(n) not in have]
    return sorted(out, key=lambda p: pair_estimate_s(*p))


def _by_size(name: str) -> dict[int, dict[Block, float]]:
    kd = _base(_suite_of(name)).kernels[name]
    out: dict[int, dict[Block, float]] = {}
    for (D, b), t in kd.times().items():
        out.setdefault(D.values()[0], {})[b] = t[0]
    return out


def recorded_candidates(name: str) -> list[Block]:
    """The blocks of the kernel's recorded exhaustive search (at its largest recorded size)."""
    by = _by_size(name)
    return sorted(by[max(by)], key=lambda b: (b[0] * b[1] * b[2], b))


def extrapolated_ms(name: str, n: int) -> dict[Block, float]:
    """Every candidate's time at n, scaled from the two largest (or, below them, the two
    smallest) recorded sizes with the exponent their summed times show."""
    by = _by_size(name)
    sizes = sorted(by)
    a, b = (sizes[-2], sizes[-1]) if n >= sizes[-1] else (sizes[0], sizes[1])
    common = set(by[a]) & set(by[b])
    p = math.log(sum(by[b][c] for c in common) / sum(by[a][c] for c in common)) / math.log(b / a)
    return {c: t * (n / b) ** p for c, t in by[b].items()}


def pair_estimate_s(name: str, n: int) -> float:
    """Seconds a race at (name, n) should take: first estimates of every candidate (one launch
    from 20 ms on, a partial one where it applies), about six contenders fully measured, the
    arguments and a fixed part."""
    t = extrapolated_ms(name, n)
    frac = PARTIAL_FRACTION if name in PARTIAL_KERNELS and n >= 4096 else 1.0
    first = sum(max(v * frac, 1.0 if v < 20 else 0.0) for v in t.values()) / 1e3
    best = sorted(t.values())[:6]
    full = sum(max(3 * v, 10.0) for v in best) / 1e3
    dims = 3 if "conv3d" in name else 2
    args_s = 4 * n**dims * 4 / 0.4e9  # up to four float32 arrays at ~0.4 GB/s of host RNG
    fixed = 2.0 if n >= 2048 else 0.5  # compiling, the first launches, freeing
    return fixed + first + full + args_s + 0.005 * len(t)


def build_tasks(suite: str) -> list[tuple[str, float]]:
    """Every kernel of a suite's dataset with its build estimate: 1.5 × one sweep at the
    largest training size (the cost model over the recorded times) plus 6 s of fixed cost."""
    from klaraptor import suite as suites
    from klaraptor_bench.evaluate import kernel_costs

    data = _base(suite)
    costs = kernel_costs(data)
    out = []
    for name in sorted(data.kernels):
        L = max(int(n) for n in suites.get(name).meta["train_sizes"])
        at_L = [v for b, v in _by_size(name).get(L, {}).items()]
        out.append((name, 6.0 + 1.5 * costs[name].sweep_s(at_L)))
    return out


# ---------------------------------------------------------------------------------------------
# The device script's output as a dataset


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a kill
    return rows


def gpu_line() -> str:
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return res.stdout.strip().splitlines()[0] if res.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def supplement_from_rows(
    points: Iterable[Mapping[str, Any]],
    builds: Iterable[Mapping[str, Any]],
    *,
    provenance: Mapping[str, Any],
    complete: set[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """The supplement (format-1 dataset JSON) from the device script's point and build rows.
    `complete`: the (kernel, N) whose race finished; the rows of any other pair are left out
    (a race stopped half-way has not timed every candidate; the next run finishes it)."""
    from klaraptor import suite

    kernels: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        if name not in kernels:
            kernels[name] = {
                "fingerprint": suite.get(name).fingerprint(),
                "summary": {"supplement": {"estimated": [], "partial_check": [], "sweep": []}},
                "time": [],
                "ncu": [],
                "costs": {},
            }
        return kernels[name]

    # The last row of a (kernel, N, block) wins, a full measurement over a first estimate.
    best: dict[tuple[str, int, Block], Mapping[str, Any]] = {}
    points = list(points)
    for r in points:
        if r.get("failed") or "median_ms" not in r:
            continue
        if complete is not None and (str(r["kernel"]), int(r["N"])) not in complete:
            continue
        key = (str(r["kernel"]), int(r["N"]), tuple(int(v) for v in r["block"]))
        old = best.get(key)
        if old is None or r.get("stage") == "full" or old.get("stage") != "full":
            best[key] = r
    walls: dict[tuple[str, int], float] = {}
    for (name, n, b), r in sorted(best.items()):
        e = entry(name)
        row = [n, *b, _sig(r["median_ms"]), _sig(r["q1_ms"]), _sig(r["q3_ms"])]
        sup = e["summary"]["supplement"]
        if n == SWEEP_N:
            sup["sweep"].append(row)
            continue
        e["time"].append(row)
        if r.get("stage") != "full":
            sup["estimated"].append([n, *b])
        elif r.get("estimate_ms") is not None:
            sup["partial_check"].append([n, *b, _sig(r["estimate_ms"]), _sig(r["median_ms"])])
    for r in points:
        key2 = (str(r["kernel"]), int(r["N"]))
        walls[key2] = walls.get(key2, 0.0) + float(r.get("wall_s", 0.0))
    decided = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    device = str(provenance.get("device_key", ""))
    for name, e in kernels.items():
        sizes = sorted({int(r[0]) for r in e["time"]})
        if sizes:
            e["summary"]["truth"] = {
                device: {
                    str(n): {
                        "measure": True,
                        "estimate_s": walls.get((name, n), math.nan),
                        "reason": TRUTH_REASON,
                        "decided": decided,
                    }
                    for n in sizes
                }
            }
        for n in sizes:
            e["costs"][f"truth_{n}_s"] = walls.get((name, n), math.nan)
    for b in builds:
        if "build_wall_s" not in b:
            continue
        e = entry(str(b["kernel"]))
        e["summary"]["supplement"]["build"] = dict(b)
        e["costs"]["build_wall_s"] = float(b["build_wall_s"])
    return {
        "format": FORMAT,
        "provenance": dict(provenance),
        "device": dict(_base("polybench").device),
        "kernels": kernels,
    }


def dataset_from_outdir(out: Path, *, command: str) -> Path:
    """Write OUT/h200_table61.json.gz from the device script's files in OUT."""
    from klaraptor.core.provenance import stamp

    builds = _jsonl(out / "builds.jsonl")
    keys = {str(b["device"]) for b in builds if b.get("device")}
    datadep = out / "data_dependence.json"
    if datadep.exists():
        with_key = json.loads(datadep.read_text()).get("device")
        if with_key and not str(with_key).startswith("unknown"):
            keys.add(str(with_key))
    runs = _jsonl(out / "runs.jsonl")  # the device runs that measured (date, command, commit)
    last = runs[-1] if runs else stamp(command)
    provenance = {
        **{k: last.get(k) for k in ("date", "command", "commit")},
        "runs": runs,
        "written_by": stamp(command),
        "gpu": last.get("gpu") or gpu_line(),
        "device_key": next(iter(keys)) if len(keys) == 1 else sorted(keys),
        "what": "issue 36: truth of the PolyBench pairs the recorded budget skipped, builds "
        "timed, every candidate at N = 128 (scripts/device_table61.py)",
        "tasks": [
            {k: t.get(k) for k in ("id", "status", "wall_s", "estimate_s")}
            for t in _jsonl(out / "tasks.jsonl")
        ],
    }
    complete = {
        (t["kernel"], int(t["N"]))
        for t in _jsonl(out / "tasks.jsonl")
        if t.get("kind") == "truth" and t.get("status") == "done"
    }
    obj = supplement_from_rows(
        _jsonl(out / "truth_points.jsonl"), builds, provenance=provenance, complete=complete
    )
    path = out / SUPPLEMENT_NAME
    path.write_bytes(gzip.compress(json.dumps(obj, separators=(",", ":")).encode(), 9))
    return path


# ---------------------------------------------------------------------------------------------
# Merging


def merge(base: RecordedDataset, obj: Mapping[str, Any], *, source: str = "") -> dict[str, str]:
    """Put a supplement into `base` (in place): new truth rows (never replacing a recorded
    one), their decisions under the base's device key, the extras of the module docstring and
    the build's wall in the kernel's costs. Returns per kernel of the supplement what was done."""
    if obj.get("format") != FORMAT:
        raise KlaraptorError(f"supplement {source}: format {obj.get('format')!r} is not {FORMAT}")
    prov = dict(obj.get("provenance") or {})
    key = base.device_key
    measured_on = prov.get("device_key")
    if isinstance(measured_on, str) and measured_on and measured_on != key:
        raise KlaraptorError(
            f"supplement {source} was measured on {measured_on!r}, the dataset on {key!r}"
        )
    status: dict[str, str] = {}
    for name, k in (obj.get("kernels") or {}).items():
        kd = base.kernels.get(name)
        if kd is None:
            continue  # another suite's kernel
        if k.get("fingerprint") and k["fingerprint"] != kd.fingerprint:
            status[name] = "skipped: its fingerprint differs from the recorded kernel's"
            continue
        have = {D.values()[0] for D in kd.sizes()}
        rows = [r for r in k.get("time", []) if int(r[0]) not in have]
        kd.time = sorted([*kd.time, *rows])
        added = sorted({int(r[0]) for r in rows})
        sup = dict((k.get("summary") or {}).get("supplement") or {})
        sup["estimated"] = [e for e in sup.get("estimated", []) if int(e[0]) in added]
        kd.summary["supplement"] = _joined(kd.summary.get("supplement") or {}, sup)
        decisions = ((k.get("summary") or {}).get("truth") or {}).values()
        for dec in decisions:
            per = kd.summary.setdefault("truth", {}).setdefault(key, {})
            for n, d in dec.items():
                if int(n) in added:
                    per[str(n)] = d
        for c, v in (k.get("costs") or {}).items():
            kd.costs.setdefault(c, float(v))
        status[name] = f"added N = {added}" if added else "no new truth rows"
        if sup.get("build"):
            status[name] += ", build"
    base.provenance.setdefault("supplements", []).append(
        {
            "file": source,
            **{k: prov.get(k) for k in ("date", "command", "commit", "gpu")},
            "kernels": status,
        }  # fmt: skip
    )
    return status


def _joined(before: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A kernel's supplement block after a second supplement: lists joined (rows already there
    kept once), a build or other value of the newer one where it has one."""
    out = dict(before)
    for key, value in new.items():
        old = out.get(key)
        if isinstance(old, list) and isinstance(value, list):
            out[key] = [*old, *(v for v in value if v not in old)]
        elif isinstance(old, dict) and isinstance(value, dict):
            out[key] = {**old, **value}
        elif value not in (None, [], {}):
            out[key] = value
    return out


def shipped_supplement() -> Path:
    """The first device run's supplement (runs 1 and 2 of scripts/device_table61.py)."""
    return Path(str(resources.files("klaraptor_bench") / "data" / SUPPLEMENT_NAME))


def shipped_supplements() -> list[Path]:
    """Every shipped supplement, oldest first: h200_table61.json.gz, then the later runs'
    h200_table61_<run>.json.gz (each holds only what the earlier ones lack)."""
    first = shipped_supplement()
    later = sorted(first.parent.glob(SUPPLEMENT_NAME.replace(".json.gz", "_*.json.gz")))
    return [p for p in [first, *later] if p.exists()]


def load_supplement(path: str | Path) -> dict[str, Any]:
    try:
        obj = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, EOFError, ValueError) as e:
        raise KlaraptorError(f"supplement {path} is not gzip-compressed JSON ({e})") from None
    if not isinstance(obj, dict):
        raise KlaraptorError(f"supplement {path} is not a JSON object")
    return obj


def load_suite(suite: str, supplement: str | Path | None = None) -> RecordedDataset:
    """The suite's shipped dataset with the supplement merged (default: every shipped one,
    oldest first)."""
    data = load_recorded(recorded_path(suite))
    paths = [Path(supplement)] if supplement is not None else shipped_supplements()
    for path in paths:
        if path.exists():
            merge(data, load_supplement(path), source=path.name)
    return data


# ---------------------------------------------------------------------------------------------
# Table 6.2's exhaustive sum, and summary.json's blocks written by other tools


def pow2_sizes(lo: int, hi: int) -> list[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def exhaustive_sum(kd: KernelData, cost: CostModel, sizes: Sequence[int]) -> dict[str, Any]:
    """Seconds an exhaustive search at `sizes` costs: per size, the cost model's session over
    every recorded candidate's time there (the N = 128 sweep of the supplement included);
    `missing` lists the sizes without a recorded sweep."""
    by: dict[int, list[float]] = {}
    for (D, _), t in kd.times().items():
        by.setdefault(D.values()[0], []).append(t[0])
    for row in (kd.summary.get("supplement") or {}).get("sweep", []):
        by.setdefault(int(row[0]), []).append(float(row[4]))
    missing = [n for n in sizes if n not in by]
    total = sum(cost.sweep_s(by[n]) for n in sizes if n in by)
    return {"seconds": total, "missing": missing, "sizes": list(sizes)}


def keep_foreign_blocks(summary: dict[str, Any], path: Path) -> dict[str, Any]:
    """`summary` with what another tool added to the summary.json at `path` kept: suites the
    report does not evaluate (the tunables block of benchmarks/tunables_summary.py) and other
    top-level keys."""
    if not path.exists():
        return summary
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return summary
    out = dict(summary)
    # A new suites dict: the caller's summary (rendered into methods.md) must not gain the
    # foreign blocks, whose methods lack the report's columns.
    out["suites"] = dict(summary.get("suites") or {})
    for k, v in old.items():
        if k not in out:
            out[k] = v
    for g, block in (old.get("suites") or {}).items():
        out["suites"].setdefault(g, block)
    return out


__all__ = [
    "PARTIAL_FRACTION",
    "PARTIAL_KERNELS",
    "SUPPLEMENT_NAME",
    "SWEEP_N",
    "build_tasks",
    "dataset_from_outdir",
    "exhaustive_sum",
    "keep_foreign_blocks",
    "load_suite",
    "merge",
    "missing_pairs",
    "pair_estimate_s",
    "pow2_sizes",
    "recorded_candidates",
    "shipped_supplements",
    "supplement_from_rows",
]
