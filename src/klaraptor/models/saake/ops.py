"""What every SASS instruction costs in the emulator: which resources it occupies (gap) and how
long its result takes (latency), in terms of the nine measured resources of the device profile.

The resources (`RESOURCES`, `klaraptor.collect.resources` measures a latency and a gap for each):

| resource | instructions                                                   | gap per warp instruction    |
|----------|----------------------------------------------------------------|-----------------------------|
| fp32     | FFMA, FADD, FMUL, HFMA2, ... (FMA pipe, floating point)         | 1                           |
| imad     | IMAD, IMUL, IDP, VIADD (FMA pipe, integer; VIADD by counters)   | 1                           |
| alu      | integer/logic/compare/select/move/predicate, F2FP (ALU pipe)    | 1                           |
| fp64     | DADD, DFMA, DMUL, DSETP                                         | 1                           |
| sfu      | MUFU and the XU conversions (F2I, I2F, F2F, FRND)               | 1                           |
| smem     | shared-memory accesses, and the L1/LSU data path of every       | bank conflicts (shared);    |
|          | global/local access (a wavefront per cycle)                     | wavefronts(s) for s sectors |
| l2       | L1 misses of global/local accesses                              | (1 - h1) max(s/4, q L)      |
|          |                                                                 | (loads), max(s/4, q L)      |
| dram     | the part of the L2 traffic that goes to DRAM                    | f_dram x (the l2 bytes s/4) |
| issue    | every instruction (the warp schedulers)                          | 1                           |

Latencies: compute instructions take their resource's latency; a shared-memory load lat_smem; a
global load the mix h1 lat_smem + (1 - h1)(h2 lat_l2 + (1 - h2) lat_dram) (L1 hits at the
shared-memory latency, the same SRAM); atomics lat_l2; constant loads (LDC) and special
registers (S2R) lat_smem (their caches sit beside L1; they occupy no modelled pipe); control,
uniform-datapath and dependency-barrier instructions only the issue latency. h1 = L1 hit rate
of global loads, h2 = L2 hit rate of reads, f_dram = DRAM bytes / L1-to-L2 bytes, s = sectors
per request: from the counters (`MemoryParams`), or none of them (every access a coalesced
DRAM access: h1 = h2 = 0, f_dram = 1, s = 4) for the model "without the cache term".

wavefronts(s): the cycles the L1's data stage needs for a request. It reads one sector from
each of the four 32-B slots of a line per cycle, so a request costs the largest number of its
sectors in one slot (`coalescing.l1_wavefronts`, measured: 8.6-9.0 cycles for 32 lines spread
over the four slots, 32.1-32.3 for 32 lines in one slot). The static analysis gives that number
exactly. The counters give only sectors per request (averaged over a kernel's loads): s <= 4 is
one line (a coalesced warp of 4-byte words); beyond, every sector is taken to sit in the same
slot of its own line, the pattern of row-per-thread accesses with rows a multiple of 128 B
(e.g. polybench.atax.k1 at N = 1024, block 256: 16.5 sectors per load on average, 32 for A and
1 for x, 4430 cycles per 16-step iteration on the H200 against 8 warps x 32 loads x 16.5 = 4224
predicted). Other strides are over-charged by this rule, up to 4 times.

Scattered requests (`ScatterCost`): a request that touches L lines (L = wavefronts(s), or the
static analysis's lines) needs a tag lookup per line, so the L2 serves it at no less than q L
coalesced-request gaps, q = gap_l2_scatter / 32 / gap_l2 (the profile's microbenchmark of 32
one-sector lines a request; 0.37 on the H200). Without the l2_scatter figures q = 0 and
requests cost their bytes alone. A store's q is its own benchmark's (gap_l2_scatter_store, the
same addresses written: 0.79 on the H200, a partly written sector costs the L2 more than a read
one), the load's where a profile lacks it. The part of a store that goes to DRAM costs it the
larger of its bytes and q_d L, q_d = gap_dram_scatter_store / 32 / gap_dram (1.7 on the H200:
fresh lines written one sector each cost DRAM 2.7 times as much as read); a load's DRAM share
stays its bytes (charging loads per line too was worse at the training sizes,
`experiments/notes/saake_stores.md`).
The slowest of the lines in flight (`op_tails`, `slowest_extra`): lines sent to the L2 at once go
to different L2 slices (half of them in the far partition of Hopper's L2) and return at
different times; a warp that waits on all of them waits for the slowest. lat_l2 is the mean of
one line at a time (a chase); the l2_scatter chase waits on 32 lines at a time and takes
lat_l2_scatter (362 against 290 cycles on the H200), the dram_scatter chase 1125 against 705.
Each line's latency is taken as its level's fixed part plus an exponential delay of scale
theta, so the slowest of k lines returns theta (H_k - 1) after the mean, H_k the k-th harmonic
number (`slowest_extra`: 0 for k <= 1, 0.5 for 2, 2.38 for 16, 3.06 for 32), and
theta = (lat_scatter - lat) / (H_32 - 1): 24 cycles for the L2, 137 for DRAM on the H200. The
law was chosen on the microbenchmark alone (scripts/device_slowest_line.py, one warp of k lanes
chasing k lines, k = 1 ... 32; `benchmarks/results/h200/resources/slowest_line_7b85694/`): the
measured extra time of the slowest grows linearly in log k, as the exponential law's does
(DRAM 83, 154, 244, 345, 463 cycles at k = 2 ... 32; the law from k = 32 gives 76, 164, 260,
360, 463; the L2 9.5 ... 82 against 13 ... 82), where a normal law's flattens (DRAM 126, 231,
318, 396, 463; L2 22 ... 82). The emulator counts, at each global load, the lines its warp has
in flight (this load's included, each weighted by the L1 miss rate) and adds
miss x theta x (H_k - 1) to the load's latency: the first load of a burst gets the mean, the
k-th the slowest of k. This replaces a linear (L - 1) x 2.4 cycles for the lines of one request,
which gave the 32-line request the same time but a burst of 16 coalesced loads (a column walk
unrolled 16 times) nothing. Without a dram_scatter figure DRAM takes the L2's theta (a DRAM
access crosses the same L2: a lower bound).

An opcode the classification table does not know (class "unknown") is emulated as an ALU
instruction and reported (`unknown_opcodes`), so a new compiler degrades the model instead of
breaking the build.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from klaraptor.isa.analysis import KernelISA

RESOURCES: tuple[str, ...] = (
    "fp32",
    "fp64",
    "sfu",
    "alu",
    "imad",
    "smem",
    "issue",
    "l2",
    "dram",
    "launch",  # no instruction: the block dispatcher (emulate.py charges it per block)
)
R = {r: i for i, r in enumerate(RESOURCES)}

# Op kinds (what decides the latency and the demands).
COMPUTE, SHARED, GLOAD, GSTORE, GATOMIC, CONST, SREG, ISSUE_ONLY, BARRIER = range(9)
_KIND_NAMES = ("compute", "shared", "gload", "gstore", "gatomic", "const", "sreg", "issue", "bar")

_FP32_OPS = frozenset(
    "FADD FADD32I FFMA FFMA32I FMUL FMUL32I FSWZADD HADD2 HADD2_32I HFMA2 HFMA2_32I HMUL2 "
    "HMUL2_32I".split()
)
_IMAD_OPS = frozenset("IMAD IMAD32I IMUL IMUL32I IDP IDP4A VIADD".split())


@dataclass(frozen=True)
class StaticOp:
    """The emulator's view of one SASS instruction."""

    kind: int
    resource: int  # for COMPUTE: the index in RESOURCES; else -1
    unknown: bool = False

    @property
    def kind_name(self) -> str:
        return _KIND_NAMES[self.kind]


