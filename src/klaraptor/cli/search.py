"""`klaraptor search KERNEL D=...`: SAAKE's bottleneck-driven walk over a suite kernel's program
parameters and block (models/saake/search), on emulated times: each variant is compiled and its
SASS emulated at D, nothing is run. It prints the path it took and why. With `--measure K`, the
K configurations of least emulated time are then timed on this machine's GPU (collection's
worker and CUDA events, `collect/measure`), and the measured best is the choice. With
`--budget F`, the whole joint space is ranked by emulation and timed in that order until F times
brute force's estimated measurement cost (priced before measuring: `measure_cost_model`) is
spent; `--plan-only` prints what it would time, without a GPU."""

from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Any

from klaraptor.cli.common import console, open_store, size_text
from klaraptor.core.validate import arg_nonempty, arg_positive_int


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "search",
        help="SAAKE's walk over program parameters and block, emulated; --measure K times the "
        "K most promising on the GPU",
        description="From the author's configuration, emulate each compiled variant's SASS at "
        "D, name the bottleneck, and move to the neighbour (one program parameter one value "
        "up or down, or one block dimension doubled or halved) that relieves it and emulates "
        "faster; stop where none does (SAAKE, Alg. 3). Nothing is run on a GPU unless "
        "--measure K is given: then the K configurations of least emulated time are timed "
        "there and the fastest measured is the choice.",
    )
    s.add_argument(
        "kernel", type=arg_nonempty, help="a suite kernel with program parameters (tunables.*)"
    )
    s.add_argument("D", nargs="+", help="N=4096 (or just 4096; rows=512 cols=1024)")
    s.add_argument(
        "--device",
        type=arg_nonempty,
        default="h200",
        help="the recorded GPU profile to emulate (default: h200)",
    )
    s.add_argument(
        "--measure",
        type=arg_positive_int,
        default=None,
        metavar="K",
        help="time the K configurations of least emulated time on this machine's GPU (the "
        "measurements go to the store) and choose the fastest measured",
    )
    s.add_argument(
        "--rank",
        action="store_true",
        help="also emulate every configuration of the joint space (not only the walk's), so "
        "--measure takes the K least of all",
    )
    s.add_argument(
        "--budget",
        type=_arg_budget,
        default=None,
        metavar="F",
        help="rank the whole joint space by emulation and time it in that order until F (0 < F "
        "<= 1, e.g. 0.25) times brute force's estimated measurement cost is spent; the fastest "
        "measured is the choice (configurations that cannot be emulated come last, nearest the "
        "author's configuration first)",
    )
    s.add_argument(
        "--order",
        choices=("emulated", "variants-first"),
        default=None,
        help="with --budget: the order the joint space is timed in: least emulated time first "
        "(emulated), or each compiled variant's least emulated configuration first and then "
        "the rest (variants-first); default: the one chosen on the tunables suite's training "
        "sizes (docs/saake.md)",
    )
    s.add_argument(
        "--plan-only",
        action="store_true",
        help="with --budget: print what it would time and its estimated cost, measure nothing",
    )
    s.add_argument("--json", action="store_true", help="the path as one JSON object on stdout")
    s.set_defaults(func=cmd_search)


