"""SAAKE's bottlenecks on kernels it was never calibrated or checked on (issue 37).

The unseen kernels are the 16 pattern kernels (`klaraptor.suite.patterns`): SAAKE was built,
calibrated and judged on the 44 suite kernels only, and the referee (`referee` module docstring,
"THE REFEREE") was fixed in its own commit before any of these was judged. Their recorded data
has timings only (no counters), so the H200 must supply two things, both in ONE run of
`scripts/device_saake_unseen.py OUT` (under 3 minutes):

1. the counters SAAKE is built from (klaraptor's collection metrics, flushed caches, as the
   suite's), for a few configurations of each kernel at its three largest training sizes;
2. the referee's Nsight Compute metrics (`referee.METRICS`, caches as left, as the suite's
   referee run) of the judged configurations at the smallest evaluation size.

Which configurations (`plan_kernel`, a rule fixed before the GPU run, that reads only the
recorded timings): the judged configuration is the block MEASURED fastest at the smallest
evaluation size (what a tuned program runs; SAAKE's own choice cannot be the judged one because
its counters do not exist until the same GPU run), and the benchmark's default block as a second,
supplementary row. The counter configurations are those two and `SPREAD` blocks evenly spaced over
the candidate order. SAAKE is then built over the counter configurations only (`job.candidates`
restricted: trip counts and the calibration from real counters, none pooled), as the model is
built for any kernel, and its sensitivity analysis at (judged block, smallest evaluation size)
gives the verdict the referee judges.

`klaraptor bench saake --unseen-plan` writes the plan (`saake_unseen_plan.json`);
`klaraptor bench saake --unseen OUT` reads OUT/counters.json and OUT/sol.json, writes
`saake_unseen.json` and adds `agreement_unseen` and `unseen_kernels` to bottlenecks.json.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError

UNSEEN_DATASET = "h200_patterns.json.gz"
PLAN_FILE = "saake_unseen_plan.json"
RESULT_FILE = "saake_unseen.json"
SPREAD = 4  # counter configurations evenly spaced over the candidate order
COUNTER_SIZES = 3  # the largest training sizes, as the suite's counters
ROLES = ("measured_best", "default_block")


def unseen_dataset() -> Any:
    """The recorded patterns dataset (timings at training and evaluation sizes, no counters)."""
    from klaraptor.suite.recorded import training_only_datasets

    return training_only_datasets()[UNSEEN_DATASET]


def _spread(blocks: Sequence[tuple[int, ...]], k: int) -> list[tuple[int, ...]]:
    if not blocks:
        return []
    idx = np.unique(np.round(np.linspace(0, len(blocks) - 1, min(k, len(blocks)))).astype(int))
    return [blocks[i] for i in idx]


def plan_kernel(data: Any, name: str) -> dict[str, Any]:
    """The configurations of one unseen kernel (module docstring): from its spec and recorded
    timings only."""
    from klaraptor import suite
    from klaraptor.space.configspace import ConfigSpace

    spec = suite.get(name)
    times = data.kernels[name].times()
    train = sorted(int(n) for n in spec.meta["train_sizes"])
    n_eval = min(int(n) for n in spec.meta["eval_sizes"])
    at: dict[int, dict[tuple[int, ...], float]] = {}
    for (D, b), t in times.items():
        at.setdefault(int(D.values()[0]), {})[tuple(int(v) for v in b)] = t[0]
    timed = set.intersection(*(set(at.get(n, {})) for n in (*train, n_eval)))
    order = [tuple(int(v) for v in b) for b in ConfigSpace.for_spec(spec).candidates]
    order = [b for b in order if b in timed]
    if not order:
        raise KlaraptorError(f"{name}: no candidate is timed at every training size and N={n_eval}")
    best = min(order, key=lambda b: at[n_eval][b])
    default = tuple(int(v) for v in spec.default_block)
    judged = [{"role": "measured_best", "N": n_eval, "block": list(best)}]
    if default in timed and default != best:
        judged.append({"role": "default_block", "N": n_eval, "block": list(default)})
    counter_blocks = list(dict.fromkeys([best, *([default] if default in timed else [])]))
    counter_blocks += [b for b in _spread(order, SPREAD) if b not in counter_blocks]
    return {
        "kernel": name,
        "counter_sizes": train[-COUNTER_SIZES:],
        "counter_blocks": [list(b) for b in counter_blocks],
        "judged": judged,
    }


def make_plan() -> dict[str, Any]:
    """The plan for every unseen kernel, with the rule it follows."""
    data = unseen_dataset()
    return {
        "rule": (
            "judged: the block measured fastest at the smallest evaluation size, and the "
            f"default block (supplementary); counters: those and {SPREAD} blocks evenly spaced "
            f"over the candidate order, at the {COUNTER_SIZES} largest training sizes; SAAKE "
            "is built over the counter blocks only"
        ),
        "kernels": [plan_kernel(data, name) for name in sorted(data.kernels)],
    }


def write_plan(out: Path) -> dict[str, Any]:
    from klaraptor.core.provenance import stamp

    plan = make_plan()
    plan["provenance"] = stamp(f"klaraptor bench saake --unseen-plan --out {out}")
    (out / PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n")
    return plan


def _read(path: Path, what: str) -> Any:
    if not path.is_file():
        raise KlaraptorError(f"{path} does not exist ({what})")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KlaraptorError(f"{path} is not JSON: {exc}") from None


def with_counters(data: Any, counters: Mapping[str, Any]) -> Any:
    """`data` with the device run's counter rows ([N, bx, by, bz, raw]) as its `ncu` rows."""
    for name, entry in counters.get("kernels", {}).items():
        if name in data.kernels:
            data.kernels[name].ncu = [list(r) for r in entry.get("rows", [])]
    return data


