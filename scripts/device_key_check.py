"""On the H200 (issue 15): does the new device key of this GPU equal the recorded profile's, and do
the recorded builds, the README's Python section and SIGTERM history work on a real GPU?

    PYTHONPATH=src python scripts/device_key_check.py OUT

Each step runs in its own process with a time limit; a failure is recorded in OUT/results.json
and the next step runs. About 3 minutes; nothing here needs more than one GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KEY = """
import json
from klaraptor.device.profile import query_device, recorded_profile
here, rec = query_device(), recorded_profile("h200")
print(json.dumps({"here_key": here.key, "recorded_key": rec.key, "same": here.key == rec.key,
                  "total_mem_bytes": here.total_mem_bytes, "recorded_total_mem_bytes": rec.total_mem_bytes,
                  "driver": here.driver, "recorded_driver": rec.driver,
                  "sm_clock_mhz": here.sm_clock_mhz, "mem_clock_mhz": here.mem_clock_mhz,
                  "sm_count": here.sm_count}))
"""

SIGTERM = """
import os, signal, sys, time
import klaraptor
k = klaraptor.load("polybench.atax.k1")
for n in (6001, 6002, 6003):
    k.select(n)
print("ready", flush=True)
time.sleep(60)
"""


def step(out: Path, name: str, argv: list[str], env: dict[str, str], limit: float) -> dict:
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=limit, cwd=out)
        row = {"rc": p.returncode, "stdout": p.stdout[-6000:], "stderr": p.stderr[-6000:]}
    except subprocess.TimeoutExpired as e:
        row = {"rc": "timeout", "stdout": str(e.stdout)[-3000:], "stderr": str(e.stderr)[-3000:]}
    except Exception as e:  # noqa: BLE001 - recorded, the next step runs
        row = {"rc": "error", "error": repr(e)}
    row["wall_s"] = round(time.monotonic() - t0, 1)
    print(f"{name}: rc={row['rc']} in {row['wall_s']} s", flush=True)
    return row


def sigterm_step(out: Path, env: dict[str, str]) -> dict:
    script = out / "sigterm_victim.py"
    script.write_text(SIGTERM)
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
        )
        ready = p.stdout.readline().strip() if p.stdout else ""
        p.terminate()
        rc = p.wait(timeout=60)
        check = subprocess.run(
            [sys.executable, "-c",
             "from klaraptor.store import Store\n"
             "s = Store(must_exist=True)\n"
             "d = s.builds('polybench.atax.k1')[0].device\n"
             "print(sorted(r.D['N'] for r in s.history('polybench.atax.k1', d)))"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        return {"ready": ready, "rc": rc, "history": check.stdout.strip(), "stderr": check.stderr[-2000:],
                "wall_s": round(time.monotonic() - t0, 1)}  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return {"rc": "error", "error": repr(e)}


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "KLARAPTOR_HOME": str(out / "home"),
    }
    py, cli = sys.executable, [sys.executable, "-m", "klaraptor.cli"]
    results: dict[str, dict] = {}
    results["key"] = step(out, "key", [py, "-c", KEY], env, 60)
    results["import"] = step(
        out, "import", [*cli, "import-recorded", "--kernels", "polybench.atax.k1", "polybench.gemm.gemm"],
        env, 180,
    )  # fmt: skip
    # On the GPU, load() defaults to this GPU: the recorded build must be accepted, not refused.
    results["select"] = step(
        out, "select", [*cli, "select", "polybench.atax.k1", "N=4096"], env, 60
    )
    results["sigterm"] = sigterm_step(out, env)
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^## Use it from Python\n.*?^```python\n(.*?)^```", readme, re.S | re.M)
    if m is not None:  # builds my.scale on the GPU: make_args from a `python -c` script
        results["readme_python"] = step(out, "readme_python", [py, "-c", m.group(1)], env, 300)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
