"""Exported helpers + choices for the demo kernels (auto, time_fit, mwp_cwp) from recorded data."""

import json
import sys
import tempfile
from pathlib import Path

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.suite.recorded import load_recorded

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
data = load_recorded()
names = [
    "polybench.atax.k1",
    "polybench.conv2d.conv2d",
    "polybench.gemm.gemm",
    "polybench.conv3d.conv3d",
]
choices = {}
with tempfile.TemporaryDirectory() as tmp:
    store = data.to_store(Path(tmp) / "s.sqlite", kernels=names)
    for name in names:
        spec = suite.get(name)
        for model in ("auto", "time_fit", "mwp_cwp"):
            k = build(
                spec,
                [{"N": n} for n in spec.meta["train_sizes"]],
                model=model,
                store=store,
                device=data.profile(),
                collect_data=False,
            )
            (out / f"{name}.{model}.h").write_text(k.export_c())
            (out / f"{name}.{model}.py").write_text(k.export_python())
            for n in (2048, 3000, 4096, 8192) if spec.dim < 3 else (128, 200, 384):
                s = k.select(n)
                choices[f"{name}/{model}/{n}"] = [
                    list(s.block),
                    list(s.grid),
                    s.predicted_ms.hex(),
                    [[list(b), t.hex()] for b, t in s.topk],
                ]
(out / "choices.json").write_text(json.dumps(choices, indent=1, sort_keys=True))
print(len(choices))
