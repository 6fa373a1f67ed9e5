#!/usr/bin/env bash
# One device session: stages named on the command line run in order until the deadline; logs and
# data go to $OUT. The SQLite store lives in .devstore/ (carried between sessions, so collection
# resumes) and comes back as $OUT/store.sqlite.gz.
# Usage (device, repo root): KLARAPTOR_COMMIT=<sha> bash scripts/gpu_session.sh OUT SECONDS stage...
# Stages: tests, profile, demo, annotated (build the annotated example), bench_<name> (benchmarks/bench_<name>.py OUT),
#         time, ncu, truth (klaraptor bench collect --phase ...; $KERNELS selects kernels,
#         $TRUTH_BUDGET the ground-truth seconds per (kernel, N), default 60).
set -u
OUT=${1:?}; BUDGET=${2:?}; shift 2
DEADLINE=$(( $(date +%s) + BUDGET ))
export PYTHONPATH=$PWD/src:$PWD/plugins/klaraptor-bench/src PYTHONUNBUFFERED=1 KLARAPTOR_HOME=$PWD/.devstore
mkdir -p "$OUT/logs" "$KLARAPTOR_HOME"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT/logs/smi_start.csv" 2>&1
left() { echo $(( DEADLINE - $(date +%s) )); }
for s in "$@"; do
  t0=$(date +%s); T=$(left)
  if [ "$T" -le 5 ]; then echo "=== $s skipped: deadline"; continue; fi
  echo "=== $s $(date +%T) (up to ${T}s)"
  case "$s" in
    tests)   timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/ > "$OUT/logs/gpu_tests.log" 2>&1; echo "rc=$?"; tail -5 "$OUT/logs/gpu_tests.log";;
    profile) timeout "$T" python3 -c "
import json; from klaraptor.collect.microbench import measure_profile
p = measure_profile(0); json.dump(p.to_dict(), open('$OUT/h200_profile.json', 'w'), indent=1); print(p.key)
" > "$OUT/logs/profile.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/logs/profile.log";;
    demo)    timeout "$T" python3 -m klaraptor.cli demo --gpu > "$OUT/logs/demo.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/logs/demo.log";;
    bench_*) timeout "$T" python3 "benchmarks/${s}.py" "$OUT" > "$OUT/logs/$s.log" 2>&1; echo "rc=$?"; tail -20 "$OUT/logs/$s.log";;
    annotated) { timeout "$T" python3 -m klaraptor.cli build examples/annotated/matvec.cu --sizes 256,512,768,1024 \
                 && python3 -m klaraptor.cli select matvec.transpose 4096 && python3 -m klaraptor.cli select matvec.mv_rows 6000 \
                 && python3 -m klaraptor.cli explain matvec.transpose 4096 --limit 8 \
                 && python3 -m klaraptor.cli export matvec.transpose --lang c -o "$OUT/logs/matvec_transpose.h"; } > "$OUT/logs/annotated.log" 2>&1; echo "rc=$?"; tail -25 "$OUT/logs/annotated.log";;
    time|ncu|truth) timeout "$T" python3 -m klaraptor.cli bench collect --kernels "${KERNELS:-polybench}" --phase "$s" --budget "${TRUTH_BUDGET:-60}" --log "$OUT/logs/suite.jsonl" > "$OUT/logs/$s.log" 2>&1; echo "rc=$?"; tail -4 "$OUT/logs/$s.log";;
    *) echo "unknown stage $s";;
  esac
  echo "--- $s took $(( $(date +%s) - t0 )) s"
done
pkill -f klaraptor.collect.worker 2>/dev/null; pkill -x ncu 2>/dev/null; sleep 1
python3 - <<PY
import gzip, shutil, sqlite3
db = "$KLARAPTOR_HOME/klaraptor.sqlite"
try:
    c = sqlite3.connect(db, timeout=30); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
    with open(db, "rb") as f, gzip.open("$OUT/store.sqlite.gz", "wb", 6) as g: shutil.copyfileobj(f, g)
except Exception as e: print("store copy failed:", e)
PY
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$OUT/logs/smi_end.csv" 2>&1
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
ls -la "$OUT"
