"""Write the shipped SNOWPACK static features (src/klaraptor/data/snowpack_features_sm90.json.gz)
from the recorded static analyses (isa_sm90.json.gz): no tools and no GPU needed.

    python scripts/record_snowpack.py

Run it again whenever klaraptor.isa's FEATURE_VERSION or SNOWPACK's FEATURE_SET changes; then
retrain the shipped model (`klaraptor bench train-snowpack --ship`).
"""

from __future__ import annotations

import gzip
import json

from klaraptor.core.provenance import stamp
from klaraptor.isa import load_recorded, load_recorded_raw
from klaraptor.models.snowpack.features import (
    ARCH,
    FEATURE_SET,
    from_isa,
    recorded_features_path,
)


def main() -> None:
    raw = load_recorded_raw()
    isas = load_recorded()
    kernels = {name: from_isa(isa) for name, isa in sorted(isas.items())}
    out = {
        "feature_set": FEATURE_SET,
        "arch": ARCH,
        "source": "recorded ISA (isa_sm90.json.gz: NVRTC + cuobjdump)",
        "isa_provenance": raw.get("provenance", {}),
        "fingerprints": {name: isa.fingerprint for name, isa in sorted(isas.items())},
        "kernels": kernels,
        "written": stamp("python scripts/record_snowpack.py"),
    }
    path = recorded_features_path()
    path.write_bytes(gzip.compress(json.dumps(out, indent=0, sort_keys=True).encode(), 9))
    print(f"wrote {path} ({len(kernels)} kernels, feature set {FEATURE_SET})")


if __name__ == "__main__":
    main()
