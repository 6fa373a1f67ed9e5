"""Is the kernel data-oblivious? A check at build time (issue 36; the talk's precondition).

KLARAPTOR's choices rest on the time of a launch depending on the data SIZE and the block, not on
the data VALUES (the talk's precondition: data-oblivious kernels). A kernel whose work follows its
data (a graph traversal's frontier, a data-dependent loop or branch) breaks it: points measured on
one random input say little about another input of the same size, so the chosen block may not
transfer.

`check_data_dependence(spec, D)` times a few configurations at one size on two random inputs of
that size (the collection's own `make_args` with two seeds) and compares them:
- per block, the inputs are timed alternately A, B, A, B (`ROUNDS` rounds) in one process, so
  clock drift hits both alike; each timing is the collection's (`Timer.measure`, CUDA events);
- the block's data effect is |mean(A) − mean(B)| / min(mean(A), mean(B));
- its noise band is the largest of the repeat spread of each input's rounds ((max − min) / mean)
  and the relative IQR of every timing's samples;
- the block differs when the effect exceeds max(`FLOOR`, `NOISE_FACTOR` × its noise band);
- the kernel is data-dependent when more than half of the blocks differ. Then a
  `DataDependenceWarning` says that the kernel is not data-oblivious and that choices may not
  transfer (`warn=False` only returns the verdict).

By default the GPU work (`klaraptor.collect.worker.time_on_inputs`) runs in a collection worker
subprocess (mode "datadep"), isolated as collection is; `in_process=True` runs it here (one CuPy
import for many kernels: `scripts/device_data_dependence.py`). Blocks: given, or up to `n_blocks`
launchable candidates spread over the thread counts (`worker.spread_blocks`: the spec's default
block first). The verdict (`judge`) is a pure function of the timings, tested on the CPU.
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.core.errors import CollectError, DataDependenceWarning, KlaraptorError
from klaraptor.core.types import Block, DataSize

if TYPE_CHECKING:
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.spec import KernelSpec

DEFAULT_SEEDS = (0, 1)
N_BLOCKS = 3
FLOOR = 0.03  # never call a difference below 3 % data dependence
NOISE_FACTOR = 3.0
MODE = "datadep"  # the collection worker's mode that times the inputs (`worker.time_on_inputs`)


@dataclass(frozen=True)
class BlockVerdict:
    """One block's timings on the two inputs and whether they differ beyond the noise."""

    block: Block
    ms_a: tuple[float, ...]  # median ms of each round on input A
    ms_b: tuple[float, ...]
    effect: float  # relative difference of the two inputs' mean times
    noise: float  # the block's noise band (relative)
    threshold: float
    differs: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "block": list(self.block),
            "ms_a": list(self.ms_a),
            "ms_b": list(self.ms_b),
            "effect": self.effect,
            "noise": self.noise,
            "threshold": self.threshold,
            "differs": self.differs,
        }