def static_op(opcode: str, cls: str, pipe: str | None) -> StaticOp:
    """Map one instruction (opcode, classification-table class and pipe) to its StaticOp."""
    if cls in ("global_load", "local_load", "texture"):
        return StaticOp(GLOAD, -1)
    if cls in ("global_store", "local_store"):
        return StaticOp(GSTORE, -1)
    if cls in ("global_atomic",):
        return StaticOp(GATOMIC, -1)
    if cls in ("shared_load", "shared_store", "shared_atomic") or opcode == "SHFL":
        return StaticOp(SHARED, -1)
    if cls == "barrier":
        return StaticOp(BARRIER if opcode == "BAR" else ISSUE_ONLY, -1)
    if cls == "constant":
        return StaticOp(CONST if opcode == "LDC" else ISSUE_ONLY, -1)
    if cls == "special_reg" and opcode in ("S2R", "S2UR"):
        return StaticOp(SREG, -1)
    if cls in ("control", "uniform", "fence", "tma"):
        return StaticOp(ISSUE_ONLY, -1)
    if opcode in _FP32_OPS:
        return StaticOp(COMPUTE, R["fp32"])
    if opcode in _IMAD_OPS:
        return StaticOp(COMPUTE, R["imad"])
    if cls == "fp64":
        return StaticOp(COMPUTE, R["fp64"])
    if cls == "sfu" or pipe == "xu":
        return StaticOp(COMPUTE, R["sfu"])
    if cls == "tensor":
        return StaticOp(COMPUTE, R["fp32"])
    if cls == "unknown":
        return StaticOp(COMPUTE, R["alu"], unknown=True)
    return StaticOp(COMPUTE, R["alu"])


