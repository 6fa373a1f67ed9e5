#!/usr/bin/env bash
# The GPU confirmations of issues 9-15 in one device call; each step time-limited, none fatal.
# Usage (device, repo root): KLARAPTOR_COMMIT=<sha> bash scripts/device_confirm.sh OUT PART
#   PART 1: every gpu-marked test (-v log), the budgeted build against tune-once, bench_select
#   PART 2: SAAKE's speed-of-light referee, the device-key check, the front-ends' benchmark and
#           README examples
set -u
OUT=${1:?}; PART=${2:?}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 KLARAPTOR_HOME=$OUT/home
mkdir -p "$OUT" "$KLARAPTOR_HOME"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/smi.csv" 2>&1
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/steps.txt"
  tail -4 "$OUT/$name.log"
}
case "$PART" in
  1)
    run gpu_tests 300 python3 -m pytest -m gpu -v -p no:cacheprovider -rs \
      --continue-on-collection-errors tests/
    run bench_build 200 python3 benchmarks/bench_build.py "$OUT" --limit 190
    run bench_select 45 python3 benchmarks/bench_select.py "$OUT" --quick
    ;;
  2)
    run saake_sol 170 python3 scripts/device_saake_sol.py "$OUT/saake" --limit 140
    run device_key 150 python3 scripts/device_key_check.py "$OUT/key"
    run frontends 260 python3 scripts/frontends_gpu.py "$OUT/frontends" --budget-s 250 \
      --only bench readme
    ;;
esac
pkill -f klaraptor.gpu.worker 2>/dev/null; pkill -x ncu 2>/dev/null
ls -la "$OUT"