def _arg_budget(text: str) -> float:
    from klaraptor.core.errors import KlaraptorError
    from klaraptor.models.saake.search import check_budget

    try:
        return check_budget(text)
    except KlaraptorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_search(args: argparse.Namespace) -> int:
    import numpy as np

    from klaraptor import suite
    from klaraptor.device.profile import recorded_profile
    from klaraptor.models.saake.search import (
        JointSpace,
        SearchError,
        format_path,
        most_promising,
        path_to_dict,
        search,
    )

    spec = suite.get(args.kernel)
    if not spec.params:  # before the size, which would be parsed for nothing
        raise SearchError(
            f"kernel {spec.name!r} has no program parameters: `klaraptor search` walks program "
            "parameters and block shape (the tunables.* suite kernels have them; for the block "
            "alone use `klaraptor explain`)"
        )
    D = spec.size(size_text(args.D))
    profile = recorded_profile(args.device)
    measure = args.measure
    if args.budget is not None and measure is not None:
        raise SearchError("give --measure K or --budget F, not both")
    if args.order is not None and args.budget is None:
        raise SearchError("--order sets a budgeted search's order: give --budget F with it")
    if args.plan_only and args.budget is None:
        raise SearchError("--plan-only prints a budgeted search's plan: give --budget F with it")
    if args.budget is not None and not args.plan_only:
        from klaraptor.collect.measure import gpu_check

        gpu_check("klaraptor search --budget (--plan-only prints the plan without a GPU)")
    if measure is not None:  # before minutes of emulation, not after
        from klaraptor.collect.measure import gpu_check

        gpu_check("klaraptor search --measure (without it the search runs on emulated times alone)")
    t0 = time.perf_counter()
    joint = JointSpace(spec, D, profile)
    # The interpreter of the kernel's integer arithmetic overflows float32 casts on values the
    # kernel never uses (e.g. out-of-range lanes): not the user's concern.
    with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            path = search(spec, D, profile, joint=joint)
        except SearchError:
            if args.budget is None:
                raise
            path = None  # the author's configuration cannot be emulated: the fallback order
        if args.budget is not None:
            pool = joint.search_order()
        else:
            pool = joint.ranking() if args.rank else list(path.emulated)  # type: ignore[union-attr]
    emulation_s = time.perf_counter() - t0
    doc: dict[str, Any] = (
        {**path_to_dict(path), "device": args.device}
        if path
        else {"kernel": spec.name, "D": dict(D), "device": args.device, "not_emulated": True}
    )
    doc["emulation_s"] = emulation_s
    if args.rank or args.budget is not None:
        doc["configurations_ranked"] = len(pool)
    measured = plan = None
    if args.budget is not None:
        from klaraptor.collect.measure import measure_cost_model
        from klaraptor.models.saake.search import DEFAULT_ORDER, PlanOrder, budgeted_plan

        rule = PlanOrder(args.order) if args.order else DEFAULT_ORDER
        plan = budgeted_plan(pool, args.budget, measure_cost_model().time_point_s, order=rule)
        doc["budget"] = _plan_dict(plan)
        if not args.plan_only:
            from klaraptor.collect.measure import SEARCH_OPTIONS, measure_configs
            from klaraptor.core.types import Config

            measured = measure_configs(
                spec,
                D,
                [Config(c.variant, c.block) for c in plan.chosen],
                store=open_store(args),
                options=SEARCH_OPTIONS,
                progress=not args.json,
            )
            doc["measured"] = _measured_dict(measured, dict(pool))
    if measure is not None:
        from klaraptor.collect.measure import SEARCH_OPTIONS, measure_configs
        from klaraptor.core.types import Config

        top = most_promising(pool, measure)
        measured = measure_configs(
            spec,
            D,
            [Config(c.variant, c.block) for c in top],
            store=open_store(args),
            options=SEARCH_OPTIONS,
            progress=not args.json,
        )
        doc["measured"] = _measured_dict(measured, dict(pool))
    if args.json:
        console.print_json(json.dumps(doc))
        return 0
    console.print(f"GPU emulated: recorded profile {args.device!r}", markup=False)
    ranked = f"; {len(pool)} configurations of the joint space" if args.rank else ""
    console.print(f"compilation and emulation: {emulation_s:.1f} s{ranked}", markup=False)
    if path is not None:
        console.print(format_path(path), markup=False, highlight=False)
    else:
        console.print(
            f"{spec.name} {D}: the author's configuration cannot be emulated "
            f"({'; '.join(sorted(set(joint.failed.values())))})",
            markup=False,
            highlight=False,
        )
    if plan is not None:
        console.print(_plan_text(plan), markup=False, highlight=False)
    if measured is not None:
        console.print(_measured_text(measured, dict(pool)), markup=False, highlight=False)
    return 0