def static_ops(isa: KernelISA) -> list[StaticOp]:
    """The StaticOp of every SASS instruction of a kernel."""
    return [
        static_op(ins.opcode, c.cls, c.pipe)
        for ins, c in zip(isa.instructions, isa.sass_classes, strict=True)
    ]


def unknown_opcodes(isa: KernelISA) -> list[str]:
    """Opcodes of reachable instructions that the emulator maps by default (see the docstring)."""
    return sorted(
        {
            ins.opcode
            for ins, c, r in zip(isa.instructions, isa.sass_classes, isa.reachable, strict=True)
            if r and c.cls == "unknown"
        }
    )


@dataclass(frozen=True)
class MemoryParams:
    """Per-point memory behaviour from the counters (see the module docstring)."""

    l1_hit: float = 0.0
    l2_hit: float = 0.0
    dram_frac: float = 1.0
    ld_sectors: float = 4.0
    st_sectors: float = 4.0

    @staticmethod
    def from_metrics(m: Mapping[str, float]) -> MemoryParams:
        """From klaraptor's derived per-point metrics (missing ones stay at the no-cache value)."""

        def get(name: str, default: float, lo: float, hi: float) -> float:
            v = m.get(name)
            if v is None or not np.isfinite(v):
                return default
            return float(min(max(v, lo), hi))

        return MemoryParams(
            l1_hit=get("l1_hit_rate", 0.0, 0.0, 1.0),
            l2_hit=get("l2_hit_rate", 0.0, 0.0, 1.0),
            dram_frac=get("dram_frac", 1.0, 0.0, 1.0),
            ld_sectors=get("gld_sectors_per_req", 4.0, 1.0, 32.0) or 4.0,
            st_sectors=get("gst_sectors_per_req", 4.0, 1.0, 32.0) or 4.0,
        )


NO_CACHE = MemoryParams()


def dram_fraction(metrics: Mapping[str, float]) -> float | None:
    """DRAM bytes over L1-to-L2 bytes of one measured point (None without those counters)."""
    dram = metrics.get("dram_bytes")
    sectors = metrics.get("l2_sectors_per_warp")
    warps = metrics.get("warps")
    if dram is None or sectors is None or warps is None or sectors * warps <= 0:
        return None
    return float(min(max(dram / (32.0 * sectors * warps), 0.0), 1.0))


def wavefronts(sectors: float) -> float:
    """L1 wavefronts (128-B lines) of a request with `sectors` 32-B sectors (module docstring)."""
    return 1.0 if sectors <= 4.0 else float(sectors)


