# Written at commit 3a4d02d (schema 1) by: git checkout 3a4d02d && python tests/data/make_store_v1.py OUT.sqlite
# then gzip -9. The expected selections are what 3a4d02d loaded from it.
"""Write a schema-1 store with klaraptor 3a4d02d: kernel summaries, measurements, builds (with
rejected blocks), model + refined history. Used as the migration test fixture."""
import sys
from pathlib import Path
from klaraptor.bench.dataset import load_recorded
from klaraptor.builder import build
from klaraptor import suite

out = Path(sys.argv[1])
out.unlink(missing_ok=True)
data = load_recorded()
names = ["polybench.atax.k1"]
# The kernel's function limit at 512 threads (as for a register-heavy kernel) makes the build
# reject the larger blocks, so the fixture holds rejected blocks in the old string format.
summ = data.kernels[names[0]].summary
summ["collect"][data.device_key]["attributes"]["max_threads_per_block"] = 512
store = data.to_store(out, kernels=names)
for name in names:
    spec = suite.get(name)
    sizes = [{"N": n} for n in spec.meta["train_sizes"]]
    for model in ("time_fit", "mwp_cwp"):
        k = build(spec, sizes, model=model, store=store, device=data.profile(), collect_data=False)
        for n in (2048, 3000, 5000):
            k.select(n)
        k.selector.flush()
    k.selector.fix(4096, k.helper.candidates[3], 0.5)
    k.selector.flush()
# a rejected block in a build report, as the old code stored it
import json, sqlite3
c = sqlite3.connect(out)
print(c.execute("select count(*) from measurements").fetchone(), c.execute("select count(*) from builds").fetchone(), c.execute("select count(*) from history").fetchone())
for (p,) in c.execute("select payload from builds"):
    print(json.loads(p)["report"]["rejected"])
store.close()
c.execute("VACUUM"); c.close()
