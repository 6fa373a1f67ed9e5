#!/usr/bin/env bash
# Issue 35 on the device: scripts/device_instrument.py (about 6 minutes on one H200), then the
# logs, the instrumented sources and the store packed into OUT/logs.tgz (the device returns few
# files); OUT/instrument.json is the summary (benchmarks/results/h200/instrument.json).
# Usage (device, repository root; carry .whl/ with libclang's wheel where it is not installed):
#   KLARAPTOR_COMMIT=<sha> bash scripts/device_instrument.sh OUT [--programs 2MM GEMM ...]
set -u
OUT=${1:?usage: device_instrument.sh OUT [options]}; shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src PYTHONUNBUFFERED=1
timeout -k 10 390 python3 scripts/device_instrument.py "$OUT" "$@" > "$OUT/driver.log" 2>&1
echo "device_instrument.py rc=$?" >> "$OUT/driver.log"
tail -5 "$OUT/driver.log"
(cd "$OUT" && tar czf logs.tgz driver.log logs \
  $(cd "$OUT" && find work -name '*.klaraptor.cu' -o -name '*.klaraptor.h' -o -name 'klaraptor_*.h' \
    -o -name 'overhead.cu' 2>/dev/null) home 2>/dev/null; \
  rm -rf work pylib home logs)
ls -la "$OUT"
