"""GPU: the first call of the README's tuned saxpy, per front-end, in seconds (issue 33, item 3).

    PYTHONPATH=src python3 benchmarks/bench_first_call.py OUT [--frontends cupy cuda_core numba]
        [--limit-each S]

Each Python example of the README's front-ends section (CuPy, cuda.core, Numba; the section's
text, not a copy) runs as written with `python -c`, in a fresh process with:
- an empty store (a fresh KLARAPTOR_HOME) holding only the recorded H200 device profile when this
  GPU's device key is its (put there by a separate process first, so no microbenchmark runs;
  `profile` in the JSON says whether it was), and
- a fresh, empty CuPy kernel cache (CUPY_CACHE_DIR), as on a machine that never compiled it.

The example's text gets timing lines around its first call (the first line that starts with the
kernel's name and a parenthesis), a device synchronisation after it, and, at the end, one line of
JSON with the build's report (`wall_s` of its steps, worker start-up, plan points). Nothing else
in it changes. Writes OUT/first_call.json: `first_call_s` per front-end (the first call, the
build included, synchronised), with per front-end the process's wall time, the time before the
first call (imports and data), the build's own figure from its message, and the report; and
merges `first_call_s` into OUT/bench_cost.json when `benchmarks/bench_cost.py` wrote one. A
front-end whose example fails or runs past `--limit-each` is recorded with why; the others run.
About 30-40 s on an H200 today.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECTION = "Front-ends: Numba, CuPy, cuda.core, PyTorch, Kernel Tuner"
FRONTENDS = ("cupy", "cuda_core", "numba")
TARGET_S = {"cupy": 2.0, "cuda_core": 2.0, "numba": 5.0}  # issue 33's targets
MARK = "KLARAPTOR_FIRST_CALL "
NUMPY_SHIM = ROOT / "scripts" / "device_env"  # numpy.row_stack for numba-cuda 0.30.4

SEED = """
from klaraptor.device.profile import query_device, recorded_profile
from klaraptor.store import Store
here, rec = query_device(), recorded_profile("h200")
if here.key == rec.key:
    Store().save_profile(rec)
print("recorded h200 profile" if here.key == rec.key else f"none: this GPU is {here.key!r}")
"""

# Appended to the example: the build's report, as JSON on one line.
EPILOGUE = """
_kl_k = getattr({name}, "kernel", None)
_kl_r = getattr(_kl_k, "report", None)
_kl_rep = None
if _kl_r is not None:
    _kl_c = _kl_r.collect.to_dict() if _kl_r.collect is not None else {{}}
    _kl_rep = {{"model": _kl_r.model, "total_wall_s": _kl_r.total_wall_s,
               "fit_wall_s": _kl_r.fit_wall_s, "wall_s": _kl_c.get("wall_s"),
               "counts": _kl_c.get("counts"), "ncu": _kl_c.get("ncu"),
               "worker": _kl_c.get("worker")}}
    _kl_plan = _kl_c.get("plan")
    if isinstance(_kl_plan, dict):
        _kl_rep["plan"] = {{k: v for k, v in _kl_plan.items() if not isinstance(v, (list, dict))}}
print({mark!r} + __import__("json").dumps({{
    "before_first_call_s": _kl_t0 - _kl_t_start, "first_call_s": _kl_t1 - _kl_t0,
    "report": _kl_rep}}, default=str), flush=True)
"""


def readme_examples(text: str) -> dict[str, str]:
    """The front-ends section's Python examples by front-end (what each imports names it)."""
    m = re.search(rf"^## {re.escape(SECTION)}\n(.*?)(?=^## )", text, re.S | re.M)
    if m is None:
        return {}
    out: dict[str, str] = {}
    for tag, body in re.findall(r"^```(\w*)\n(.*?)^```$", m.group(1), re.S | re.M):
        if tag != "python":
            continue
        if "from numba import cuda" in body:
            out["numba"] = body
        elif "compile_kernel" in body:
            out["cuda_core"] = body
        elif "import torch" not in body:
            out["cupy"] = body
    return out


