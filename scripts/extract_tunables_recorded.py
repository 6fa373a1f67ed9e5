"""Extract what the SAAKE search over program parameters needs (issue 37) from the stores of a
`benchmarks/bench_tunables.py` run (its OUT/stores/*.sqlite, or the .tgz the lead keeps) into
one compact JSON: per kernel, each compiled variant's attributes, every (variant, block) timed
at the evaluation sizes (median ms, the point's wall seconds and the part of them that built the
size's arguments and reference outputs), the timings of the
build at the training sizes, and the build's helper program (klaraptor's own ranking).

    PYTHONPATH=src python3 scripts/extract_tunables_recorded.py STORES_DIR_OR_TGZ OUT.json \
        --provenance "H200, 2026-11-28, bench_tunables.py at 1954ee6"
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from typing import Any


def _kernel(path: Path, name: str) -> dict[str, Any]:
    from klaraptor import suite

    spec = suite.get(name)
    evals = {int(n) for n in spec.meta["eval_sizes"]}
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        facts = json.loads(
            next(con.execute("SELECT facts FROM collect_facts WHERE kernel = ?", (name,)))[0]
        )
        rows = con.execute(
            "SELECT d, bx, by, bz, value, params FROM measurements WHERE kernel = ? AND "
            "kind = 'time' AND status = 'ok' ORDER BY id",
            (name,),
        ).fetchall()
        helper = con.execute(
            "SELECT helper, report FROM builds WHERE kernel = ? AND model = 'auto' "
            "ORDER BY created DESC, id DESC LIMIT 1",
            (name,),
        ).fetchone()
    finally:
        con.close()
    truth: dict[str, list[list[Any]]] = {}
    train: dict[str, list[list[Any]]] = {}
    for d, bx, by, bz, value, params in rows:
        n = int(json.loads(d)[0])
        v = json.loads(value)
        # wall_s is what the point cost in the worker, the size's setup included when it paid
        # it (setup_s: arguments and reference outputs, a part of wall_s)
        row = [params, [bx, by, bz], v["median_ms"], v.get("wall_s", 0.0), v.get("setup_s", 0.0)]
        (truth if n in evals else train).setdefault(str(n), []).append(row)
    report = json.loads(helper[1]) if helper else {}
    return {
        "variant_attributes": facts.get("variant_attributes", {}),
        "eval": truth,
        "train": train,
        "helper": json.loads(helper[0]) if helper else None,
        "build_plan": (report.get("collect") or {}).get("plan"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--provenance", default="")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = a.stores
        if src.is_file():
            with tarfile.open(src) as tf:
                tf.extractall(tmp, filter="data")
            src = Path(tmp)
        # one folder of stores, or several (a run split over GPUs: t0/stores, t1/stores, ...)
        kernels = {}
        for path in sorted(src.rglob("tunables.*.sqlite"), key=lambda p: p.name):
            if path.stem in kernels:
                raise SystemExit(f"{path.stem}: two stores in {a.stores}")
            kernels[path.stem] = _kernel(path, path.stem)
    a.out.write_text(
        json.dumps({"source": a.provenance, "kernels": kernels}, separators=(",", ":")) + "\n"
    )
    print(f"wrote {a.out}: {len(kernels)} kernels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
