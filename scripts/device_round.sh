#!/usr/bin/env bash
# One device call of this round's GPU work: steps named on the command line, each with its own
# time limit, logs under OUT. Usage (device, repo root):
#   KLARAPTOR_COMMIT=<sha> bash scripts/device_round.sh OUT step[:seconds] ...
# Steps: wheels (install .whl/ into /tmp/site), tunables (benchmarks/bench_tunables.py),
#        gputests (pytest -m gpu), instrument (scripts/device_instrument.sh), cost
#        (benchmarks/bench_cost.py), firstcall (benchmarks/bench_first_call.py).
set -u
OUT=${1:?}; shift
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src:/tmp/site PYTHONUNBUFFERED=1 KLARAPTOR_HOME=/tmp/klhome
mkdir -p "$OUT" "$KLARAPTOR_HOME"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/smi_start.csv" 2>&1
for step in "$@"; do
  name=${step%%:*}; limit=${step#*:}; [ "$limit" = "$step" ] && limit=300
  t0=$(date +%s); echo "=== $name (limit ${limit}s) $(date +%T)"
  case "$name" in
    wheels) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/wheels.log" 2>&1; echo "rc=$?";;
    tunables) timeout "$limit" python3 benchmarks/bench_tunables.py "$OUT" --limit $((limit - 15)) --kt "${KT:-3}" --step "${STEP:-110}" ${TUNABLES:-} > "$OUT/tunables.log" 2>&1; echo "rc=$?"; tail -15 "$OUT/tunables.log"
              [ -d "$OUT/stores" ] && tar czf "$OUT/tunables_stores.tgz" -C "$OUT" stores && rm -rf "$OUT/stores";;
    gputests) timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider -rs ${GPUTESTS:-tests/} > "$OUT/gpu_tests.log" 2>&1; echo "rc=$?"; tail -8 "$OUT/gpu_tests.log";;
    instrument) timeout "$limit" bash scripts/device_instrument.sh "$OUT/instrument" ${INSTRUMENT_ARGS:-} > "$OUT/instrument.log" 2>&1; echo "rc=$?"; tail -8 "$OUT/instrument.log";;
    cost) timeout "$limit" python3 benchmarks/bench_cost.py "$OUT" --limit $((limit - 15)) > "$OUT/cost.log" 2>&1; echo "rc=$?"; tail -12 "$OUT/cost.log";;
    firstcall) timeout "$limit" python3 benchmarks/bench_first_call.py "$OUT" > "$OUT/firstcall.log" 2>&1; echo "rc=$?"; tail -8 "$OUT/firstcall.log";;
    *) echo "unknown step $name";;
  esac
  echo "--- $name took $(( $(date +%s) - t0 )) s"
done
pkill -f klaraptor.collect.worker 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > "$OUT/smi_end.csv" 2>&1
# The device returns at most 8 files: the logs travel as one archive.
(cd "$OUT" && tar czf round_logs.tgz *.log *.csv 2>/dev/null && rm -f *.log *.csv)
ls -la "$OUT" "$OUT"/instrument 2>/dev/null