def judge_kernel(
    data: Any,
    store: Any,
    entry: Mapping[str, Any],
    sol: Mapping[str, Any],
    latencies: Mapping[str, float] | None,
) -> dict[str, Any]:
    """SAAKE built on the plan's counter blocks, its verdict at every judged configuration and
    the referee's; also SAAKE's own choice among those blocks and its time error there."""
    from klaraptor import suite
    from klaraptor.assemble import make_job
    from klaraptor.models.saake.model import SaakeModel
    from klaraptor.models.saake.sensitivity import analyse
    from klaraptor_bench.referee import judge
    from klaraptor_bench.saake_common import _mape, _truth

    name = entry["kernel"]
    spec = suite.get(name)
    blocks = [tuple(int(v) for v in b) for b in entry["counter_blocks"]]
    out: dict[str, Any] = {"kernel": name, "counter_blocks": [list(b) for b in blocks]}
    if not data.kernels[name].ncu:
        return {**out, "status": "no counters from the device run", "rows": []}
    t0 = time.perf_counter()
    job = make_job(spec, store, data.profile(), [spec.size(n) for n in spec.meta["train_sizes"]])
    job = replace(job, candidates=tuple(b for b in job.candidates if b in blocks))
    model = SaakeModel()
    try:
        grid = model.emulated(job)
        em, _, _ = grid.calibrated(job)
        helpers = {
            key: model.helper_from(job, grid, calibrated=cal)[0]
            for key, cal in (("saake", True), ("saake_raw", False))
        }
    except KlaraptorError as exc:
        return {**out, "status": f"SAAKE could not be built: {exc}", "rows": []}
    truth = {
        N: {b: t for b, t in m.items() if b in blocks} for N, m in _truth(data, name, spec).items()
    }
    out["time_error"] = {k: _mape(h, spec, truth) for k, h in helpers.items()}
    out["calibration"] = {"gap_scale": em.gap_scale, "work_scale": em.work_scale}
    rows = []
    for want in entry["judged"]:
        block = tuple(int(v) for v in want["block"])
        D = spec.size(int(want["N"]))
        row: dict[str, Any] = {"role": want["role"], "N": want["N"], "block": list(block)}
        if block not in em.candidates:
            rows.append({**row, "status": "not a candidate of the build", "match": None})
            continue
        sens = analyse(em, D.values(), em.candidates.index(block))
        row.update(
            saake_bottleneck=sens.bottleneck,
            saake_mode=sens.mode,
            saake_stands_out=sens.stands_out,
            saake_headline=sens.headline(),
        )
        got = sol.get("points", {}).get(f"{name}|{want['role']}", {})
        if got.get("status") != "ok":
            row.update(status=got.get("status", "not in sol.json"), match=None)
        elif [int(v) for v in got.get("block", [])] != list(block):
            row.update(status="ncu profiled another block", match=None)
        else:
            row.update(judge(sens.bottleneck, sens.mode, got.get("metrics", {}), latencies))
        rows.append(row)
    N0 = min(truth) if truth else None
    if N0 is not None:
        top, _, _ = helpers["saake"].choose(spec.size(N0), 1)
        out["saake_choice"] = {"N": N0, "block": list(helpers["saake"].candidates[top[0]])}
    out.update(status="ok", rows=rows, build_s=time.perf_counter() - t0)
    return out


