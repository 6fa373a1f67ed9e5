"""How tests/data/store_v3_f0a7cc1.sqlite.gz was made: at commit f0a7cc1 (schema 3, before
program parameters), on a CPU machine, 2026-11-28:

    git worktree add /tmp/wt-f0a f0a7cc1 && cd /tmp/wt-f0a
    PYTHONPATH=src python make_store_v3.py /tmp/store_v3_f0a7cc1.sqlite store_v3_f0a7cc1.expected.json
    gzip -9 -c /tmp/store_v3_f0a7cc1.sqlite > store_v3_f0a7cc1.sqlite.gz

The recorded H200 builds of two kernels, and the choices they made at three sizes (also written
to the store's history)."""

import json, sys, warnings
warnings.simplefilter("ignore")
from klaraptor.cli.main import main
path = sys.argv[1]
assert main(["--store", path, "import-recorded", "--kernels", "polybench.atax.k1", "rodinia.srad.k1", "--jobs", "1"]) == 0
import klaraptor
from klaraptor.store import Store
out = {}
with Store(path) as st:
    for name in ("polybench.atax.k1", "rodinia.srad.k1"):
        k = klaraptor.load(name, store=st)
        sels = {}
        for D in k.report.sizes:
            pass
        # a few sizes past training: what must be chosen the same after migration
        names = k.spec.data_names
        for mult in (1, 2, 3):
            D = {n: v * mult for n, v in zip(names, k.report.sizes[-1].values())}
            s = k.select(D)
            sels[json.dumps(D, sort_keys=True)] = [list(s.block), list(s.grid)]
        k.selector.flush()
        out[name] = sels
    print("schema", st.schema_version())
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
