"""SAAKE's search over program parameters (issue 37; SAAKE §5, Algorithms 2-3) judged on the
recorded tunables suite, on the CPU.

Every compiled variant of a kernel (its program parameters: thread and block coarsening, tile
sizes, unrolling) is emulated from its SASS alone, at the actual evaluation size D and never run:
`KernelEmulator.from_variant` (trip counts from the kernel's parameters, no counters, no
calibration: the tunables runs collected timings only). Three ways to choose a configuration
(variant, block) at D, each scored against the recorded ground truth (every configuration of the
joint space timed at D) by how many configurations it must time to come within 2 % (and 5 %) of
the best, and how many measurement seconds those take (each configuration's recorded wall time):

- `saake_rank`: the whole joint space ranked by emulated time, timed in that order;
- `saake_walk` (Alg. 3): from the author's configuration (default variant and block), the
  emulator names the bottleneck (`sensitivity.analyse`) and the neighbours (one program parameter
  one value up or down, or one block dimension doubled or halved) are timed in the order that
  relieves it (latency-bound: more resident warps first; throughput-bound: least time on the
  named resource first); the walk moves to the first that is faster and stops where none is;
- `klaraptor_topk`: klaraptor's own build (the recorded helper program, fitted on the build's
  timings at the training sizes) ranks the joint space; timed in that order (online top-k
  refinement). Its build measurements are reported beside (`build_s`), not added.

Brute force times every configuration: `cost_ratio` is a method's seconds over brute force's.
`klaraptor bench saake --params RAW.json` writes `saake_param_search.json` and `.md`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError

RESULT_FILE = "saake_param_search.json"
WITHIN = (0.02, 0.05)
BUDGETS = (3, 5, 10)  # fixed numbers of configurations timed, in emulated order
Key = tuple[str, tuple[int, int, int]]  # (variant text "A=1,B=2", block)


def _variant_text(pv: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in pv.items())


def load_recorded(path: Path) -> dict[str, Any]:
    """The extract of `scripts/extract_tunables_recorded.py`."""
    if not path.is_file():
        raise KlaraptorError(
            f"{path} does not exist (scripts/extract_tunables_recorded.py writes it)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KlaraptorError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data.get("kernels"), dict):
        raise KlaraptorError(f"{path} has no 'kernels' object")
    return data


def emulate_joint_space(
    spec: Any, rec: Mapping[str, Any], N: int, profile: Any
) -> tuple[dict[Key, tuple[Any, int]], dict[str, str], float]:
    """Every timed (variant, block) at N emulated: key -> (the variant's emulator, index);
    the variants that could not be emulated, with why; the CPU seconds it took."""
    from klaraptor.core.types import KernelAttributes
    from klaraptor.models.saake.emulator import KernelEmulator

    blocks: dict[str, list[tuple[int, int, int]]] = {}
    for text, b, *_ in rec["eval"].get(str(N), []):
        blocks.setdefault(text, []).append(tuple(int(v) for v in b))  # type: ignore[arg-type]
    out: dict[Key, tuple[Any, int]] = {}
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    for pv in spec.variants():
        text = _variant_text(pv)
        if text not in blocks:
            continue
        attrs = rec["variant_attributes"].get(text)
        if attrs is None:
            failed[text] = "no recorded attributes"
            continue
        try:
            em = KernelEmulator.from_variant(
                spec, pv, profile, KernelAttributes(**attrs), blocks[text], [spec.size(N)]
            )
        except KlaraptorError as exc:
            failed[text] = str(exc)
            continue
        for j, b in enumerate(em.candidates):
            out[(text, b)] = (em, j)
    return out, failed, time.perf_counter() - t0


def _timed_until(
    order: Sequence[Key], truth: Mapping[Key, tuple[float, float]], best: float, within: float
) -> tuple[int | None, float]:
    """How many of `order` are timed until one is within `within` of the best, and their
    seconds (None, all seconds: never)."""
    secs = 0.0
    for k, key in enumerate(order, 1):
        ms, s = truth[key]
        secs += s
        if ms <= best * (1 + within):
            return k, secs
    return None, secs


def _neighbours(spec: Any, key: Key, space: set[Key]) -> list[Key]:
    """The moves of Alg. 3 (`models.saake.search.neighbours`) from `key` within `space`."""
    from klaraptor.models.saake.search import SearchConfig, neighbours

    text, block = key
    values = {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))} if text else {}
    blocks: dict[str, set[tuple[int, int, int]]] = {}
    for t, b in space:
        blocks.setdefault(t, set()).add(b)
    start = SearchConfig(spec.param_values(values), block)
    moves = neighbours(spec, start, lambda pv: blocks.get(_variant_text(pv), set()))
    return [(_variant_text(c.variant), c.block) for c, _ in moves]


def walk(
    spec: Any,
    N: int,
    ems: Mapping[Key, tuple[Any, int]],
    truth: Mapping[Key, tuple[float, float]],
    start: Key,
) -> list[dict[str, Any]]:
    """The timed configurations of the bottleneck-driven walk (module docstring), in order."""
    from klaraptor.models.saake.search import relief_key
    from klaraptor.models.saake.sensitivity import analyse

    d = (int(N),)
    steps = [{"config": list(start), "ms": truth[start][0], "reason": "start (author's)"}]
    visited, best = {start}, start
    while True:
        em, j = ems[best]
        s = analyse(em, d, j)
        cands = [n for n in _neighbours(spec, best, set(ems)) if n in truth and n not in visited]
        if not cands:
            break
        pred = {n: ems[n][0].cycles(d, ems[n][1]) for n in cands}
        key = {n: relief_key(s.mode, s.bottleneck, *ems[n], d=d, cycles=pred[n]) for n in cands}
        improved = False
        for n in sorted(cands, key=key.__getitem__):
            visited.add(n)
            steps.append({"config": list(n), "ms": truth[n][0], "reason": s.headline()})
            if truth[n][0] < truth[best][0]:
                best, improved = n, True
                break
        if not improved:
            break
    return steps


def _helper_order(rec: Mapping[str, Any], spec: Any, N: int, space: set[Key]) -> list[Key]:
    """klaraptor's own ranking at N (the recorded build's helper program), timed configs only."""
    from klaraptor.helper.program import HelperProgram

    helper = HelperProgram.from_dict(rec["helper"])
    pred = helper.predict(spec.size(N))
    out = []
    for i in pred.order:
        c = helper.keys[int(i)]
        key = (_variant_text(c.params), tuple(int(v) for v in c.block))
        if key in space:
            out.append(key)
    return out


def evaluate_pair(spec: Any, rec: Mapping[str, Any], N: int, profile: Any) -> dict[str, Any]:
    """One (kernel, N): every method's cost and choice against brute force."""
    truth: dict[Key, tuple[float, float]] = {
        # rows: (variant, block, ms, seconds[, of which the size's setup]): the seconds count
        (text, tuple(int(v) for v in b)): (float(ms), float(s))  # type: ignore[misc]
        for text, b, ms, s, *_ in rec["eval"].get(str(N), [])
    }
    best_key = min(truth, key=lambda k: truth[k][0])
    best = truth[best_key][0]
    brute_s = sum(s for _, s in truth.values())
    row: dict[str, Any] = {
        "N": N,
        "configs": len(truth),
        "best": list(best_key),
        "best_ms": best,
        "brute_force_s": brute_s,
    }
    default = (_variant_text(spec.default_variant), tuple(int(v) for v in spec.default_block))
    if default in truth:
        row["default_r"] = truth[default][0] / best
    ems, failed, emu_s = emulate_joint_space(spec, rec, N, profile)
    row["emulation_s"] = emu_s
    if failed:
        row["not_emulated"] = failed
    clock = profile.sm_clock_mhz * 1e3
    pred = {k: em.cycles((N,), j) / clock for k, (em, j) in ems.items()}
    finite = [k for k in truth if k in pred and math.isfinite(pred[k])]
    order = sorted(finite, key=pred.__getitem__) + [k for k in truth if k not in finite]
    meas = np.array([truth[k][0] for k in finite])
    emu = np.array([pred[k] for k in finite])
    methods: dict[str, Any] = {}
    if len(finite) >= 2:
        from scipy.stats import spearmanr

        row["emulated_spearman"] = float(spearmanr(meas, emu).correlation)
        row["emulated_raw_mape"] = float(np.mean(np.abs(emu / meas - 1)))
    # Without any emulated configuration SAAKE has nothing to rank (its trip counts need the
    # kernel's data: counters): no SAAKE method for the pair.
    orders = {"saake_rank": order} if finite else {}
    if not finite:
        row["saake"] = "no configuration could be emulated (see not_emulated)"
    if rec.get("helper"):
        orders["klaraptor_topk"] = _helper_order(rec, spec, N, set(truth))
    for name, od in orders.items():
        m: dict[str, Any] = {"first": list(od[0]), "first_r": truth[od[0]][0] / best}
        for w in WITHIN:
            k, s = _timed_until(od, truth, best, w)
            tag = f"{round(100 * w)}pct"
            m[f"timed_to_within_{tag}"] = k
            m[f"cost_ratio_to_within_{tag}"] = s / brute_s
        for k in BUDGETS:
            top = od[:k]
            m[f"top{k}_r"] = min(truth[x][0] for x in top) / best
            m[f"top{k}_cost_ratio"] = sum(truth[x][1] for x in top) / brute_s
        methods[name] = m
    if default in ems:
        steps = walk(spec, N, ems, truth, default)
        secs = sum(truth[(s["config"][0], tuple(s["config"][1]))][1] for s in steps)
        reached = next((k for k, s in enumerate(steps, 1) if s["ms"] <= best * 1.02), None)
        methods["saake_walk"] = {
            "timed": len(steps),
            "final_r": min(s["ms"] for s in steps) / best,
            "timed_to_within_2pct": reached,
            "cost_ratio": secs / brute_s,
            "path": steps,
        }
    row["methods"] = methods
    return row