@dataclass(frozen=True)
class DataDependence:
    """The verdict of `check_data_dependence` for one kernel at one size."""

    kernel: str
    D: DataSize
    seeds: tuple[int, int]
    blocks: tuple[BlockVerdict, ...]
    dependent: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def effect(self) -> float:
        """The median over the blocks of the two inputs' relative difference."""
        e = sorted(b.effect for b in self.blocks)
        return e[len(e) // 2] if len(e) % 2 else 0.5 * (e[len(e) // 2 - 1] + e[len(e) // 2])

    def message(self) -> str:
        n = sum(b.differs for b in self.blocks)
        if not self.dependent:
            return (
                f"{self.kernel}: data-oblivious at {self.D} as far as measured: two random "
                f"inputs ran {self.effect:.1%} apart (median over {len(self.blocks)} blocks; "
                f"{n} beyond their noise band)"
            )
        return (
            f"{self.kernel}: its time depends on the input data, not only on its size: at "
            f"{self.D}, two random inputs (seeds {self.seeds[0]} and {self.seeds[1]}) ran "
            f"{self.effect:.1%} apart (median over {len(self.blocks)} blocks; {n} beyond their "
            "noise band). The kernel is not data-oblivious, so blocks chosen from measurements "
            "on one input may not transfer to another (KLARAPTOR assumes data-oblivious kernels)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "D": dict(self.D.items()),
            "seeds": list(self.seeds),
            "dependent": self.dependent,
            "effect": self.effect,
            "blocks": [b.to_dict() for b in self.blocks],
            "rule": (
                f"a block differs when |mean A - mean B| / min > max({FLOOR:g}, "
                f"{NOISE_FACTOR:g} x its noise band); data-dependent when more than half differ"
            ),
            **self.info,
        }


def judge(
    kernel: str,
    D: DataSize,
    seeds: tuple[int, int],
    timings: Sequence[Mapping[str, Any]],
    *,
    floor: float = FLOOR,
    noise_factor: float = NOISE_FACTOR,
) -> DataDependence:
    """The verdict from timings: per block {"block": [x, y, z], "a": [...], "b": [...]}, each
    list the `Timer.measure` summaries (median_ms, spread) of that input's rounds."""
    if not timings:
        raise KlaraptorError(f"{kernel}: no block was timed, so data dependence cannot be judged")
    verdicts = []
    for t in timings:
        a = [float(s["median_ms"]) for s in t["a"]]
        b = [float(s["median_ms"]) for s in t["b"]]
        if not a or not b or not all(x > 0 and math.isfinite(x) for x in a + b):
            raise KlaraptorError(
                f"{kernel}: block {t['block']} has no usable timing on both inputs"
            )
        mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
        effect = abs(mean_a - mean_b) / min(mean_a, mean_b)
        spreads = [float(s.get("spread", 0.0)) for s in (*t["a"], *t["b"])]
        noise = max(
            (max(a) - min(a)) / mean_a,
            (max(b) - min(b)) / mean_b,
            *(s for s in spreads if math.isfinite(s)),
        )
        threshold = max(floor, noise_factor * noise)
        x, y, z = (int(v) for v in t["block"])
        verdicts.append(
            BlockVerdict(
                (x, y, z), tuple(a), tuple(b), effect, noise, threshold, effect > threshold
            )
        )
    dependent = sum(v.differs for v in verdicts) * 2 > len(verdicts)
    return DataDependence(kernel, D, seeds, tuple(verdicts), dependent)


def _as_block(b: Sequence[int]) -> Block:
    """A caller's block as three ints; KlaraptorError for any other shape."""
    if len(b) != 3:
        raise KlaraptorError(f"a block is (bx, by, bz), got {tuple(b)!r}")
    return (int(b[0]), int(b[1]), int(b[2]))


def check_data_dependence(
    spec: KernelSpec,
    D: Any,
    blocks: Sequence[Block] | None = None,
    *,
    options: CollectOptions | None = None,
    seeds: tuple[int, int] = DEFAULT_SEEDS,
    n_blocks: int = N_BLOCKS,
    warn: bool = True,
    in_process: bool = False,
) -> DataDependence:
    """Time a few blocks of `spec` at size `D` on two random inputs (`seeds`) and judge whether
    the kernel's time depends on its data (module docstring); warns a `DataDependenceWarning`
    when it does (unless `warn` is False). Needs the GPU; runs in a worker subprocess unless
    `in_process`."""
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.collect.jobfile import Job, write_job
    from klaraptor.collect.process import run_once, worker_command, worker_env
    from klaraptor.collect.worker import backend_name, time_on_inputs

    options = options or CollectOptions()
    if len(seeds) != 2 or seeds[0] == seeds[1]:
        raise KlaraptorError(f"the data-dependence check needs two different seeds, got {seeds}")
    if n_blocks < 1:
        raise KlaraptorError(f"n_blocks must be at least 1, got {n_blocks}")
    size = spec.size(D)
    backend_name(spec, options)  # an unknown backend fails here
    picked = None if blocks is None else [_as_block(b) for b in blocks]
    seeds2 = (int(seeds[0]), int(seeds[1]))
    if in_process:
        job = Job(MODE, spec, [], options, time.time(), {})
        out = time_on_inputs(job, size, picked, seeds2, n_blocks)
    else:
        extra = {"D": size, "blocks": picked, "seeds": list(seeds2), "n_blocks": n_blocks}
        with tempfile.TemporaryDirectory(prefix="klaraptor-datadep-") as tmp:
            path, events = Path(tmp) / "datadep.job", Path(tmp) / "datadep.events.jsonl"
            write_job(
                path, mode=MODE, spec=spec, points=[], options=options, events=events, extra=extra
            )
            evs = run_once(
                worker_command(path, options.python),
                events,
                timeout_s=options.startup_timeout_s + options.timeout_s,
                env=worker_env(),
            )
        got = [e for e in evs if e.get("event") == MODE]
        if not got:
            raise CollectError(f"{spec.name}: the data-dependence worker reported no timings")
        out = got[-1]
    verdict = judge(spec.name, size, seeds2, out["timings"])
    verdict.info["seconds"] = float(out.get("seconds", math.nan))
    if warn and verdict.dependent:
        warnings.warn(verdict.message(), DataDependenceWarning, stacklevel=2)
    return verdict


__all__ = [
    "DEFAULT_SEEDS",
    "BlockVerdict",
    "DataDependence",
    "check_data_dependence",
    "judge",
]
