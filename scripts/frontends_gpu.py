"""On a GPU (issue 13): the front-ends' GPU tests, their launch-cost benchmark and the README's
front-end examples, as written.

    python scripts/frontends_gpu.py OUT [--budget-s 570] [--only tests bench readme]
        [--bench-steps cupy numba cuda_core torch_cupy torch_numba]

Steps, in this order, each in its own process with a time limit (a failed or timed-out step is
recorded in OUT/results.json and the next one runs; a step that no longer fits the budget is
recorded as skipped):
- `versions`: GPU, driver, NumPy, CuPy, numba-cuda, torch, cuda.core, and whether the NumPy shim
  below is in effect (`numpy_row_stack_alias`);
- `tests`: `pytest -v` over the front-ends' GPU tests and the Numba tests (tests/frontends/
  test_frontends_gpu.py, test_numba.py, test_numba_device_env.py: on a GPU machine the Numba
  tests run the real Numba, not its simulator), the log in OUT/gpu_tests_<commit>.log (to commit
  as benchmarks/results/h200/collect_logs/);
- `bench`: `benchmarks/bench_frontends.py OUT/bench` (tuned vs plain launch per front-end;
  `--bench-steps` picks the front-ends);
- `readme_<front-end>`: each Python example of the README's front-ends section, run as written
  with `python -c` in a fresh KLARAPTOR_HOME (OUT/home_readme). When this GPU's device key is the
  recorded H200 profile's, that profile is put in the store first, so the examples skip the
  device microbenchmarks (results.json says whether it was).

Every step runs with scripts/device_env first on PYTHONPATH: a shim for a NumPy without
`numpy.row_stack`, which numba-cuda 0.30.4 cannot compile with (the H200 machine's); it changes
nothing where NumPy has `row_stack` (docs/frontends.md).

About 8-10 minutes in all on an H200; nothing here needs more than one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMPY_SHIM = ROOT / "scripts" / "device_env"  # sitecustomize.py: numpy.row_stack for numba-cuda
TEST_FILES = (
    "tests/frontends/test_frontends_gpu.py",
    "tests/frontends/test_numba.py",
    "tests/frontends/test_numba_device_env.py",
)
BENCH_STEPS = ("cupy", "numba", "cuda_core", "torch_cupy", "torch_numba")
SECTION = "Front-ends: Numba, CuPy, cuda.core, PyTorch, Kernel Tuner"
# Step limits (s); each is also cut to what is left of the budget.
LIMITS = {"versions": 60, "tests": 330, "bench": 300, "readme": 200}

VERSIONS = """
import json, platform
from importlib.metadata import version, PackageNotFoundError
def v(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None
out = {"python": platform.python_version(), "host": platform.node()}
for name in ("numpy", "cupy-cuda13x", "numba-cuda", "numba", "torch", "cuda-core",
             "cuda-bindings", "kernel_tuner"):
    out[name] = v(name)
try:
    import numpy, sitecustomize
    out["numpy_row_stack_alias"] = getattr(numpy, "row_stack", None) is numpy.vstack
    out["sitecustomize"] = getattr(sitecustomize, "__file__", None)
except Exception as exc:
    out["numpy_shim_error"] = repr(exc)
try:
    from klaraptor.device.profile import query_device, recorded_profile
    here, rec = query_device(), recorded_profile("h200")
    out.update(gpu=here.name, driver=here.driver, key=here.key, recorded_key=rec.key,
               same_key=here.key == rec.key)
except Exception as exc:
    out["device_error"] = repr(exc)
print(json.dumps(out))
"""

SEED = """
from klaraptor.device.profile import query_device, recorded_profile
from klaraptor.store import Store
here, rec = query_device(), recorded_profile("h200")
if here.key == rec.key:
    Store().save_profile(rec)
print("seeded" if here.key == rec.key else f"not seeded: this GPU is {here.key!r}")
"""


def commit() -> str:
    if os.environ.get("KLARAPTOR_COMMIT"):  # the device's copy of .git can be stale
        return os.environ["KLARAPTOR_COMMIT"][:7]
    try:
        p = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
        return p.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def readme_examples() -> dict[str, str]:
    """The front-ends section's Python examples by front-end (the first import names it)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(SECTION)}\n(.*?)(?=^## )", text, re.S | re.M)
    if m is None:
        return {}
    out: dict[str, str] = {}
    for tag, body in re.findall(r"^```(\w*)\n(.*?)^```$", m.group(1), re.S | re.M):
        if tag != "python":
            continue
        name = (
            "triton"
            if "klaraptor.triton" in body
            else "numba"
            if "from numba import cuda" in body
            else "cuda_core"
            if "compile_kernel" in body
            else "torch"
            if "import torch" in body
            else "cupy"
        )
        out[name] = body
    # CuPy first: the torch example's kernel is the same (its build is then loaded, not made).
    order = ("cupy", "torch", "cuda_core", "numba", "triton")
    return {k: out[k] for k in order if k in out}


def run(
    name: str, argv: list[str], env: dict[str, str], limit: float, log: Path | None = None
) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=limit, cwd=ROOT)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
    except Exception as e:  # noqa: BLE001 - recorded; the next step runs
        rc, stdout, stderr = "error", "", repr(e)
    wall = round(time.monotonic() - t0, 1)
    stdout, stderr = stdout or "", stderr or ""
    if log is not None:
        log.write_text(f"$ {' '.join(argv)}\n# rc={rc} wall_s={wall}\n{stdout}\n{stderr}")
    print(f"{name}: rc={rc} in {wall} s (limit {limit:.0f} s)", flush=True)
    return {"rc": rc, "wall_s": wall, "stdout": stdout[-6000:], "stderr": stderr[-6000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--budget-s", type=float, default=570.0)
    p.add_argument("--only", nargs="+", choices=("tests", "bench", "readme"))
    p.add_argument("--bench-steps", nargs="+", choices=BENCH_STEPS, default=list(BENCH_STEPS))
    a = p.parse_args(argv)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(a.only or ("tests", "bench", "readme"))
    t_start = time.monotonic()
    py = sys.executable
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(NUMPY_SHIM), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
    }
    sha = commit()
    results: dict[str, dict] = {"commit": {"sha": sha}}

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")

    def step(name: str, kind: str, argv: list[str], env: dict[str, str], log: Path | None = None):
        left = a.budget_s - (time.monotonic() - t_start)
        if left < 20:
            results[name] = {"rc": "skipped", "why": f"budget of {a.budget_s:.0f} s spent"}
            print(f"{name}: skipped (budget spent)", flush=True)
        else:
            results[name] = run(name, argv, env, min(LIMITS[kind], left), log)
        save()
        return results[name]

    env = {**base_env, "KLARAPTOR_HOME": str(out / "home_versions")}
    row = step("versions", "versions", [py, "-c", VERSIONS], env)
    try:
        results["versions"]["facts"] = json.loads(row.get("stdout", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    save()

    if "tests" in wanted:
        env = {**base_env, "KLARAPTOR_HOME": str(out / "home_tests")}
        argv = [py, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-s", "-rs", *TEST_FILES]
        step("tests", "tests", argv, env, out / f"gpu_tests_{sha}.log")

    if "bench" in wanted:
        argv = [py, str(ROOT / "benchmarks" / "bench_frontends.py"), str(out / "bench")]
        argv += ["--step-timeout", "90", "--steps", *a.bench_steps]
        step("bench", "bench", argv, base_env, out / "bench.log")

    if "readme" in wanted:
        env = {**base_env, "KLARAPTOR_HOME": str(out / "home_readme")}
        seeded = run("readme_seed", [py, "-c", SEED], env, 60)
        results["readme_seed"] = seeded
        for name, code in readme_examples().items():
            step(f"readme_{name}", "readme", [py, "-c", code], env, out / f"readme_{name}.log")
    results["total_s"] = {"wall_s": round(time.monotonic() - t_start, 1)}
    save()
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
