"""SNOWPACK's unseen-kernel evaluation under the paper's own protocol, beside ours.

    python experiments/snowpack_kernel_split.py [OUTDIR]

The issue's unseen-kernel scenario (`klaraptor bench snowpack`) leaves one benchmark out: none
of the held-out kernel's siblings train. The paper (§4) split its 89 kernels 75:25 by kernel,
so a held-out kernel's siblings of the same application could train, and it removed 8 kernels
that caused large errors for every model (§3.5). This runs the same procedure (the search and
the rule of `klaraptor.models.snowpack.search`, `SearchSettings()`) with kernels held out in
`KERNEL_FOLDS` = 4 seeded random folds (each kernel once; every kernel kept) and scores the
evaluation sizes as the main evaluation does. A report, not a choice: nothing in SNOWPACK is
decided from it. Writes OUTDIR/snowpack_kernel_split.json (default experiments/results/h200).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from klaraptor.core.provenance import stamp
from klaraptor_bench.snowpack_eval import auto_from_pairs, evaluate

ROOT = Path(__file__).resolve().parent
# The product evaluation's committed pairs (`klaraptor bench report`): its `auto` choices.
REPORTED = ROOT.parent / "benchmarks" / "results" / "h200"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "results" / "h200"
    auto = auto_from_pairs(REPORTED / "pairs.json")
    result = evaluate(console=Console(), auto=auto, scenarios=("kernel_split",))
    result["provenance"] = stamp(
        " ".join(["python", "experiments/snowpack_kernel_split.py", *argv])
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "snowpack_kernel_split.json").write_text(json.dumps(result, indent=1, default=float))
    b = result["kernel_split"]
    print(
        f"kernel split: SNOWPACK mean S {b['mean_S_pct']:.2f}% (median {b['median_S_pct']:.2f}%), "
        f"OCC {b['occ_mean_S_pct']:.2f}%, tune-once {b['tune_once_mean_S_pct']:.2f}%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
