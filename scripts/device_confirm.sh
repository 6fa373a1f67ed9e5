#!/usr/bin/env bash
# The GPU confirmations of issues 9-15 in one device call; each step time-limited, none fatal.
# Usage (device, repo root): KLARAPTOR_COMMIT=<sha> bash scripts/device_confirm.sh OUT PART
#   PART 1: every gpu-marked test (-v log), the budgeted build against tune-once, bench_select
#   PART 2: the front-end, Numba and collection GPU tests again, SAAKE's speed-of-light referee,
#           the front-ends' launch-cost benchmark
#   PART 3: the front-ends only (scripts/frontends_gpu.py: versions, the front-end and Numba
#           tests, the launch-cost benchmark of every front-end), about 4 minutes
#   PART 4: every gpu-marked test and the Numba tests (Dask installed from .whl/ when carried),
#           the front-ends' launch-cost benchmark, Dask on one GPU (bench_multi_gpu --gpus 1),
#           about 8 minutes
#   PART 5: every gpu-marked test (Dask from .whl/ when carried), the Numba tests and the README's
#           front-end examples as written (frontends_gpu.py --only readme), about 8 minutes; the
#           logs come back as OUT/logs.tgz (the device returns few files)
#   PART 6: the budgeted build against tune-once (bench_build) and Dask on one GPU, results
#           in OUT/logs.tgz, about 7 minutes
# scripts/device_env (first on PYTHONPATH) gives a NumPy without numpy.row_stack the alias
# numba-cuda 0.30.4 needs to compile anything; it changes nothing elsewhere (docs/frontends.md).
set -u
OUT=${1:?}; PART=${2:?}
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src PYTHONUNBUFFERED=1 KLARAPTOR_HOME=$OUT/home
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
    # No -m gpu: the Numba tests are not gpu-marked (on a GPU machine they run the real Numba).
    run gpu_tests_2 200 python3 -m pytest -v -p no:cacheprovider -rs \
      tests/frontends/test_frontends_gpu.py tests/collect/test_gpu_collect.py \
      tests/frontends/test_numba.py tests/frontends/test_numba_device_env.py
    run saake_sol 150 python3 scripts/device_saake_sol.py "$OUT/saake" --limit 110
    run frontends 135 python3 scripts/frontends_gpu.py "$OUT/frontends" --budget-s 125 \
      --only bench
    ;;
  3)
    run frontends 400 python3 scripts/frontends_gpu.py "$OUT/frontends" --budget-s 380 \
      --only tests bench
    ;;
  4)
    if ls .whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install --no-deps --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
      export PYTHONPATH=/tmp/site:$PYTHONPATH
    fi
    run gpu_tests 200 python3 -m pytest -m gpu -v -p no:cacheprovider -rs \
      --continue-on-collection-errors tests/
    run numba_tests 90 python3 -m pytest -v -p no:cacheprovider -rs \
      tests/frontends/test_numba.py tests/frontends/test_numba_device_env.py
    run frontends 130 python3 scripts/frontends_gpu.py "$OUT/frontends" --budget-s 120 \
      --only bench
    run dask 230 python3 benchmarks/bench_multi_gpu.py "$OUT" --gpus 1
    ;;
  5)
    if ls .whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install --no-deps --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
      export PYTHONPATH=/tmp/site:$PYTHONPATH
    fi
    LOGS=/tmp/confirm_logs; mkdir -p $LOGS; export KLARAPTOR_HOME=/tmp/confirm_home
    run gpu_tests 260 python3 -m pytest -m gpu -v -p no:cacheprovider -rs \
      --continue-on-collection-errors tests/
    run numba_tests 90 python3 -m pytest -v -p no:cacheprovider -rs \
      tests/frontends/test_numba.py tests/frontends/test_numba_device_env.py
    run readme 200 python3 scripts/frontends_gpu.py $LOGS/frontends --budget-s 190 --only readme
    cp "$OUT"/*.log $LOGS/ 2>/dev/null
    tar czf "$OUT/logs.tgz" -C $LOGS . && rm -f "$OUT"/*.log
    ;;
  6)
    if ls .whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install --no-deps --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
      export PYTHONPATH=/tmp/site:$PYTHONPATH
    fi
    LOGS=/tmp/confirm_logs; mkdir -p $LOGS; export KLARAPTOR_HOME=/tmp/confirm_home
    run bench_build 200 python3 benchmarks/bench_build.py $LOGS --limit 190
    run dask 230 python3 benchmarks/bench_multi_gpu.py $LOGS --gpus 1
    cp "$OUT"/*.log $LOGS/ 2>/dev/null
    tar czf "$OUT/logs.tgz" -C $LOGS . && rm -f "$OUT"/*.log
    ;;
esac
pkill -f klaraptor.collect.worker 2>/dev/null; pkill -x ncu 2>/dev/null
ls -la "$OUT"
