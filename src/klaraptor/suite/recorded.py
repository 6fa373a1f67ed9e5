"""The recorded dataset: real H200 measurements of the suite, compact, with provenance.

It holds, per kernel: the kernel's attributes and budget decisions, the training timings (every
candidate at every training size: median, quartiles), the L2-flushed ("cold") timings of every
candidate at the largest training size where recorded, the hardware counters at the counter
sizes, the exhaustive ground truth at the evaluation sizes, the bytes of the array arguments at
the training sizes (in the collection facts) and the wall times each step took. Files written
before the cold timings existed (no `cold` list) still load.
The CPU tests, `klaraptor import-recorded` and `klaraptor demo` (without a GPU) import it into a
Store and run the real pipeline on it: fit → helper program → select. Writing a dataset from a
store (`klaraptor bench export`) is the evaluation plugin's (`klaraptor_bench.dataset`).

Raw timing samples are dropped (the quartiles are kept) and counter values are rounded to 7
significant digits, which keeps the file at about a megabyte.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block, DataSize
from klaraptor.device.profile import with_known_memory_size
from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store, TruthDecision

if TYPE_CHECKING:
    from klaraptor.models.snowpack.corpus import TimedKernel

DATA_NAME = "h200_suite.json.gz"
# The recorded datasets of each suite (package data).
RECORDED = {"polybench": DATA_NAME, "rodinia": "h200_rodinia.json.gz"}
FORMAT = 1


def _block_at(row: Sequence[Any], d: int) -> Block:
    """The block of a dataset row whose first `d` values are the data size."""
    return (int(row[d]), int(row[d + 1]), int(row[d + 2]))


@dataclass
class KernelData:
    """One kernel's recorded measurements.

    `summary` is the file's form: the spec's description plus, per device key, the collection
    facts (`"collect"`) and the ground-truth decisions (`"truth"`); read them typed through
    `spec_summary`, `facts` and `truth`.
    """

    name: str
    fingerprint: str
    summary: dict[str, Any]
    time: list[list[float]]  # [D..., bx, by, bz, median_ms, q1_ms, q3_ms]
    ncu: list[list[Any]]  # [D..., bx, by, bz, {raw metric: value}]
    costs: dict[str, float] = field(default_factory=dict)
    cold: list[list[float]] = field(default_factory=list)  # as `time`, L2 flushed per sample

    @property
    def data_names(self) -> tuple[str, ...]:
        return tuple(str(d["name"]) for d in self.summary.get("data", [])) or ("N",)

    @property
    def n_data(self) -> int:
        return len(self.data_names)

    def size(self, row: list[Any]) -> DataSize:
        return DataSize(self.data_names, tuple(int(v) for v in row[: self.n_data]))

    def times(self) -> dict[tuple[DataSize, Block], tuple[float, float, float]]:
        """(D, block) → (median, q1, q3) ms."""
        return self._by_point(self.time)

    def cold_times(self) -> dict[tuple[DataSize, Block], tuple[float, float, float]]:
        """(D, block) → (median, q1, q3) ms of the L2-flushed timings."""
        return self._by_point(self.cold)

    def _by_point(
        self, rows: list[list[float]]
    ) -> dict[tuple[DataSize, Block], tuple[float, float, float]]:
        """Timing rows (D..., bx, by, bz, median, q1, q3) keyed by (D, block)."""
        d = self.n_data
        return {(self.size(r), _block_at(r, d)): (r[d + 3], r[d + 4], r[d + 5]) for r in rows}

    def sizes(self) -> list[DataSize]:
        return sorted({self.size(r) for r in self.time}, key=DataSize.values)

    @property
    def spec_summary(self) -> dict[str, Any]:
        return {
            k: v for k, v in self.summary.items() if k not in ("collect", "truth", "supplement")
        }

    def facts(self, device: str) -> CollectFacts:
        entry = (self.summary.get("collect") or {}).get(device)
        if entry is None:
            raise KlaraptorError(f"the recorded data of {self.name} has no facts for {device!r}")
        return CollectFacts.from_dict(entry)

    def truth(self, device: str) -> dict[DataSize, TruthDecision]:
        """The ground-truth budget decisions per evaluation size."""
        out = {}
        for n, dec in ((self.summary.get("truth") or {}).get(device) or {}).items():
            D = DataSize(self.data_names, (int(n),))
            out[D] = TruthDecision(
                D,
                bool(dec["measure"]),
                float(dec["estimate_s"]),
                str(dec["reason"]),
                str(dec.get("decided", "")),
            )
        return out


@dataclass
class RecordedDataset:
    provenance: dict[str, Any]
    device: dict[str, Any]
    kernels: dict[str, KernelData]

    @property
    def device_key(self) -> str:
        from klaraptor.device.profile import DeviceProfile

        return DeviceProfile.from_dict(self.device).key

    def profile(self) -> Any:
        from klaraptor.device.profile import DeviceProfile

        return DeviceProfile.from_dict(self.device)

    def to_store(self, path: str | Path, kernels: Iterable[str] | None = None) -> Store:
        """A new Store at `path` holding the recorded data (as collection would have left it)."""
        store = Store(path)
        key = self.device_key
        store.put_device_profile(key, self.device)
        for name in kernels if kernels is not None else self.kernels:
            k = self.kernels[name]
            store.put_kernel(KernelRecord(name, k.fingerprint, k.data_names, k.spec_summary))
            for device in k.summary.get("collect") or {}:
                store.put_collect_facts(name, device, k.facts(device))
            for device in k.summary.get("truth") or {}:
                store.put_truth_decisions(name, device, k.truth(device).values())
            d = k.n_data
            ms = [
                Measurement(
                    name,
                    key,
                    k.size(r),
                    _block_at(r, d),
                    kind,
                    "ok",
                    {
                        "median_ms": r[d + 3],
                        "q1_ms": r[d + 4],
                        "q3_ms": r[d + 5],
                        "spread": (r[d + 5] - r[d + 4]) / r[d + 3] if r[d + 3] > 0 else math.nan,
                    },
                )
                for kind, rows in (("time", k.time), ("time_cold", k.cold))
                for r in rows
            ]
            ms += [
                Measurement(
                    name,
                    key,
                    k.size(r),
                    _block_at(r, d),
                    "ncu",
                    "ok",
                    dict(r[d + 3]),
                )
                for r in k.ncu
            ]
            store.put_measurements(ms)
        return store

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "provenance": self.provenance,
            "device": self.device,
            "kernels": {
                n: {
                    "fingerprint": k.fingerprint,
                    "summary": k.summary,
                    "time": k.time,
                    "ncu": k.ncu,
                    "costs": k.costs,
                    **({"cold": k.cold} if k.cold else {}),
                }
                for n, k in self.kernels.items()
            },
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> RecordedDataset:
        if obj.get("format") != FORMAT:
            raise KlaraptorError(f"recorded dataset format {obj.get('format')!r} is not {FORMAT}")
        try:
            device = with_known_memory_size(dict(obj["device"]))
            data = RecordedDataset(
                provenance=dict(obj["provenance"]),
                device=device,
                kernels={
                    n: KernelData(
                        n,
                        k["fingerprint"],
                        k["summary"],
                        k["time"],
                        k["ncu"],
                        k.get("costs", {}),
                        k.get("cold", []),
                    )
                    for n, k in obj["kernels"].items()
                },
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise KlaraptorError(f"recorded dataset is malformed: {exc!r} is missing") from None
        data._rekey_summaries()
        return data

    def _rekey_summaries(self) -> None:
        """Files written before the device key left out the driver key their per-device
        summaries by the old key (`DeviceProfile.legacy_key`): move them to the current one."""
        profile = self.profile()
        old, new = profile.legacy_key, profile.key
        for k in self.kernels.values():
            for part in ("collect", "truth"):
                per_device = k.summary.get(part)
                if isinstance(per_device, dict) and old in per_device and new not in per_device:
                    per_device[new] = per_device.pop(old)


def recorded_path(suite: str) -> Path:
    """The file of a suite's shipped dataset ("polybench" or "rodinia")."""
    if suite not in RECORDED:
        raise KlaraptorError(f"no recorded dataset for suite {suite!r} (one of {sorted(RECORDED)})")
    return Path(str(resources.files("klaraptor") / "data" / RECORDED[suite]))