def evaluate(
    raw: Path,
    kernels: Sequence[str] | None = None,
    console: Any = None,
    on_pair: Any = None,
) -> dict[str, Any]:
    """Every (kernel, evaluation size) of the extract: every kernel at its smaller evaluation
    size first, then at the larger (so a run cut short has judged every kernel once);
    `on_pair(result so far)` after each."""
    from klaraptor import suite
    from klaraptor.device.profile import recorded_profile

    data = load_recorded(raw)
    profile = recorded_profile("h200")
    todo = []
    for name, rec in sorted(data["kernels"].items()):
        if kernels and name not in kernels:
            continue
        for rank, N in enumerate(sorted(int(n) for n in rec["eval"])):
            todo.append((rank, name, N))
    result: dict[str, Any] = {"source": data.get("source", ""), "pairs": []}
    for _, name, N in sorted(todo):
        rec = data["kernels"][name]
        row = {"kernel": name, **evaluate_pair(suite.get(name), rec, N, profile)}
        result["pairs"].append(row)
        result["summary"] = summarize(result["pairs"])
        if console is not None:
            ms = row["methods"]
            console.print(
                f"  {name} N={N}: rank to 5% {ms['saake_rank']['timed_to_within_5pct']}, "
                f"topk to 5% {ms.get('klaraptor_topk', {}).get('timed_to_within_5pct')}, "
                f"walk r {ms.get('saake_walk', {}).get('final_r', float('nan')):.3f} "
                f"of {row['configs']} (emulation {row['emulation_s']:.0f} s)"
            )
        if on_pair is not None:
            on_pair(result)
    result["summary"] = summarize(result["pairs"])
    return result


