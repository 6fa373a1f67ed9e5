#!/usr/bin/env bash
# One device session: stages named on the command line run in order; logs and data go to $OUT.
# Usage (device, repo root): bash scripts/gpu_session.sh OUT stage [stage ...]
set -u
OUT=${1:?}; shift
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 KLARAPTOR_HOME=${KLARAPTOR_HOME:-$OUT/home}
mkdir -p "$OUT/logs" "$KLARAPTOR_HOME"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT/logs/smi_start.csv" 2>&1
stage() { echo "=== $1 $(date +%T)"; }
for s in "$@"; do
  t0=$(date +%s)
  case "$s" in
    tests)   stage tests; timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/ > "$OUT/logs/gpu_tests.log" 2>&1; echo "rc=$?"; tail -5 "$OUT/logs/gpu_tests.log";;
    profile) stage profile; timeout 60 python3 -c "
import json; from klaraptor.microbench import measure_profile
p = measure_profile(0); json.dump(p.to_dict(), open('$OUT/h200_profile.json', 'w'), indent=1); print(p.key)
" > "$OUT/logs/profile.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/logs/profile.log";;
    bench_collect) stage bench_collect; timeout 180 python3 benchmarks/bench_collect.py "$OUT/bench_collect.json" > "$OUT/logs/bench_collect.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/logs/bench_collect.log";;
    demo)    stage demo; timeout 150 python3 -m klaraptor.cli demo --gpu > "$OUT/logs/demo.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/logs/demo.log";;
    bench_*) stage "$s"; timeout 560 python3 "benchmarks/${s}.py" "$OUT" > "$OUT/logs/$s.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/logs/$s.log";;
    suite_*) stage "$s"; args=${s#suite_}; timeout 570 python3 -m klaraptor.cli bench collect ${SUITE_ARGS:-} --log "$OUT/logs/suite.jsonl" > "$OUT/logs/$s.log" 2>&1; echo "rc=$?"; tail -8 "$OUT/logs/$s.log";;
  esac
  echo "--- $s took $(( $(date +%s) - t0 )) s"
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$OUT/logs/smi_end.csv" 2>&1
tar czf "$OUT/session.tgz" -C "$OUT" logs home $(cd "$OUT" && ls *.json 2>/dev/null) 2>/dev/null
ls -la "$OUT"