def recorded_suites() -> list[RecordedDataset]:
    """Every shipped suite's dataset (PolyBench, then Rodinia-style: 44 kernels)."""
    return [load_recorded(recorded_path(s)) for s in RECORDED]


def load_recorded(path: str | Path | None = None) -> RecordedDataset:
    """The shipped PolyBench dataset (or one at `path`; `recorded_path("rodinia")` for the
    Rodinia-style one)."""
    try:
        if path is None:
            blob = (resources.files("klaraptor") / "data" / DATA_NAME).read_bytes()
        else:
            blob = Path(path).read_bytes()
    except OSError as e:
        raise KlaraptorError(f"recorded dataset not found ({path or DATA_NAME}): {e}") from None
    try:
        obj = json.loads(gzip.decompress(blob))
    except (OSError, EOFError, ValueError) as e:  # BadGzipFile is an OSError
        raise KlaraptorError(
            f"recorded dataset {path or DATA_NAME} is not gzip-compressed JSON ({e})"
        ) from None
    if not isinstance(obj, dict):
        raise KlaraptorError(f"recorded dataset {path or DATA_NAME} is not a JSON object")
    return RecordedDataset.from_json(obj)


# The recorded datasets shipped in the package: the PolyBench suite and the Rodinia-style one.
RECORDED_FILES = tuple(RECORDED.values())
# Recorded datasets of suites that are never evaluated, only learned from (SNOWPACK's corpus).
TRAINING_ONLY = {"patterns": "h200_patterns.json.gz"}


