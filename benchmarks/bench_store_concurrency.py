"""Stress benchmark of the store under concurrency: is anything corrupted or lost?

    python benchmarks/bench_store_concurrency.py [--runs 20] [--processes 8] [--selects 300]
                                                 [-o benchmarks/results/store_concurrency.json]

Each run, on a fresh store holding the recorded H200 build of polybench.gemm.gemm:
- `--processes` processes each make three `klaraptor.load()` calls (three `Store` handles in one
  process, as a user's program with several tuned kernels does) and choose `--selects` distinct
  sizes through them in turn, so every handle writes invocation history while the others are
  open; each process uses its own sizes, so every choice is one history row;
- one more process writes device-profile rows, one transaction each, all the while.

Afterwards the file's `PRAGMA integrity_check` must say ok, and the rows found must equal the rows
written. The history is upserted per (kernel, device, model, D), so rows written is the number of
distinct sizes chosen. Prints a line per run and writes a JSON report with provenance.

This is the experiment that found the data loss at f0a7cc1 (closing any descriptor of the file,
as the old header check did, drops every lock the process's other SQLite connections held).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

KERNEL = "polybench.gemm.gemm"
PROFILE_ROWS = 200


def _chooser(path: str, worker: int, selects: int) -> None:
    import warnings

    import klaraptor
    from klaraptor.store import Store

    warnings.simplefilter("ignore")
    kernels = [klaraptor.load(KERNEL, store=Store(path)) for _ in range(3)]
    for j in range(selects):
        kernels[j % 3].select(256 + 8 * (worker * selects + j))
    for k in kernels:
        k.selector.flush()


def _writer(path: str, rows: int) -> None:
    from klaraptor.store import Store

    with Store(path) as s:
        for j in range(rows):
            s.put_device_profile(f"stress-{j}", {"j": j})


def _prepare(path: Path) -> None:
    from klaraptor.cli.main import main

    code = main(["--store", str(path), "import-recorded", "--kernels", KERNEL, "--jobs", "1"])
    if code != 0:
        raise SystemExit(f"import-recorded failed with exit code {code}")


def one_run(tmp: Path, processes: int, selects: int) -> dict[str, object]:
    path = tmp / "stress.sqlite"
    _prepare(path)
    conn = sqlite3.connect(path)
    history_before = conn.execute("SELECT count(*) FROM history").fetchone()[0]
    conn.close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_chooser, args=(str(path), w, selects)) for w in range(processes)]
    procs.append(ctx.Process(target=_writer, args=(str(path), PROFILE_ROWS)))
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    seconds = time.perf_counter() - t0
    conn = sqlite3.connect(path)
    try:
        integrity = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        history = conn.execute("SELECT count(*) FROM history").fetchone()[0] - history_before
        profiles = conn.execute(
            "SELECT count(*) FROM device_profiles WHERE key LIKE 'stress-%'"
        ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        integrity, history, profiles = [f"unreadable: {exc}"], -1, -1
    finally:
        conn.close()
    written = processes * selects + PROFILE_ROWS
    found = history + profiles
    return {
        "exit_codes": [p.exitcode for p in procs],
        "integrity": integrity[:5],
        "integrity_ok": integrity == ["ok"],
        "rows_written": written,
        "rows_found": found,
        "rows_lost": written - found,
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--selects", type=int, default=300)
    ap.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "store_concurrency.json",
    )
    args = ap.parse_args(argv)
    from klaraptor.core.provenance import stamp

    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            r = one_run(Path(tmp), args.processes, args.selects)
        runs.append(r)
        print(
            f"run {i + 1:2d}: integrity {'ok' if r['integrity_ok'] else r['integrity']}, "
            f"rows {r['rows_found']}/{r['rows_written']}, exit codes {r['exit_codes']}, "
            f"{r['seconds']} s",
            flush=True,
        )
    bad = sum(1 for r in runs if not r["integrity_ok"])
    lost = sum(int(r["rows_lost"]) for r in runs)
    failed = sum(1 for r in runs if any(c != 0 for c in r["exit_codes"]))  # type: ignore[attr-defined]
    report = {
        "provenance": stamp(),
        "processes": args.processes,
        "handles_per_process": 3,
        "selects_per_process": args.selects,
        "runs": len(runs),
        "corrupted_runs": bad,
        "rows_lost": lost,
        "runs_with_a_failed_process": failed,
        "per_run": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{len(runs)} runs: {bad} corrupted, {lost} rows lost, {failed} with a failed process "
        f"-> {args.out}"
    )
    return 0 if bad == 0 and lost == 0 and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