@dataclass(frozen=True)
class ScatterCost:
    """What each 128-B line of a request costs the L2 beyond its bytes (module docstring):
    `demand`, in gaps of the l2 resource; and the scale of one line's exponential delay in
    cycles (`spread` for lines the L2 serves, `dram_spread` for lines from DRAM), from which the
    slowest of several lines in flight is taken (`slowest_extra`). From the profile's l2,
    l2_scatter (and dram, dram_scatter where measured) microbenchmarks (`from_measured`)."""

    demand: float = 0.0
    spread: float = 0.0
    dram_spread: float = 0.0
    # per line of a store (None: the load's `demand`, a profile without the store figure)
    store: float | None = None
    # per line of a store that goes to DRAM, in gaps of the dram resource (0: its bytes alone)
    dram_store: float = 0.0

    @property
    def store_demand(self) -> float:
        return self.demand if self.store is None else self.store

    @staticmethod
    def from_measured(
        l2: tuple[float, float],
        scatter: tuple[float, float],
        dram: tuple[float, float] | None = None,
        dram_scatter: tuple[float, float] | None = None,
        store_gap: float | None = None,
        dram_store_gap: float | None = None,
    ) -> ScatterCost:
        """From (latency, gap) of a coalesced request and of a request of 32 one-sector lines,
        in the L2 (and through DRAM: `dram`, `dram_scatter`; without both, DRAM's spread is the
        L2's, a lower bound); `store_gap`, `dram_store_gap`: the gap of a store to 32 one-sector
        lines in the L2 and through DRAM (the latter needs `dram`)."""
        (lat_l2, gap_l2), (lat_s, gap_s) = l2, scatter
        spread = max((lat_s - lat_l2) / slowest_extra(SCATTER_LINES), 0.0)
        dram_spread = spread
        if dram is not None and dram_scatter is not None:
            dram_spread = max((dram_scatter[0] - dram[0]) / slowest_extra(SCATTER_LINES), spread)

        def per_line(gap: float) -> float:
            return max(gap / SCATTER_LINES / gap_l2, 0.0) if gap_l2 > 0 else 0.0

        dram_store = 0.0
        if dram is not None and dram_store_gap is not None and dram[1] > 0:
            dram_store = max(dram_store_gap / SCATTER_LINES / dram[1], 0.0)
        return ScatterCost(
            demand=per_line(gap_s),
            spread=spread,
            dram_spread=dram_spread,
            store=None if store_gap is None else per_line(store_gap),
            dram_store=dram_store,
        )


# Lines per warp instruction of the l2_scatter (and dram_scatter) chase.
SCATTER_LINES = 32
_EULER_GAMMA = 0.5772156649015329


def slowest_extra(k: float) -> float:
    """H_k - 1: how many exponential scales the slowest of k lines in flight returns after the
    mean of one (module docstring); 0 for k <= 1. k need not be an integer: H_k = digamma(k + 1)
    + Euler's gamma, here by H_k = H_{k+1} - 1 / (k + 1) up to k >= 6 and the asymptotic series
    there (within 1e-7; the emulator calls this once per global load, so no SciPy call)."""
    if k <= 1.0:
        return 0.0
    shift = 0.0
    while k < 6.0:
        k += 1.0
        shift += 1.0 / k
    inv = 1.0 / k
    inv2 = inv * inv
    h = math.log(k) + _EULER_GAMMA + 0.5 * inv - inv2 / 12.0 + inv2 * inv2 / 120.0
    return h - shift - 1.0


NO_SCATTER = ScatterCost()


