"""On the GPU machine: does the recorded CPU-side ISA match what the device compiles and runs?

Usage (device, repo root): PYTHONPATH=src python3 scripts/device_isa_check.py OUTDIR

For every suite kernel, independently (a failure is recorded, never fatal):
1. `klaraptor.isa.compile` with the device's NVRTC (cuda.bindings), disassembled with the device's
   cuobjdump: opcode sequence and registers against the recorded file
   (src/klaraptor/data/isa_sm90.json.gz, made on a CPU with the pip NVRTC).
2. CuPy, exactly as the collector compiles (`CupyBackend.compile`): `num_regs`,
   `shared_size_bytes`, `local_size_bytes`; the NVRTC options CuPy really passed (captured by
   wrapping `cupy_backends.cuda.libs.nvrtc.compileProgram`); and the cubin CuPy loaded (read
   from its kernel cache in OUTDIR/cupy_cache), disassembled: the SASS that actually runs.
Writes OUTDIR/isa_check.json (and the device SASS text of kernels whose sequence differs).
No network. Stops starting new kernels after 100 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "isa_check_out")
OUT.mkdir(parents=True, exist_ok=True)
CACHE = OUT / "cupy_cache"
CACHE.mkdir(exist_ok=True)
os.environ["CUPY_CACHE_DIR"] = str(CACHE)  # before CuPy is imported: its cubins land here
os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
DEADLINE = time.time() + 100.0
report: dict = {"env": {}, "kernels": {}, "summary": {}}


def save() -> None:
    (OUT / "isa_check.json").write_text(json.dumps(report, indent=1, default=str))


def err() -> str:
    return traceback.format_exc()[-2500:]


def opcode_seq(instructions) -> list[str]:
    return [ins.full_opcode for ins in instructions]


def compare(seq: list[str], ref: list[str], texts: list[str], ref_texts: list[str]) -> dict:
    first = next((i for i, (a, b) in enumerate(zip(seq, ref)) if a != b), None)
    if first is None and len(seq) != len(ref):
        first = min(len(seq), len(ref))
    return {
        "n": len(seq),
        "n_recorded": len(ref),
        "hash": hashlib.sha256("\n".join(seq).encode()).hexdigest()[:16],
        "hash_recorded": hashlib.sha256("\n".join(ref).encode()).hexdigest()[:16],
        "same_opcodes": first is None,
        "same_text": texts == ref_texts,
        "first_difference": None
        if first is None
        else {
            "index": first,
            "device": texts[first] if first < len(texts) else None,
            "recorded": ref_texts[first] if first < len(ref_texts) else None,
        },
    }


# ---------------------------------------------------------------------------------------------
t_start = time.time()
try:
    from klaraptor import suite
    from klaraptor.isa import analysis, sass, tools
    from klaraptor.isa import compile as isa_compile

    specs = suite.all_specs()
    recorded = analysis.load_recorded_raw()
    report["env"]["recorded_provenance"] = recorded.get("provenance")
except Exception:  # noqa: BLE001 - without these nothing else can run
    report["env"]["import_error"] = err()
    save()
    raise SystemExit(1) from None

for key, fn in {
    "python": lambda: sys.version,
    "nvrtc_cuda_bindings": isa_compile.nvrtc_version,
    "cuda_bindings": lambda: __import__("cuda.bindings", fromlist=["x"]).__version__,
    "tools": tools.versions,
    "tool_paths": lambda: {t: str(tools.find_tool(t)) for t in tools.TOOLS},
    "cupy": lambda: __import__("cupy").__version__,
    "cupy_nvrtc": lambda: list(__import__("cupy").cuda.nvrtc.getVersion()),
    "driver": lambda: __import__("cupy").cuda.runtime.driverGetVersion(),
}.items():
    try:
        report["env"][key] = fn()
    except Exception:  # noqa: BLE001
        report["env"][key] = {"error": err()}
save()

# Capture the options CuPy hands NVRTC.
captured: list[list[str]] = []
try:
    from cupy_backends.cuda.libs import nvrtc as cupy_nvrtc

    _orig_compile = cupy_nvrtc.compileProgram

    def _capture(prog, options):  # noqa: ANN001 - same signature as CuPy's
        captured.append([o.decode() if isinstance(o, bytes) else str(o) for o in options])
        return _orig_compile(prog, options)

    cupy_nvrtc.compileProgram = _capture
    report["env"]["capture_options"] = "ok"
except Exception:  # noqa: BLE001
    report["env"]["capture_options"] = {"error": err()}

cubin_of_source: dict[tuple[str, tuple[str, ...]], Path] = {}
n_same_isa = n_same_cupy = n_regs = n_done = 0
for spec in specs:
    if time.time() > DEADLINE:
        report["kernels"][spec.name] = {"skipped": "deadline (100 s) reached"}
        continue
    t0 = time.time()
    entry: dict = {}
    rec = recorded["kernels"].get(spec.name)
    ref_texts = [t for _, t, _ in rec["sass"]] if rec else []
    ref_seq = (
        [
            sass.parse_instruction(a, t, sass.Control.from_code(c)).full_opcode
            for a, t, c in rec["sass"]
        ]
        if rec
        else []
    )
    entry["recorded_registers"] = rec["resources"]["registers"] if rec else None

    # 1. klaraptor.isa on the device
    try:
        res = isa_compile.compile_spec(spec, ptx=False)
        text = tools.run_cuobjdump(res.cubin, ["-sass"])
        usage = sass.parse_res_usage(tools.run_cuobjdump(res.cubin, ["-res-usage"]))
        fn = sass.parse_sass(text)[spec.kernel]
        cmp_ = compare(
            opcode_seq(fn.instructions), ref_seq, [i.text for i in fn.instructions], ref_texts
        )
        entry["isa_compile"] = {
            "nvrtc": res.nvrtc_version,
            "options": list(res.options),
            "registers": usage.get(spec.kernel, {}).get("REG"),
            "shared": usage.get(spec.kernel, {}).get("SHARED"),
            **cmp_,
        }
        n_same_isa += cmp_["same_opcodes"]
        if not cmp_["same_opcodes"]:
            (OUT / f"{spec.name}.isa.sass").write_text(text)
    except Exception:  # noqa: BLE001
        entry["isa_compile"] = {"error": err()}

    # 2. CuPy as the collector compiles it
    try:
        from klaraptor.backends.cupy_backend import CupyBackend

        backend_cupy = CupyBackend()

        before = set(CACHE.iterdir())
        n_cap = len(captured)
        fn_cupy = backend_cupy.compile(spec.source, spec.kernel, spec.options)
        attrs = backend_cupy.attributes(fn_cupy)
        new = sorted(set(CACHE.iterdir()) - before, key=lambda p: p.stat().st_mtime)
        key = (spec.source, tuple(spec.options))
        if new:
            cubin_of_source[key] = new[-1]
        elif key not in cubin_of_source:
            # Cached by an earlier run: the newest cache file whose ELF defines the kernel.
            mark = b".text." + spec.kernel.encode() + b"\x00"
            hits = [p for p in CACHE.iterdir() if p.is_file() and mark in p.read_bytes()]
            if hits:
                cubin_of_source[key] = max(hits, key=lambda p: p.stat().st_mtime)
        c = {
            "num_regs": attrs.num_regs,
            "shared_size_bytes": attrs.static_smem,
            "local_size_bytes": attrs.local_size,
            "const_size_bytes": attrs.const_size,
            "nvrtc_options": captured[n_cap:] or "module compiled earlier (same source)",
        }
        path = cubin_of_source.get(key)
        if path is not None:
            blob = path.read_bytes()
            cubin = blob[blob.find(b"\x7fELF") :] if b"\x7fELF" in blob else b""
            c["cache_file"] = path.name
            if cubin:
                text = tools.run_cuobjdump(cubin, ["-sass"])
                fn = sass.parse_sass(text)[spec.kernel]
                cmp_ = compare(
                    opcode_seq(fn.instructions),
                    ref_seq,
                    [i.text for i in fn.instructions],
                    ref_texts,
                )
                c.update(cmp_)
                n_same_cupy += cmp_["same_opcodes"]
                if not cmp_["same_opcodes"]:
                    (OUT / f"{spec.name}.cupy.sass").write_text(text)
            else:
                c["cubin"] = "no ELF image in the cache file"
        else:
            c["cubin"] = "no CuPy cache file found"
        entry["cupy"] = c
        n_regs += c["num_regs"] == entry["recorded_registers"]
    except Exception:  # noqa: BLE001
        entry["cupy"] = {"error": err()}
    entry["seconds"] = round(time.time() - t0, 2)
    n_done += 1
    report["kernels"][spec.name] = entry
    save()
    print(f"{spec.name:30s} {entry['seconds']:5.1f}s", flush=True)

report["summary"] = {
    "kernels": len(specs),
    "checked": n_done,
    "isa_compile_same_opcodes_as_recorded": n_same_isa,
    "cupy_cubin_same_opcodes_as_recorded": n_same_cupy,
    "cupy_num_regs_equal_recorded": n_regs,
    "seconds": round(time.time() - t_start, 1),
}
save()
print(json.dumps(report["summary"]))