def evaluate(
    plan: Mapping[str, Any],
    counters: Mapping[str, Any],
    sol: Mapping[str, Any],
    data: Any | None = None,
) -> dict[str, Any]:
    """Every unseen kernel judged (module docstring); the agreement over the measured-best rows
    (`agreement_unseen`) and, supplementary, over the default-block rows. `data`: the recorded
    dataset of the plan's kernels (default: the patterns)."""
    from klaraptor.device.profile import recorded_profile
    from klaraptor_bench.referee import agreement, profile_latencies

    latencies = profile_latencies(recorded_profile("h200"))
    data = with_counters(data if data is not None else unseen_dataset(), counters)
    names = [e["kernel"] for e in plan["kernels"] if e["kernel"] in data.kernels]
    kernels = []
    with tempfile.TemporaryDirectory() as tmp:
        store = data.to_store(Path(tmp) / "unseen.sqlite", kernels=names)
        try:
            for entry in plan["kernels"]:
                if entry["kernel"] in data.kernels:
                    kernels.append(judge_kernel(data, store, entry, sol, latencies))
        finally:
            store.close()
    by_role = {
        role: [
            {"kernel": k["kernel"], **r}
            for k in kernels
            for r in k.get("rows", [])
            if r["role"] == role
        ]
        for role in ROLES
    }
    main = agreement(by_role["measured_best"])
    errs = {
        key: [k["time_error"][key] for k in kernels if (k.get("time_error") or {}).get(key)]
        for key in ("saake", "saake_raw")
    }
    return {
        "agreement_unseen": main["agreement"],
        "unseen_kernels": [r["kernel"] for r in by_role["measured_best"] if r["match"] is not None],
        "unseen_summary": main,
        "unseen_default_block": agreement(by_role["default_block"]),
        "unseen_time_error_geomean_pct": {
            k: (100.0 * float(np.exp(np.mean(np.log(v)))) if v else None) for k, v in errs.items()
        },
        "unseen": kernels,
    }


def write_unseen(out: Path, device_dir: Path) -> dict[str, Any]:
    """saake_unseen.json in `out`, and bottlenecks.json's unseen keys (see the module
    docstring), from the plan in `out` and the device run's `device_dir`."""
    from klaraptor.core.provenance import stamp

    plan = _read(out / PLAN_FILE, "`klaraptor bench saake --unseen-plan` writes it")
    counters = _read(device_dir / "counters.json", "scripts/device_saake_unseen.py writes it")
    sol = _read(device_dir / "sol.json", "scripts/device_saake_unseen.py writes it")
    result = evaluate(plan, counters, sol)
    command = f"klaraptor bench saake --out {out} --unseen {device_dir}"
    result["device_provenance"] = {
        "counters": counters.get("provenance"),
        "sol": sol.get("provenance"),
    }
    result["provenance"] = stamp(command)
    (out / RESULT_FILE).write_text(json.dumps(result, indent=1, default=str) + "\n")
    bpath = out / "bottlenecks.json"
    if bpath.is_file():
        bj = json.loads(bpath.read_text())
        bj["agreement_unseen"] = result["agreement_unseen"]
        bj["unseen_kernels"] = result["unseen_kernels"]
        bj["unseen_detail"] = f"{RESULT_FILE} ({command})"
        bpath.write_text(json.dumps(bj, indent=1) + "\n")
    return result


__all__ = [
    "PLAN_FILE",
    "RESULT_FILE",
    "evaluate",
    "judge_kernel",
    "make_plan",
    "plan_kernel",
    "with_counters",
    "write_plan",
    "write_unseen",
]