def summarize(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per method: the share of pairs within 5 % of the best (fixed budgets and the walk), the
    geomean r, and the median timed configurations and cost ratio to come within 2 % / 5 %."""

    def gm(v: Sequence[float]) -> float | None:
        return float(np.exp(np.mean(np.log(v)))) if v else None

    out: dict[str, Any] = {"pairs": len(pairs)}
    for name in ("saake_rank", "klaraptor_topk"):
        ms = [p["methods"][name] for p in pairs if name in p["methods"]]
        if not ms:
            continue
        s: dict[str, Any] = {}
        for w in WITHIN:
            tag = f"{round(100 * w)}pct"
            ks = [m[f"timed_to_within_{tag}"] for m in ms if m[f"timed_to_within_{tag}"]]
            s[f"median_timed_to_within_{tag}"] = float(np.median(ks)) if ks else None
            s[f"median_cost_ratio_to_within_{tag}"] = float(
                np.median([m[f"cost_ratio_to_within_{tag}"] for m in ms])
            )
        for k in BUDGETS:
            s[f"top{k}_within_5pct"] = float(np.mean([m[f"top{k}_r"] <= 1.05 for m in ms]))
            s[f"top{k}_geomean_r"] = gm([m[f"top{k}_r"] for m in ms])
            s[f"top{k}_median_cost_ratio"] = float(np.median([m[f"top{k}_cost_ratio"] for m in ms]))
        out[name] = s
    ws = [p["methods"]["saake_walk"] for p in pairs if "saake_walk" in p["methods"]]
    if ws:
        out["saake_walk"] = {
            "pairs": len(ws),
            "within_5pct": float(np.mean([w["final_r"] <= 1.05 for w in ws])),
            "geomean_r": gm([w["final_r"] for w in ws]),
            "median_timed": float(np.median([w["timed"] for w in ws])),
            "median_cost_ratio": float(np.median([w["cost_ratio"] for w in ws])),
        }
    sp = [p["emulated_spearman"] for p in pairs if p.get("emulated_spearman") is not None]
    out["emulated_spearman_median"] = float(np.median(sp)) if sp else None
    dr = [p["default_r"] for p in pairs if "default_r" in p]
    out["default_geomean_r"] = gm(dr)
    return out


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(result: Mapping[str, Any]) -> str:
    lines = [
        "| kernel | N | configs | default r | spearman | rank: timed to 2 % / 5 % | "
        "top-k: timed to 2 % / 5 % | rank top-5 r (cost) | walk r (timed, cost) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in result["pairs"]:
        m = p["methods"]
        rk, tk, wk = m.get("saake_rank", {}), m.get("klaraptor_topk", {}), m.get("saake_walk", {})
        lines.append(
            f"| {p['kernel'].split('.', 1)[1]} | {p['N']} | {p['configs']} | "
            f"{_f(p.get('default_r'), '.2f')} | {_f(p.get('emulated_spearman'), '.2f')} | "
            f"{_f(rk.get('timed_to_within_2pct'), '')} / {_f(rk.get('timed_to_within_5pct'), '')} | "
            f"{_f(tk.get('timed_to_within_2pct'), '')} / {_f(tk.get('timed_to_within_5pct'), '')} | "
            f"{_f(rk.get('top5_r'))} ({_f(rk.get('top5_cost_ratio'), '.3f')}) | "
            f"{_f(wk.get('final_r'))} ({_f(wk.get('timed'), '')}, "
            f"{_f(wk.get('cost_ratio'), '.3f')}) |"
        )
    return "\n".join(lines)


def write(
    out: Path, raw: Path, kernels: Sequence[str] | None = None, console: Any = None
) -> dict[str, Any]:
    """saake_param_search.json and .md in `out`, rewritten after every pair (a run cut short
    keeps what it judged; `complete` says whether every pair was)."""
    from klaraptor.core.provenance import stamp

    command = f"klaraptor bench saake --out {out} --params {raw}"
    prov = stamp(command)

    def save(result: dict[str, Any], complete: bool) -> None:
        doc = {**result, "complete": complete, "provenance": prov}
        (out / RESULT_FILE).write_text(json.dumps(doc, indent=1, default=str) + "\n")
        (out / RESULT_FILE.replace(".json", ".md")).write_text(
            "# SAAKE's search over program parameters against klaraptor's top-k "
            "(tunables, H200)\n\n"
            "Timed configurations (and their share of brute force's measurement seconds) "
            "needed to come within 2 % / 5 % of the best of the joint space at each evaluation "
            "size; SAAKE emulates every compiled variant from its SASS, without counters or "
            f"calibration (`{command}`; module docstring of klaraptor_bench.saake_params)."
            + ("" if complete else " **Incomplete: the run was cut short.**")
            + "\n\n"
            + table(doc)
            + "\n\nSummary:\n\n```\n"
            + json.dumps(doc.get("summary", {}), indent=1)
            + "\n```\n"
        )

    result = evaluate(raw, kernels, console, on_pair=lambda r: save(r, False))
    save(result, True)
    return result


__all__ = [
    "RESULT_FILE",
    "evaluate",
    "evaluate_pair",
    "load_recorded",
    "summarize",
    "walk",
    "write",
]
