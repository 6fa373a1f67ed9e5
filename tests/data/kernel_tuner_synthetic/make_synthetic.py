"""SYNTHETIC Kernel Tuner files for the parser unit tests (tests/test_kernel_tuner.py).

Nothing here was measured: the times are made up. Only the *formats* are real: the cache is
written by hand in the layout Kernel Tuner's cache writer uses, and every other file is written by
Kernel Tuner itself, run in simulation mode on that cache (tune_kernel(simulation_mode=True),
file_utils.store_output_file / store_metadata_file). The real H200 files live in
tests/data/kernel_tuner/ (scripts/device_kernel_tuner.py).

Regenerate (needs `pip install kernel_tuner`; this machine had 1.5.0):
    cd tests/data/kernel_tuner_synthetic && python make_synthetic.py
"""

import json

import numpy as np
from kernel_tuner import tune_kernel
from kernel_tuner.file_utils import store_metadata_file, store_output_file

N = 1 << 20
STAMP = "2026-11-30 10:00:00.000000+00:00"
rng = np.random.default_rng(0)
blocks = list(range(32, 1025, 32))
tune_params = {"block_size_x": blocks}
cache = {
    "device_name": "NVIDIA H200",
    "kernel_name": "scale",
    "problem_size": N,
    "tune_params_keys": ["block_size_x"],
    "tune_params": tune_params,
    "objective": ["time"],
    "cache": {},
}
for b in blocks:
    rec = {"block_size_x": b, "compile_time": 80.0, "verification_time": 0, "timestamp": STAMP}
    if b == 1024:  # one failed launch, written as Kernel Tuner >= 1.0 does
        rec.update({"__error__": "RuntimeFailedConfig", "benchmark_time": 0})
    else:
        t = 0.01 + 0.00002 * b + 0.00001 * (b % 128 != 0)
        times = [round(float(x), 6) for x in t * (1 + 0.02 * rng.standard_normal(7))]
        rec.update({"time": float(np.mean(times)), "times": times, "benchmark_time": 1.5})
    cache["cache"][str(b)] = rec

# The cache as Kernel Tuner writes it: a header, then one record per line, then the closing.
head = json.dumps({k: v for k, v in cache.items() if k != "cache"} | {"cache": {}}, indent="")
lines = [head[:-3]] + ["\n" + json.dumps({k: v})[1:-1] + "," for k, v in cache["cache"].items()]
closed = "".join(lines)[:-1] + "}\n}"
with open("scale_cache.json", "w") as fh:
    fh.write(closed)
# An interrupted run: no closing brackets, and the last record cut off mid-write.
with open("scale_cache_interrupted.json", "w") as fh:
    partial = "".join(lines[:11])
    fh.write(partial + lines[11][: len(lines[11]) // 2])

results, env = tune_kernel(
    "scale", "/* synthetic */", N, [], tune_params, simulation_mode=True,
    cache="scale_cache.json", quiet=True,
)
with open("scale_results_env.json", "w") as fh:
    json.dump([results, env], fh)  # the pair tune_kernel returns, as a user would dump it
store_output_file("scale-results.json", results, tune_params)
store_metadata_file("scale-metadata.json")
print(len(results), "results; files written")
