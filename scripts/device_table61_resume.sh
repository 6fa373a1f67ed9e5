#!/usr/bin/env bash
# Resume scripts/device_table61.py in a fresh folder whose task list marks every task the
# shipped supplement (src/klaraptor/data/h200_table61.json.gz) already holds as done, so only
# the tasks not measured yet run. Usage (device, repo root):
#   KLARAPTOR_COMMIT=<sha> bash scripts/device_table61_resume.sh OUT LIMIT_S
set -u
OUT=${1:?}; LIMIT=${2:-540}
T=$OUT/t61; mkdir -p "$T"
export PYTHONPATH=$PWD/scripts/device_env:$PWD/src:$PWD/plugins/klaraptor-bench/src PYTHONUNBUFFERED=1 KLARAPTOR_HOME=/tmp/klhome
python3 - "$T" <<'PY'
import gzip, json, sys
d = json.load(gzip.open("src/klaraptor/data/h200_table61.json.gz"))
with open(sys.argv[1] + "/tasks.jsonl", "w") as f:
    for t in d["provenance"]["tasks"]:
        if t["status"] == "done":
            f.write(json.dumps({**t, "run": "shipped", "from_shipped_supplement": True}) + "\n")
PY
python3 scripts/device_table61.py "$T" --only truth,build,sweep128 --limit "$LIMIT" > "$OUT/t61.log" 2>&1
echo "rc=$?"; tail -5 "$OUT/t61.log"
tar czf "$OUT/t61.tgz" -C "$OUT" t61 t61.log && rm -rf "$T"