def _plan_dict(plan: Any) -> dict[str, Any]:
    return {
        "fraction": plan.budget,
        "order": plan.rule.value,
        "brute_force_estimate_s": plan.brute_force_estimate_s,
        "estimated_s": plan.estimated_cost_s,
        "configurations": len(plan.order),
        "measure": [
            {"params": dict(c.variant.items()), "block": list(c.block), "emulated_ms": ms}
            for c, ms in zip(plan.chosen, plan.emulated_ms, strict=False)
        ],
        "not_emulated_measured": plan.unemulated_measured,
    }


def _plan_text(plan: Any) -> str:
    import math

    emulated = sum(math.isfinite(t) for t in plan.emulated_ms)
    priced = (
        "priced before measuring from their emulated times"
        if emulated
        else "none could be emulated: each priced at the per-point overhead"
    )
    first = (
        "each compiled variant's least emulated configuration first, then the rest by emulated time"
        if plan.rule.value == "variants-first"
        else "least emulated time first"
    )
    order = (
        first
        + (
            ", the unemulated (nearest the author's configuration first) interleaved by their "
            "share of the space"
            if emulated < len(plan.order)
            else ""
        )
        if emulated
        else "nearest the author's configuration first (Alg. 3 moves)"
    )
    lines = [
        "",
        f"budget: {plan.budget:g} of brute force's estimated measurement cost "
        f"({plan.brute_force_estimate_s:.2f} s for {len(plan.order)} configurations, {priced})",
        f"to time, {order}: {plan.measure} configurations, estimated {plan.estimated_cost_s:.2f} s",
    ]
    for c, ms in zip(plan.chosen, plan.emulated_ms, strict=False):
        emu = f"emulated {ms:.4g} ms" if math.isfinite(ms) else "not emulated (static order)"
        lines.append(f"  {c.text()}: {emu}")
    return "\n".join(lines)


def _cfg_text(c: Any) -> str:
    vals = ", ".join(f"{k}={v}" for k, v in c.params.items())
    return f"{vals}, block {c.block}"


def _measured_dict(m: Any, emulated: dict[Any, float]) -> dict[str, Any]:
    from klaraptor.models.saake.search import SearchConfig

    best = m.best
    return {
        "gpu": m.device,
        "configs": [
            {
                "params": dict(t.config.params.items()),
                "block": list(t.config.block),
                "emulated_ms": emulated.get(SearchConfig(t.config.params, t.config.block)),
                "measured_ms": t.ms,
                "status": t.status,
                "seconds": t.seconds,
                # False: only the race's first estimate (not among the few best measured fully)
                "precise": t.precise,
            }
            for t in m.timed
        ],
        "best": None
        if best is None
        else {"params": dict(best.config.params.items()), "block": list(best.config.block)},
        "best_ms": None if best is None else best.ms,
        "measurement_s": m.measurement_s,
        "wall_s": m.wall_s,
        "measured_now": m.measured_now,
        "reused": m.reused,
    }


def _measured_text(m: Any, emulated: dict[Any, float]) -> str:
    from klaraptor.models.saake.search import SearchConfig

    lines = ["", f"measured on {m.device} (CUDA events, median):"]
    for t in m.timed:
        emu = emulated.get(SearchConfig(t.config.params, t.config.block))
        got = f"{t.ms:.4g} ms" if t.ms is not None else f"{t.status}: {t.reason}"
        if t.ms is not None and not t.precise:
            got += " (first estimate)"
        shown = f"{emu:.4g} ms" if emu is not None and emu != float("inf") else "-"
        lines.append(f"  {_cfg_text(t.config)}: emulated {shown}, measured {got}")
    lines.append(
        f"measurement: {m.measurement_s:.2f} s of timing ({m.measured_now} timed now, "
        f"{m.reused} found in the store), {m.wall_s:.1f} s wall with worker start"
    )
    best = m.best
    lines.append(
        f"chosen: {_cfg_text(best.config)} at {best.ms:.4g} ms: measured, the fastest of "
        f"the {sum(t.precise and t.ms is not None for t in m.timed)} measured fully (the best "
        f"first estimates of {len(m.timed)})"
        if best is not None and best.ms is not None
        else "chosen: none (no configuration could be timed)"
    )
    return "\n".join(lines)