def op_costs(
    ops: Sequence[StaticOp],
    lat: np.ndarray,
    mem: MemoryParams,
    access: Mapping[int, tuple[int, int, int]] | None = None,
    scatter: ScatterCost = NO_SCATTER,
) -> tuple[np.ndarray, np.ndarray]:
    """(latency per op, demand matrix (ops x RESOURCES) in gaps) for latencies `lat` (per
    resource, cycles) and the memory behaviour `mem`. The issue demand is 1 for every op.

    `access` gives (sectors, lines, L1 wavefronts) per op index from the static coalescing
    analysis; those ops use them instead of the counters' average sectors per request and
    `wavefronts`.
    `scatter`: the L2's cost per line touched (a request costs the L2 the larger of its
    bytes and its lines); DRAM is charged bytes alone."""
    n = len(ops)
    latency = np.zeros(n)
    demand = np.zeros((n, len(RESOURCES)))
    demand[:, R["issue"]] = 1.0
    miss = 1.0 - mem.l1_hit
    gload_lat = mem.l1_hit * lat[R["smem"]] + miss * (
        mem.l2_hit * lat[R["l2"]] + (1.0 - mem.l2_hit) * lat[R["dram"]]
    )

    def l2_dram(sectors: float, lines: float, share: float) -> tuple[float, float]:
        """(l2, dram) demand of a load; `share`: the part that leaves the L1."""
        return (
            share * max(sectors / 4.0, scatter.demand * lines),
            mem.dram_frac * share * sectors / 4.0,
        )

    def store_l2_dram(sectors: float, lines: float) -> tuple[float, float]:
        """(l2, dram) demand of a store: each line costs the L2 a scattered store's share, and
        DRAM, for the part that goes there, the larger of its bytes and its lines."""
        return (
            max(sectors / 4.0, scatter.store_demand * lines),
            mem.dram_frac * max(sectors / 4.0, scatter.dram_store * lines),
        )

    for i, op in enumerate(ops):
        k = op.kind
        if k == COMPUTE:
            latency[i] = lat[op.resource]
            demand[i, op.resource] = 1.0
        elif k == SHARED:
            latency[i] = lat[R["smem"]]
            # Bank conflicts from the static analysis, else one wavefront.
            demand[i, R["smem"]] = access[i][2] if access is not None and i in access else 1.0
        elif k == GLOAD:
            sectors, lines = mem.ld_sectors, wavefronts(mem.ld_sectors)
            wave = lines
            if access is not None and i in access:
                sectors, lines, wave = access[i]
            latency[i] = gload_lat
            demand[i, R["smem"]] = wave
            demand[i, R["l2"]], demand[i, R["dram"]] = l2_dram(sectors, lines, miss)
        elif k in (GSTORE, GATOMIC):
            latency[i] = lat[R["l2"]] if k == GATOMIC else lat[R["issue"]]
            sectors, lines = mem.st_sectors, wavefronts(mem.st_sectors)
            wave = lines
            if access is not None and i in access:
                sectors, lines, wave = access[i]
            demand[i, R["smem"]] = wave
            demand[i, R["l2"]], demand[i, R["dram"]] = (
                store_l2_dram(sectors, lines) if k == GSTORE else l2_dram(sectors, lines, 1.0)
            )
        elif k in (CONST, SREG):
            latency[i] = lat[R["smem"]]
        else:
            latency[i] = lat[R["issue"]]
    return latency, demand


def op_tails(
    ops: Sequence[StaticOp],
    mem: MemoryParams,
    access: Mapping[int, tuple[int, int, int]] | None = None,
    scatter: ScatterCost = NO_SCATTER,
) -> tuple[np.ndarray, np.ndarray]:
    """(lines each global load sends past the L1, the spread of their latency in cycles) per op
    (module docstring, "the slowest of the lines in flight"): the static analysis's lines, else
    wavefronts(s) of the counters' sectors per request, times the L1 miss rate; the spread is
    the L2's and DRAM's mixed by the L2 hit rate, times the miss rate. Zero for every other op,
    and without the l2_scatter figures."""
    n = len(ops)
    lines_out, spread = np.zeros(n), np.zeros(n)
    miss = 1.0 - mem.l1_hit
    sigma = mem.l2_hit * scatter.spread + (1.0 - mem.l2_hit) * scatter.dram_spread
    for i, op in enumerate(ops):
        if op.kind != GLOAD:
            continue
        lines = wavefronts(mem.ld_sectors)
        if access is not None and i in access:
            lines = float(access[i][1])
        lines_out[i] = miss * lines
        spread[i] = miss * sigma
    return lines_out, spread


__all__ = [
    "NO_CACHE",
    "NO_SCATTER",
    "RESOURCES",
    "MemoryParams",
    "ScatterCost",
    "StaticOp",
    "dram_fraction",
    "slowest_extra",
    "op_costs",
    "op_tails",
    "static_op",
    "static_ops",
    "unknown_opcodes",
]
