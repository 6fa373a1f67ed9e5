#!/usr/bin/env bash
# One device call on a machine of several GPUs: the wheels installed once, then one sequence of
# steps per GPU, the sequences in parallel (each step's ratios stay within one GPU). Logs and
# results under OUT/gpu<i>/, archived as OUT/round.tgz (the device returns at most 8 files).
# Usage (device, repo root):
#   KLARAPTOR_COMMIT=<sha> bash scripts/device_parallel.sh OUT "0:triton:90,cost:100" "1:gputests:200" ...
# Steps: sleep:S (wait S s: keeps a timing step alone on the host), triton (benchmarks/bench_triton.py), cost (bench_cost.py ${COST_ARGS_<i>}), firstcall
# (bench_first_call.py), profile (profile_build.py, parent and worker cProfile), ssearch (bench_saake_search.py --budget 0.25 over ${SSEARCH_KERNELS}), gputests (pytest -m gpu over ${GPUTESTS_<i>:-tests/}), tunables
# (bench_tunables.py over ${TUNABLES_<i>}, Kernel Tuner on each), select (bench_select.py: the host CPU's per-call selection), script (bash -c "${SCRIPT_<i>}" with
# DIR=gpu<i>), recollect (bench collect --phase time of ${RECOLLECT_<i>}
# into gpu<i>/recollect.sqlite: the suites' training timings under the racing protocol).
# MULTI_GPU=N (optional): after every sequence, bench_multi_gpu.py --gpus N on all GPUs, in OUT/mg
# (limit ${MULTI_GPU_LIMIT:-300} s).
set -u
OUT=${1:?}; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/wheels.log" 2>&1
# Dask (carried as .whl-dask) only for the multi-GPU bench.
[ -n "${MULTI_GPU:-}" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-dask/*.whl >> "$OUT/wheels.log" 2>&1
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/smi_start.csv" 2>&1
run_gpu() {
  local gpu=$1 steps=$2 dir="$OUT/gpu$1"
  mkdir -p "$dir" "/tmp/klhome$gpu"
  export CUDA_VISIBLE_DEVICES=$gpu KLARAPTOR_HOME=/tmp/klhome$gpu DIR=$dir
  for step in ${steps//,/ }; do
    local name=${step%%:*} limit=${step#*:}; [ "$limit" = "$step" ] && limit=300
    local t0; t0=$(date +%s); echo "=== gpu$gpu $name (limit ${limit}s) $(date +%T)"
    case "$name" in
      triton) timeout "$limit" python3 benchmarks/bench_triton.py "$dir" --limit $((limit - 15)) > "$dir/triton.log" 2>&1;;
      cost) local var="COST_ARGS_$gpu"; timeout "$limit" python3 benchmarks/bench_cost.py "$dir" --limit $((limit - 15)) ${!var:-} > "$dir/cost.log" 2>&1;;
      ssearch) timeout "$limit" python3 benchmarks/bench_saake_search.py "$dir/ssb" --budget 0.25 --kernels "${SSEARCH_KERNELS:-gsmap.gsmap,softmax.softmax_rows,stencil2d.stencil2d,reduce.reduce_sum,histogram.histogram_priv}" --limit $((limit - 15)) --workers ${SSEARCH_WORKERS:-14} > "$dir/ssearch.log" 2>&1;;
      profile) timeout "$limit" python3 benchmarks/profile_build.py "$dir/prof" ${PROFILE_KERNELS:-patterns.saxpy.saxpy polybench.fdtd2d.k1 patterns.transpose.transpose_tiled patterns.jacobi2d.jacobi2d} > "$dir/profile.log" 2>&1;;
      sleep) sleep "$limit";;
      firstcall) timeout "$limit" python3 benchmarks/bench_first_call.py "$dir" > "$dir/firstcall.log" 2>&1;;
      gputests) local var="GPUTESTS_$gpu"; timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider -rs ${!var:-tests/} > "$dir/gpu_tests.log" 2>&1;;
      select) timeout "$limit" python3 benchmarks/bench_select.py "$dir" > "$dir/select.log" 2>&1;;
      script) local var="SCRIPT_$gpu"; timeout "$limit" bash -c "${!var}" > "$dir/script.log" 2>&1;;
      recollect) local var="RECOLLECT_$gpu"; timeout "$limit" python3 -m klaraptor.cli --store "$dir/recollect.sqlite" bench collect --kernels "${!var}" --phase time --log "$dir/recollect.jsonl" > "$dir/recollect.log" 2>&1;;
      tunables) local var="TUNABLES_$gpu"; local n; n=$(echo ${!var} | wc -w)
        timeout "$limit" python3 benchmarks/bench_tunables.py "$dir" --limit $((limit - 15)) --kt "$n" --step $((limit / 2)) ${!var} > "$dir/tunables.log" 2>&1;;
      *) echo "unknown step $name";;
    esac
    echo "--- gpu$gpu $name rc=$? took $(( $(date +%s) - t0 )) s"
  done
}
for seq in "$@"; do run_gpu "${seq%%:*}" "${seq#*:}" & done
wait
if [ -n "${MULTI_GPU:-}" ]; then
  echo "=== multi-GPU bench on ${MULTI_GPU} GPUs $(date +%T)"; mkdir -p "$OUT/mg"
  (unset CUDA_VISIBLE_DEVICES; export KLARAPTOR_HOME=/tmp/klhome_mg
   timeout "${MULTI_GPU_LIMIT:-300}" python3 benchmarks/bench_multi_gpu.py "$OUT/mg" --gpus "$MULTI_GPU" > "$OUT/mg/run.log" 2>&1
   echo "--- multi-GPU rc=$?")
fi
nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$OUT/smi_end.csv" 2>&1
for d in "$OUT"/gpu*; do for f in "$d"/*.log; do echo "## $f"; tail -6 "$f"; done; done
(cd "$OUT" && tar czf round.tgz gpu* mg *.log *.csv 2>/dev/null; rm -rf gpu* mg *.log *.csv)
ls -la "$OUT"
