#!/usr/bin/env bash
# The tunables suite split over GPUs 0-2 of a 4-GPU machine (one bench process per GPU: the
# per-kernel ratios stay within one GPU), and `pytest -m gpu` on GPU 3, in one device call.
# Usage (device, repo root): KLARAPTOR_COMMIT=<sha> bash scripts/device_tunables_x4.sh OUT LIMIT_S
set -u
OUT=${1:?}; LIMIT=${2:-400}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/wheels.log" 2>&1
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src:/tmp/site PYTHONUNBUFFERED=1
groups=("tunables.gsmap.gsmap tunables.sgemm.sgemm tunables.reduce.reduce_sum tunables.histogram.histogram_priv"
        "tunables.softmax.softmax_rows tunables.transpose.transpose_tiles tunables.stencil3d.stencil3d"
        "tunables.conv2d.conv2d_tiles tunables.stencil2d.stencil2d tunables.nbody.nbody_tiles")
for i in 0 1 2; do
  n=$(echo ${groups[$i]} | wc -w)
  mkdir -p "$OUT/t$i" "/tmp/klhome$i"
  CUDA_VISIBLE_DEVICES=$i KLARAPTOR_HOME=/tmp/klhome$i timeout "$LIMIT" python3 benchmarks/bench_tunables.py "$OUT/t$i" --limit $((LIMIT - 15)) --kt "$n" --step $((LIMIT / 2)) ${groups[$i]} > "$OUT/t$i/tunables.log" 2>&1 &
done
mkdir -p /tmp/klhome3
CUDA_VISIBLE_DEVICES=3 KLARAPTOR_HOME=/tmp/klhome3 timeout "$LIMIT" python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/ > "$OUT/gpu_tests.log" 2>&1 &
wait
tail -5 "$OUT/gpu_tests.log"; for i in 0 1 2; do tail -14 "$OUT/t$i/tunables.log"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/smi_end.csv" 2>&1
(cd "$OUT" && tar czf tunables_x4.tgz t0 t1 t2 gpu_tests.log wheels.log smi_end.csv && rm -rf t0 t1 t2 *.log *.csv)
ls -la "$OUT"
