"""Measure SAAKE's latency and gap per resource on this GPU (klaraptor.collect.resources).

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> python3 scripts/device_resources.py OUTDIR [--repeats 3] [--budget 170]

Writes to OUTDIR:
    env.json              GPU, driver, clocks (nvidia-smi), versions, the device query
    sass/<kernel>.txt     the SASS of every benchmark kernel as NVRTC compiles it here (both unrolls)
    raw_repeat<i>.json    raw cycle counts and timings of repeat i (each a fresh process)
    resources.json        per field: value (median), spread, samples, method, check vs public figures
    resources_table.txt   the same as a table
    h200_profile.json     the committed profile (klaraptor/data/h200_profile.json) + the new fields,
                          provenance under "resources" (GPU, driver, date, command, commit)
    log.txt               what ran, how long, what failed
Every step is independent and time-limited; failures are recorded, not fatal. No network.
Expected wall time: 30-60 s (three child processes: CUDA start-up, NVRTC, < 1 s of GPU work each).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p
)

from klaraptor.collect import resources as rs  # noqa: E402
from klaraptor.core.provenance import commit  # noqa: E402
from klaraptor.device.profile import DeviceProfile, query_device, recorded_profile  # noqa: E402
from klaraptor.device.resources import BENCHMARKS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=170.0, help="total seconds (default 170)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated resources to measure (default all); the profile keeps the others",
    )
    ap.add_argument(
        "--fields",
        default="",
        help="comma-separated profile fields to take from this run (default: every field of "
        "the resources measured); the profile keeps the others as they were",
    )
    a = ap.parse_args()
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    deadline = t_start + a.budget
    log_lines: list[str] = []

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_lines.append(line)
        (out / "log.txt").write_text("\n".join(log_lines) + "\n")

    def step(name: str, fn, *args):  # noqa: ANN001, ANN202 - a script
        t0 = time.monotonic()
        try:
            result = fn(*args)
            log(f"{name}: ok ({time.monotonic() - t0:.1f} s)")
            return result
        except Exception:  # noqa: BLE001 - record and go on
            log(f"{name}: FAILED ({time.monotonic() - t0:.1f} s)\n{traceback.format_exc()[-3000:]}")
            return None

    config = rs.ResourceConfig.quick() if a.quick else rs.ResourceConfig()
    names = tuple(n for n in a.only.split(",") if n) or BENCHMARKS
    every = {f for n in names for f in (f"lat_{n}_cycles", f"gap_{n}_cycles", *rs.extra_fields(n))}
    wanted = {f for f in a.fields.split(",") if f}
    if wanted - every:
        log(f"--fields {sorted(wanted - every)} are not measured by {list(names)}: stopping")
        return 2
    command = " ".join([Path(sys.executable).name, *sys.argv])
    env = step("environment", _environment, out)
    queried = step("device query", query_device, 0)
    base = step("recorded profile", recorded_profile, "h200")
    profile = base or queried
    if profile is None:
        log("no profile (neither the committed one nor a device query): stopping")
        return 1
    if queried is not None and base is not None and queried.key != base.key:
        log(f"note: this GPU is {queried.key!r}, the committed profile is {base.key!r}")
    step("SASS", _dump_sass, out / "sass", config, (queried or profile).arch)

    raws = []
    for i in range(a.repeats):
        left = deadline - time.monotonic() - 10  # 10 s kept for analysis and writing
        if left < 20:
            log(f"repeat {i}: skipped, {left:.0f} s left")
            break
        t0 = time.monotonic()
        raw = step(
            f"repeat {i}",
            lambda: rs.collect_raw(names, config, bench_timeout_s=30.0, deadline=deadline - 10),
        )
        if raw is None:
            continue
        raws.append(raw)
        (out / f"raw_repeat{i}.json").write_text(json.dumps(raw, indent=1, default=str))
        failed = {k: v["error"].splitlines()[-1][:200] for k, v in raw.items() if "error" in v}
        log(f"repeat {i}: {time.monotonic() - t0:.1f} s; failed: {failed or 'none'}")
    if not raws:
        log("no repeat ran")
        return 1

    m = rs.analyse_repeats(raws, profile, config)
    run = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "commit": commit(),
        "gpu": queried.name if queried else None,
        "driver": queried.driver if queried else None,
        "sm_clock_mhz": profile.sm_clock_mhz,
        "host": platform.node(),
        "repeats": len(raws),
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(config).items()},
        "source": "klaraptor/cuda/resources.cu (klaraptor.collect.resources)",
        "definitions": "klaraptor.collect.resources module docstring",
        "smi": (env or {}).get("smi"),
    }
    table = m.table()
    print(table)
    (out / "resources_table.txt").write_text(table + "\n")
    (out / "resources.json").write_text(
        json.dumps(
            {
                "run": run,
                "estimates": {
                    k: {"value": e.value, "spread": e.spread, "samples": list(e.samples)}
                    for k, e in m.estimates.items()
                },
                "provenance": m.provenance,
            },
            indent=1,
            default=str,
        )
    )
    if base is not None:
        fields = wanted or every
        prov = {k: v for k, v in m.provenance.items() if k in fields}
        values = {k: v for k, v in m.values.items() if k in fields}
        # A partial run keeps the earlier run's provenance and adds its own beside it.
        run_key = "resources" if set(names) == set(BENCHMARKS) else f"resources_{'_'.join(names)}"
        run_key += "".join(f"_{f}" for f in sorted(wanted))
        updated = base.with_microbench(provenance={**prov, run_key: run}, **values)
        data = updated.to_dict()
        DeviceProfile.from_dict(data)  # it must read back
        (out / "h200_profile.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        log(f"h200_profile.json written; still missing: {updated.missing_microbench or 'none'}")
    measured = every
    off = [
        f
        for f, p in m.provenance.items()
        if f in measured and isinstance(p, dict) and p.get("check", "ok") != "ok"
    ]
    log(f"flagged against public figures: {off or 'none'}")
    log(f"total {time.monotonic() - t_start:.1f} s")
    return 0


def _environment(out: Path) -> dict:
    def sh(cmd: str) -> str:
        try:
            p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30)
            return (p.stdout + p.stderr).strip()[-3000:]
        except subprocess.TimeoutExpired:
            return "timed out"

    env = {
        "smi": sh(
            "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
            "temperature.gpu,power.draw --format=csv"
        ),
        "python": sys.version,
        "packages": sh(f"{sys.executable} -m pip list 2>/dev/null | grep -i -E 'cupy|cuda|numpy'"),
        "commit": commit(),
    }
    (out / "env.json").write_text(json.dumps(env, indent=1))
    return env


def _dump_sass(folder: Path, config: rs.ResourceConfig, arch: str) -> None:
    from klaraptor.isa.analysis import disassemble
    from klaraptor.isa.compile import compile_source

    folder.mkdir(parents=True, exist_ok=True)
    for u in config.unrolls:
        cubin = compile_source(rs.source(), [*rs.OPTIONS, f"-DKP_U={u}"], arch, ptx=False).cubin
        for kernel, fn in disassemble(cubin).items():
            text = "\n".join(i.text for i in fn.instructions)
            (folder / f"{kernel}.U{u}.txt").write_text(text + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