def instrument(code: str, sync: str = "cupy") -> str:
    """The example with timing lines around its first call and the report line at the end.

    The first call is the first line that starts with the tuned kernel's name and "(": the name
    is the one `klaraptor.tune(...)` wraps (the assignment's or the decorated function's)."""
    m = re.search(r"^(\w+)\s*=\s*klaraptor\.tune\(", code, re.M) or re.search(
        r"^@klaraptor\.tune\(.*?^def (\w+)", code, re.M | re.S
    )
    if m is None:
        raise ValueError("the example has no `name = klaraptor.tune(...)` or @klaraptor.tune")
    name = m.group(1)
    lines = code.splitlines()
    call = next((i for i, ln in enumerate(lines) if re.match(rf"{name}\(", ln)), None)
    if call is None:
        raise ValueError(f"the example never calls {name}(...) at the top level")
    synchronize = (
        "__import__('numba.cuda').cuda.synchronize()"
        if sync == "numba"
        else "__import__('cupy').cuda.runtime.deviceSynchronize()"
    )
    out = ["import time as _kl_time", "_kl_t_start = _kl_time.perf_counter()"]
    out += lines[:call]
    out += ["_kl_t0 = _kl_time.perf_counter()", lines[call], synchronize]
    out += ["_kl_t1 = _kl_time.perf_counter()"]
    out += lines[call + 1 :]
    out += EPILOGUE.format(name=name, mark=MARK).splitlines()
    return "\n".join(out) + "\n"


BUILT = re.compile(r"built (\S+) in ([\d.]+) s \(model (\w+)\)")


def parse_run(stdout: str, stderr: str) -> dict[str, Any]:
    """The marker line's figures and the build message's, from one example's output."""
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            try:
                out.update(json.loads(line[len(MARK) :]))
            except ValueError:
                out["marker_error"] = line[:300]
    b = BUILT.search(" ".join(stderr.split()))  # rich wraps long lines
    if b:
        out["build_name"], out["build_s"], out["model"] = b.group(1), float(b.group(2)), b.group(3)
    return out


def _run(argv: list[str], env: dict[str, str], limit: float) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=limit, cwd=ROOT)
        rc, so, se = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        so = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        se = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
    return {"rc": rc, "wall_s": time.monotonic() - t0, "stdout": so or "", "stderr": se or ""}


def merge_into_cost(out: Path, first_call_s: dict[str, float | None], details: Any) -> bool:
    """Put `first_call_s` into OUT/bench_cost.json, if it exists."""
    path = out / "bench_cost.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    report["first_call_s"] = first_call_s
    report["first_call"] = details
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--frontends", nargs="+", choices=FRONTENDS, default=list(FRONTENDS))
    ap.add_argument("--limit-each", type=float, default=90.0, help="seconds per example")
    a = ap.parse_args(argv)
    from klaraptor.core.provenance import stamp

    out: Path = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    examples = readme_examples((ROOT / "README.md").read_text())
    base = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(NUMPY_SHIM), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    results: dict[str, Any] = {}
    first_call_s: dict[str, float | None] = {}
    prov = stamp(what="issue 33: the README's first calls, empty store, recorded profile")

    def save() -> None:
        doc = {
            "provenance": prov,
            "first_call_s": first_call_s,
            "targets_s": TARGET_S,
            "frontends": results,
        }
        (out / "first_call.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        merge_into_cost(out, first_call_s, {"targets_s": TARGET_S, "frontends": results})

    for fe in a.frontends:
        rec: dict[str, Any] = results.setdefault(fe, {})
        first_call_s[fe] = None
        code = examples.get(fe)
        if code is None:
            rec["error"] = f"README's section {SECTION!r} has no {fe} example"
            save()
            continue
        try:
            timed = instrument(code, sync="numba" if fe == "numba" else "cupy")
        except ValueError as exc:
            rec["error"] = str(exc)
            save()
            continue
        home = Path(tempfile.mkdtemp(prefix=f"klhome_{fe}_"))
        env = {
            **base,
            "KLARAPTOR_HOME": str(home),
            "CUPY_CACHE_DIR": tempfile.mkdtemp(prefix=f"cupy_cache_{fe}_"),
        }
        seed = _run([sys.executable, "-c", SEED], env, 60)
        rec["profile"] = (seed["stdout"].strip().splitlines() or [seed["stderr"][-300:]])[-1]
        run = _run([sys.executable, "-c", timed], env, a.limit_each)
        rec.update(parse_run(run["stdout"], run["stderr"]))
        rec["rc"], rec["process_wall_s"] = run["rc"], run["wall_s"]
        if run["rc"] != 0 or "first_call_s" not in rec:
            rec["error"] = f"rc={run['rc']}"
            rec["stderr_tail"] = run["stderr"][-3000:]
        else:
            first_call_s[fe] = rec["first_call_s"]
            rec["target_s"] = TARGET_S[fe]
            rec["stderr_tail"] = run["stderr"][-1200:]
        print(
            f"{fe}: first call {rec.get('first_call_s', float('nan')):.2f} s (build "
            f"{rec.get('build_s', float('nan')):.1f} s, process {run['wall_s']:.1f} s, "
            f"rc={run['rc']}; {rec['profile']})",
            flush=True,
        )
        save()
    print(json.dumps(first_call_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
