"""Real Kernel Tuner files from the H200, for tests/data/kernel_tuner/ (issue 13, item 5).

Usage (on the device, repo root, with Kernel Tuner's wheels installed; see the report):
    python3 scripts/device_kernel_tuner.py OUTDIR

Runs Kernel Tuner 1.x (lang="cupy", default block_size_names, brute force, 7 iterations; if the
CuPy backend fails on the first run, its cuda-python backend "nvcuda" for all runs) on
(a) the README's 1D `scale` kernel over block_size_x = 32, 64, ..., 1024 at four sizes n, and
(b) PolyBench 2DCONV (`klaraptor.suite.polybench.SRC_2DCONV`) over power-of-two block_size_x,
    block_size_y with 32 <= bx*by <= 1024 at three sizes N, with RegisterObserver (num_regs),
and writes, per run, Kernel Tuner's cache (tune_kernel(cache=...)) and its T4 results file
(file_utils.store_output_file); once, the T4 metadata file (store_metadata_file) and the dumped
(results, env) pair of the first scale run; and a cache of a 2DCONV run killed part-way (an
unterminated cache, as an interrupted tuning session leaves it). Each run is a child process
with its own time limit; a failure is recorded in PROVENANCE.json, never fatal. Everything is
packed into OUTDIR/kernel_tuner_h200.tgz (the device returns at most 8 files). Total under
2 minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCALE_SRC = r"""extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}"""
SCALE_SIZES = [1 << 20, 1 << 22, 1 << 24, 1 << 26]
CONV_SIZES = [512, 1024, 2048]
INTERRUPTED_N = 4096
INTERRUPT_AFTER = 8  # records in the cache before the run is killed
DEADLINE_S = 110.0
OPTIONS = ["--std=c++17"]  # the klaraptor specs' NVRTC options


def _np_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o).__name__)


def run_step(kind: str, size: int, out: Path, lang: str) -> None:
    """One tuning run (in a child process)."""
    import numpy as np
    from kernel_tuner import tune_kernel
    from kernel_tuner.file_utils import store_output_file

    if kind == "scale":
        n = size
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        args = [x, np.zeros_like(x), np.int32(n)]
        params = {"block_size_x": list(range(32, 1025, 32))}
        stem = f"scale_n{n}"
        results, env = tune_kernel(
            "scale", SCALE_SRC, n, args, params, lang=lang, cache=str(out / f"{stem}.cache.json"),
            compiler_options=OPTIONS, quiet=True,
        )  # fmt: skip
        if n == SCALE_SIZES[0]:
            with open(out / f"{stem}.results_env.json", "w") as fh:
                json.dump([results, env], fh, default=_np_default)
    else:
        sys.path.insert(0, str(ROOT / "src"))
        from kernel_tuner.observers.register import RegisterObserver

        from klaraptor.suite.polybench import SRC_2DCONV

        n = size
        rng = np.random.default_rng(0)
        a = rng.random((n, n), dtype=np.float32)
        args = [a, np.zeros_like(a), np.int32(n)]
        pow2 = [2**i for i in range(11)]
        params = {"block_size_x": pow2, "block_size_y": pow2}
        restrict = ["block_size_x * block_size_y >= 32", "block_size_x * block_size_y <= 1024"]
        stem = "conv2d_interrupted" if kind == "conv2d_interrupted" else f"conv2d_N{n}"
        results, env = tune_kernel(
            "conv2d", SRC_2DCONV, (n, n), args, params, lang=lang, restrictions=restrict,
            cache=str(out / f"{stem}.cache.json"), compiler_options=OPTIONS,
            observers=[RegisterObserver()], quiet=True,
        )  # fmt: skip
    store_output_file(str(out / f"{stem}-results.json"), results, params)
    ok = sum("__error__" not in r for r in results)
    print(json.dumps({"configs": len(results), "ok": ok, "device": env.get("device_name")}))


def _records(cache: Path) -> int:
    try:
        text = cache.read_text()
    except OSError:
        return 0
    i = text.find('"cache": {')
    return 0 if i < 0 else text[i:].count('\n"')


def main(outdir: Path) -> None:
    out = outdir / "kernel_tuner"
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    prov: dict = {
        "what": "Kernel Tuner files from real runs (scripts/device_kernel_tuner.py)",
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": os.environ.get("KLARAPTOR_COMMIT", ""),
        "steps": {},
    }
    try:
        import cupy
        import kernel_tuner
        import numpy

        prov["versions"] = {
            "kernel_tuner": getattr(kernel_tuner, "__version__", "?"),
            "cupy": cupy.__version__,
            "numpy": numpy.__version__,
            "python": sys.version.split()[0],
        }
        from importlib.metadata import version

        prov["versions"]["kernel_tuner_dist"] = version("kernel_tuner")
    except Exception:  # noqa: BLE001 - recorded; the steps below will fail and say why
        prov["versions"] = {"error": traceback.format_exc()[-2000:]}
    smi = subprocess.run(
        "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv",
        shell=True, capture_output=True, text=True,
    )  # fmt: skip
    prov["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()

    def save() -> None:
        (out / "PROVENANCE.json").write_text(json.dumps(prov, indent=1))

    steps = [("scale", n, 40) for n in SCALE_SIZES] + [("conv2d", n, 60) for n in CONV_SIZES]
    lang, any_ok = "cupy", False
    prov["lang"] = lang
    for kind, size, limit in steps:
        name = f"{kind}:{size}"
        for attempt in ("cupy", "nvcuda"):
            left = DEADLINE_S - (time.time() - t_start)
            if left < 8:
                prov["steps"][name] = {"status": "skipped: deadline"}
                break
            t0 = time.time()
            cmd = [sys.executable, __file__, "--step", kind, str(size), str(out), lang]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(limit, left))
                status = "ok" if p.returncode == 0 else f"rc={p.returncode}"
                prov["steps"][name] = {
                    "status": status,
                    "lang": lang,
                    "stdout": p.stdout[-1500:],
                    "stderr": p.stderr[-3000:],
                }
            except subprocess.TimeoutExpired:
                prov["steps"][name] = {"status": f"timeout after {min(limit, left):.0f} s"}
            prov["steps"][name]["wall_s"] = round(time.time() - t0, 2)
            print(
                name,
                lang,
                prov["steps"][name]["status"],
                prov["steps"][name]["wall_s"],
                "s",
                flush=True,
            )
            save()
            any_ok = any_ok or prov["steps"][name]["status"] == "ok"
            # If Kernel Tuner's CuPy backend fails from the start, use its cuda-python backend.
            if any_ok or lang != attempt or attempt == "nvcuda":
                break
            prov["steps"][f"{name} (cupy, failed)"] = prov["steps"].pop(name)
            for stale in out.glob(f"*{size}*"):
                stale.unlink()
            lang = prov["lang"] = "nvcuda"

    # A run killed part-way: its cache stays unterminated (maybe cut inside a record).
    name, t0 = f"conv2d_interrupted:{INTERRUPTED_N}", time.time()
    cache = out / "conv2d_interrupted.cache.json"
    cmd = [sys.executable, __file__, "--step", "conv2d_interrupted", str(INTERRUPTED_N), str(out)]
    cmd.append(lang)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    limit = max(5.0, min(30.0, DEADLINE_S + 5 - (time.time() - t_start)))
    while p.poll() is None and _records(cache) < INTERRUPT_AFTER and time.time() - t0 < limit:
        time.sleep(0.02)
    killed = p.poll() is None
    if killed:
        p.send_signal(signal.SIGKILL)
    _, err = p.communicate()
    for stray in out.glob("conv2d_interrupted-results.json"):  # only if it finished anyway
        stray.unlink()
    prov["steps"][name] = {
        "status": "killed" if killed else f"finished before the kill (rc={p.returncode})",
        "records_at_kill": _records(cache),
        "stderr": err[-2000:],
        "wall_s": round(time.time() - t0, 2),
    }
    print(name, prov["steps"][name]["status"], flush=True)

    t0 = time.time()
    try:
        from kernel_tuner.file_utils import store_metadata_file

        store_metadata_file(str(out / "h200-metadata.json"))
        prov["steps"]["metadata"] = {"status": "ok"}
    except Exception:  # noqa: BLE001 - recorded, not fatal
        prov["steps"]["metadata"] = {"status": "error", "error": traceback.format_exc()[-2000:]}
    prov["steps"]["metadata"]["wall_s"] = round(time.time() - t0, 2)
    prov["total_wall_s"] = round(time.time() - t_start, 2)
    prov["files"] = {f.name: f.stat().st_size for f in sorted(out.iterdir())}
    save()
    with tarfile.open(outdir / "kernel_tuner_h200.tgz", "w:gz") as tar:
        tar.add(out, arcname="kernel_tuner")
    for f in out.iterdir():
        f.unlink()
    out.rmdir()
    print(json.dumps({k: v["status"] for k, v in prov["steps"].items()}, indent=1))
    print(f"total {prov['total_wall_s']} s → {outdir / 'kernel_tuner_h200.tgz'}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--step":
        run_step(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 2:
        main(Path(sys.argv[1]))
    else:
        sys.exit(__doc__)
