"""Record the static analysis (SASS, control codes, PTX, resources) of suite kernels.

Usage: python scripts/record_isa.py [NAME_OR_PREFIX ...] [--out PATH] [--arch sm_90] [--fresh]

Without names every kernel of `klaraptor.suite.all_specs()` is recorded; a name selects one
kernel ("polybench.gemm.gemm"), a prefix a group ("polybench.corr", "rodinia"). Kernels already
in the output file and not selected are kept (so a new suite can be added later), unless
--fresh. Needs the `isa` extra (NVRTC, cuobjdump, nvdisasm); no GPU. The file is what
`klaraptor.isa.load_recorded()` reads on any CPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

from rich.progress import track

from klaraptor import provenance, suite
from klaraptor.isa import analysis, compile, tools
from klaraptor.isa.errors import KlaraptorError

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "klaraptor" / "data" / analysis.RECORDED


def select(specs: list, patterns: list[str]) -> list:
    if not patterns:
        return specs
    chosen = [
        s
        for s in specs
        if any(s.name == p or s.name.startswith(p.rstrip(".") + ".") for p in patterns)
    ]
    unmatched = [
        p
        for p in patterns
        if not any(s.name == p or s.name.startswith(p.rstrip(".") + ".") for s in specs)
    ]
    if unmatched:
        known = ", ".join(sorted({s.name.rsplit(".", 1)[0] for s in specs}))
        raise SystemExit(f"no suite kernel matches {unmatched}; known groups: {known}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="kernel names or prefixes (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--arch", default=compile.DEFAULT_ARCH)
    ap.add_argument("--fresh", action="store_true", help="drop kernels not recorded now")
    args = ap.parse_args(argv)

    specs = select(suite.all_specs(), args.names)
    old: dict = {}
    if args.out.is_file() and not args.fresh:
        with gzip.open(args.out, "rt", encoding="utf-8") as fh:
            old = json.load(fh).get("kernels", {})

    command = " ".join(["python", "scripts/record_isa.py", *(argv or sys.argv[1:])])
    stamp = provenance.stamp(command)
    kernels: dict[str, dict] = {}
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    for spec in track(specs, description="recording ISA"):
        try:
            d = analysis.analyze(spec, args.arch, strict=False).to_dict()
        except KlaraptorError as exc:
            failed[spec.name] = str(exc)
            continue
        d["recorded"] = {"date": stamp["date"], "commit": stamp["commit"]}
        kernels[spec.name] = d
    elapsed = time.perf_counter() - t0

    merged = {**{k: v for k, v in old.items() if k not in kernels}, **kernels}
    doc = {
        "format": analysis.FORMAT,
        "provenance": {
            **stamp,
            "arch": args.arch,
            "nvrtc": compile.nvrtc_version(),
            **tools.versions(),
            "options_added": list(compile.CUPY_EXTRA_OPTIONS),
            "options_note": "each kernel's NVRTC options are in its 'options' "
            "(the spec's options, then what CuPy adds)",
            "recorded_now": sorted(kernels),
            "kept_from_file": sorted(set(merged) - set(kernels)),
            "seconds": round(elapsed, 1),
        },
        "kernels": dict(sorted(merged.items())),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    blob = json.dumps(doc, separators=(",", ":"), sort_keys=False).encode()
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(blob)
    print(
        f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB, {len(merged)} kernels, "
        f"{len(kernels)} recorded now in {elapsed:.0f} s)"
    )
    for name, err in failed.items():
        print(f"FAILED {name}: {err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