def recorded_datasets() -> dict[str, RecordedDataset]:
    """Every shipped recorded dataset, by file name."""
    return {
        name: load_recorded(Path(str(resources.files("klaraptor") / "data" / name)))
        for name in RECORDED_FILES
    }


def training_only_datasets() -> dict[str, RecordedDataset]:
    """The shipped datasets of the training-only suites, by file name: SNOWPACK learns from them;
    nothing scores a method on them."""
    return {
        name: load_recorded(Path(str(resources.files("klaraptor") / "data" / name)))
        for name in TRAINING_ONLY.values()
    }


def build_recorded(
    store_path: str | Path, dataset: str, kernel: str, model: str = "auto"
) -> dict[str, Any]:
    """Build one kernel of a shipped dataset from its recorded training measurements (already
    imported into the store at `store_path`), as `klaraptor bench report` does: the spec's
    training sizes, the recorded H200 profile. Returns what was built. A top-level function so
    that worker processes can run it."""
    from klaraptor import suite
    from klaraptor.assemble import build

    data = load_recorded(Path(str(resources.files("klaraptor") / "data" / dataset)))
    spec = suite.get(kernel)
    with Store(store_path, must_exist=True) as store:
        kern = build(
            spec,
            [spec.size(s) for s in spec.meta["train_sizes"]],
            model=model,
            store=store,
            device=data.profile(),
            collect_data=False,
            progress=False,
        )
        assert kern.report is not None
        sel = kern.report.selection
        chosen = kern.report.model if sel is None else sel.chosen
        return {"kernel": kernel, "model": chosen, "fit_s": kern.report.fit_wall_s}


@dataclass
class RecordedCorpus:
    """Recorded datasets as SNOWPACK's training corpus (`models.snowpack.corpus.TrainingCorpus`):
    every kernel's hot median times on the recorded GPU, with the shipped static features, dataset
    by dataset and kernel by kernel in name order."""

    datasets: Sequence[RecordedDataset]

    def timed_kernels(self) -> Iterator[TimedKernel]:
        from klaraptor import suite
        from klaraptor.models.snowpack.corpus import TimedKernel
        from klaraptor.models.snowpack.features import load_recorded_features

        feats = load_recorded_features()
        for data in self.datasets:
            device = data.profile()
            for name, kd in sorted(data.kernels.items()):
                points = {k: v[0] for k, v in kd.times().items()}
                yield TimedKernel(suite.get(name), feats[name], device, points)
