"""Put the recorded L2-flushed timings and the argument bytes into the shipped datasets (CPU).

    .venv/bin/python benchmarks/record_cold.py

For each suite (PolyBench: data/h200_suite.json.gz, Rodinia-style: data/h200_rodinia.json.gz):
- the cold (L2-flushed) timings of every candidate at the largest training size from
  benchmarks/results/h200/cold/cold_<suite>.jsonl (`benchmarks/bench_cold.py` on the H200,
  2026-11-23), with the measured wall of both passes in each kernel's costs;
- the bytes of each kernel's array arguments at its training sizes, counted on the CPU from the
  suite's `make_args(D, rng, device=False)` (the arrays a GPU run allocates), in its collection
  facts.
Idempotent: running it again rewrites the same content.
"""

from __future__ import annotations

import sys
from pathlib import Path

from klaraptor import suite
from klaraptor.suite.recorded import load_recorded, recorded_path
from klaraptor_bench.dataset import add_argument_bytes, add_cold_timings, write_recorded

ROOT = Path(__file__).resolve().parents[1]
COLD = ROOT / "benchmarks/results/h200/cold"
PROVENANCE = {
    "what": "every candidate at the largest training size, timed with the training protocol "
    "less the output check, with a 2 x L2 buffer rewritten before every sample (flush_l2)",
    "gpu": "NVIDIA H200 (132 SMs, cc 9.0, 60 MB L2), driver 580.159.04, CuPy 14",
    "date": "2026-11-23",
    "command": "python3 benchmarks/bench_cold.py OUT (commit e9f9ae4 on the device; log rows "
    "carry 3a4d02d, the session's KLARAPTOR_COMMIT)",
    "merged_by": "benchmarks/record_cold.py",
}


def main() -> int:
    for name, log in (("polybench", "cold_polybench.jsonl"), ("rodinia", "cold_rodinia.jsonl")):
        path = Path(recorded_path(name))
        data = load_recorded(path)
        status = add_cold_timings(data, COLD / log, {**PROVENANCE, "source": f"cold/{log}"})
        sizes = {
            n: [suite.get(n).size(v) for v in suite.get(n).meta["train_sizes"]]
            for n in data.kernels
        }
        add_argument_bytes(data, sizes)
        data.provenance["arg_bytes"] = (
            "bytes of the array arguments of make_args(D, rng, device=False) at the training "
            "sizes, counted on a CPU by benchmarks/record_cold.py (CollectFacts.arg_bytes)"
        )
        write_recorded(data, path)
        missing = {k: v for k, v in status.items() if v != "added"}
        print(f"{name}: cold timings for {len(status) - len(missing)} kernels; {missing or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
