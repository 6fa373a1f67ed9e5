"""How the points of a pass are cut into chunks for the workers (GPU-free, deterministic).

The rule:
- a chunk holds about `target` points, `target = ceil(points / (workers * per_worker))` capped
  at `max_points`: several chunks per GPU, so a worker that finishes early takes more work and
  one lost worker costs at most one chunk;
- the points of one size stay together when they fit in a chunk (the measuring subprocess
  builds arguments and reference outputs once per size); a size with more points is cut into
  near-equal pieces, and small sizes share a chunk (first fit, largest first);
- chunks are handed out largest first (by points, then by data size: a bigger D costs at
  least as much per point, with longer kernels, arguments and reference outputs), one at a time
  to whichever GPU is idle (dynamic list scheduling, LPT order), which keeps every GPU busy and
  the work per GPU within one chunk of the others;
- the last chunks handed out are cut smaller (the last one per GPU, when it holds at least
  `TAIL_MIN` points, into `TAIL_SPLIT` pieces), so that the GPUs finish together: with whole
  chunks to the end, 4 GPUs ended 510 points (2 chunks) apart and the timing pass took 13 % more
  than a quarter of one GPU's (2DCONV, 8,364 points, H200 x4, 641866e).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from klaraptor.collect.worker import Point

PER_WORKER = 4
MAX_POINTS = 256
TAIL_SPLIT = 4
TAIL_MIN = 32


def chunk_target(
    n_points: int, n_workers: int, *, per_worker: int = PER_WORKER, max_points: int = MAX_POINTS
) -> int:
    """Points per chunk for `n_points` over `n_workers` GPUs."""
    if n_points <= 0:
        return 1
    want = math.ceil(n_points / (max(1, n_workers) * max(1, per_worker)))
    return max(1, min(max_points, want))


def partition(
    points: Sequence[Point],
    n_workers: int,
    *,
    target: int | None = None,
    per_worker: int = PER_WORKER,
    max_points: int = MAX_POINTS,
) -> list[list[Point]]:
    """The chunks of `points`, in the order they are handed out (see the module docstring).

    Every point is in exactly one chunk; each chunk's points are ordered by size, then id.
    """
    if not points:
        return []
    cap = target or chunk_target(
        len(points), n_workers, per_worker=per_worker, max_points=max_points
    )
    by_size: dict[tuple[int, ...], list[Point]] = {}
    for p in sorted(points, key=lambda p: (p.D.values(), p.id)):
        by_size.setdefault(p.D.values(), []).append(p)
    pieces: list[list[Point]] = []
    for group in by_size.values():
        k = math.ceil(len(group) / cap)
        pieces += [[group[i] for i in idx] for idx in np.array_split(np.arange(len(group)), k)]
    # First fit, largest piece first (more points, then larger D); deterministic.
    pieces.sort(key=lambda piece: (-len(piece), _larger_first(piece), piece[0].id))
    bins: list[list[Point]] = []
    for piece in pieces:
        for b in bins:
            if len(b) + len(piece) <= cap:
                b.extend(piece)
                break
        else:
            bins.append(list(piece))
    for b in bins:
        b.sort(key=lambda p: (p.D.values(), p.id))
    bins.sort(key=lambda b: (-len(b), _larger_first(b), b[0].id))
    if n_workers > 1 and len(bins) > n_workers:
        tail = [b for b in bins[-n_workers:] if len(b) >= TAIL_MIN]
        kept = [b for b in bins if not any(b is t for t in tail)]
        cut = [
            [b[i] for i in idx]
            for b in tail
            for idx in np.array_split(np.arange(len(b)), TAIL_SPLIT)
        ]
        bins = sorted(kept + cut, key=lambda b: (-len(b), _larger_first(b), b[0].id))
    return bins


def _larger_first(chunk: Sequence[Point]) -> tuple[int, ...]:
    """A sort key putting chunks with larger data sizes first."""
    return tuple(-v for v in max(p.D.values() for p in chunk))
