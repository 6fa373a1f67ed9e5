"""Device microbenchmarks: the measured hardware parameters of a DeviceProfile.

`measure_profile()` = `device_profile.query_device()` + these measurements (CUDA source in
`klaraptor/cuda/microbench.cu`), each with a provenance entry (method, sizes, repetitions, date,
raw numbers), cached in the store per profile key:

- `dram_bandwidth_gbs`: a grid-stride copy of 1 GiB into 1 GiB with every SM full; (bytes read
  + bytes written) / time, best of several. Runs first, which also brings the clocks up.
- `mem_latency_dram_cycles` (Mem_LD): a single thread chases pointers through cache lines in a
  random order with `__ldcg` (no L1), so each load waits for the previous one.
  Every load must miss L2 AND hit the TLB, or the number measures TLB misses rather than DRAM:
  with 2 MiB pages, chasing randomly over a whole 1 GiB buffer touches 512 pages, far beyond the
  first-level TLB's reach (≈32 MiB on Volta-class GPUs per Jia et al., 2018), so most steps would
  add a TLB miss. The chase therefore stays inside 16 MiB windows (8 pages), visits each line of
  a window at most once (random permutation, 65 536 steps of 131 072 lines), and runs after an
  L2 flush (a 2 × L2 buffer rewritten), so every load is a compulsory DRAM access with a TLB hit.
  Windows are spread over a 1 GiB buffer (different pages and channels); the median is kept. The
  same chase over the whole 1 GiB is recorded in the provenance to show the TLB effect.
- `mem_latency_l2_cycles`: the same chase over an 8 MiB buffer (≪ L2, ≫ L1), all lines loaded
  once before the timed lap, so every load hits L2.
  Both latencies are timed with `%globaltimer` (ns) and expressed in cycles of the profile's SM
  clock (`sm_clock_mhz`), the clock the models convert with, whatever clock the single-thread
  chase happened to run at (its `clock64` cycles are in the provenance).
- `departure_delay_coal` / `departure_delay_uncoal` (Hong & Kim 2009): k warps of one block (on
  one SM) each issue one load right after a barrier; the time until all are back grows with k by
  one departure delay per warp. Least-squares slope over k = 1..32 (median of repeats, fresh
  lines after an L2 flush). Coalesced: one 128-B line per warp; uncoalesced: 32 lines per warp,
  reported per transaction (slope / 32), as MWP-CWP's Mem_L_Uncoal uses it. A delay cannot be
  negative: a slope below 0 is noise around a delay too small to resolve (on the H200 the
  coalesced one is ~0 ± 1.5 cycles against ~±100 cycles of DRAM latency per launch), so it is
  floored at 0, with the raw slope and its standard error kept (`departure_slope`).
- `issue_cycles`: one warp issuing 8 independent FMA chains; SM cycles per warp instruction
  (the loop's 3 overhead instructions per 64 FMAs are included).

`measure_profile` also measures SAAKE's latency and gap per resource (`lat_<r>_cycles`,
`gap_<r>_cycles`), defined and measured in `klaraptor.collect.resources`, in child processes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.backends.cupy_backend import CupyBackend
from klaraptor.core.errors import CollectError
from klaraptor.core.provenance import commit

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.store import Store

LINE = 128  # bytes per cache line
WORDS_PER_LINE = LINE // 4
_OPTIONS = ("--std=c++17",)


@dataclass(frozen=True)
class MicrobenchConfig:
    """Sizes and repetitions of the microbenchmarks (defaults sized for a 60 MB-L2 H200)."""

    dram_buffer_bytes: int = 1 << 30
    dram_window_bytes: int = 16 << 20
    dram_windows: int = 4
    chase_steps: int = 65536
    l2_buffer_bytes: int = 8 << 20
    l2_repeats: int = 3
    departure_max_warps: int = 32
    departure_repeats: int = 5
    bandwidth_bytes: int = 1 << 30
    bandwidth_repeats: int = 5
    issue_iters: int = 4096
    issue_repeats: int = 5
    seed: int = 0


def source() -> str:
    """The CUDA source of the microbenchmark kernels."""
    return (resources.files("klaraptor") / "cuda" / "microbench.cu").read_text(encoding="utf-8")


class _Bench:
    """Compiled kernels and scratch buffers shared by the measurements."""

    def __init__(self, profile: DeviceProfile, config: MicrobenchConfig) -> None:
        be = CupyBackend()
        self.cp = be.module()
        self.be = be
        self.profile = profile
        self.cfg = config
        self.rng = np.random.default_rng(config.seed)
        src = source()
        self.k = {
            name: be.compile(src, name, _OPTIONS)
            for name in ("kp_chase", "kp_departure", "kp_copy", "kp_issue")
        }
        cp = self.cp
        self.flush_buf = cp.empty(2 * profile.l2_bytes, dtype=cp.uint8)
        self._flush_value = 0
        self.out = cp.zeros(4096, dtype=cp.int64)
        self.sink = cp.zeros(1024, dtype=cp.uint32)

    def flush_l2(self) -> None:
        self._flush_value = (self._flush_value + 1) % 251
        self.flush_buf.fill(self._flush_value)
        self.be.synchronize("L2 flush")

    # -- pointer chase ----------------------------------------------------------------------

    def _write_chain(self, buf: Any, order: np.ndarray) -> None:
        """next[order[i]] = order[i + 1], and the last entry back to the first."""
        cp = self.cp
        src = cp.asarray(order.astype(np.int64))
        dst = cp.asarray(np.roll(order, -1).astype(np.uint32))
        buf[src] = dst
        self.be.synchronize("chain setup")

    def chase(self, buf: Any, start: int, steps: int) -> tuple[float, float]:
        """(cycles, ns) per load of a `steps`-long chase from element `start`."""
        self.be.launch(
            self.k["kp_chase"],
            (1, 1, 1),
            (1, 1, 1),
            (buf, np.uint32(start), np.int32(steps), self.out, self.sink),
        )
        self.be.synchronize("pointer chase")
        cyc, ns = (int(v) for v in self.out[:2].get())
        return cyc / steps, ns / steps

    def dram_latency(self) -> tuple[float, dict[str, Any]]:
        cfg, cp = self.cfg, self.cp
        steps = cfg.chase_steps
        window_lines = cfg.dram_window_bytes // LINE
        total_lines = cfg.dram_buffer_bytes // LINE
        if steps + 1 > window_lines:
            raise CollectError("chase_steps must be below the lines per window")
        buf = cp.empty(cfg.dram_buffer_bytes // 4, dtype=cp.uint32)
        spacing = total_lines // cfg.dram_windows
        per_window: list[tuple[float, float]] = []
        for w in range(cfg.dram_windows):
            lines = self.rng.permutation(window_lines)[: steps + 1] + w * spacing
            order = lines * WORDS_PER_LINE
            self._write_chain(buf, order)
            self.flush_l2()
            per_window.append(self.chase(buf, int(order[0]), steps))
        lines = self.rng.choice(total_lines, size=steps + 1, replace=False)
        order = lines * WORDS_PER_LINE
        self._write_chain(buf, order)
        self.flush_l2()
        wide = self.chase(buf, int(order[0]), steps)
        del buf
        self.be.free_memory()
        ns = float(np.median([p[1] for p in per_window]))
        value = ns * self.profile.sm_clock_mhz / 1000.0
        return value, {
            "method": "single-thread pointer chase, __ldcg, random cache lines, L2 flushed first",
            "buffer_bytes": cfg.dram_buffer_bytes,
            "window_bytes": cfg.dram_window_bytes,
            "windows": cfg.dram_windows,
            "steps_per_window": steps,
            "statistic": "median over windows of ns per load, × sm_clock_mhz",
            "ns_per_load": [round(p[1], 2) for p in per_window],
            "clock64_cycles_per_load": [round(p[0], 1) for p in per_window],
            "effective_sm_clock_mhz": round(_clock_mhz(per_window), 1),
            "whole_buffer_ns_per_load": round(wide[1], 2),
            "whole_buffer_note": "random lines over the whole buffer: adds TLB misses",
        }

    def l2_latency(self) -> tuple[float, dict[str, Any]]:
        cfg, cp = self.cfg, self.cp
        n_lines = cfg.l2_buffer_bytes // LINE
        buf = cp.empty(cfg.l2_buffer_bytes // 4, dtype=cp.uint32)
        order = self.rng.permutation(n_lines) * WORDS_PER_LINE
        self._write_chain(buf, order)
        self.chase(buf, int(order[0]), n_lines)  # loads every line into L2
        laps = [self.chase(buf, int(order[0]), n_lines) for _ in range(cfg.l2_repeats)]
        del buf
        ns = float(np.median([p[1] for p in laps]))
        return ns * self.profile.sm_clock_mhz / 1000.0, {
            "method": "single-thread pointer chase, __ldcg, random cache lines, L2-resident",
            "buffer_bytes": cfg.l2_buffer_bytes,
            "steps": n_lines,
            "repeats": cfg.l2_repeats,
            "statistic": "median over laps of ns per load, × sm_clock_mhz",
            "ns_per_load": [round(p[1], 2) for p in laps],
            "clock64_cycles_per_load": [round(p[0], 1) for p in laps],
            "effective_sm_clock_mhz": round(_clock_mhz(laps), 1),
        }

    # -- departure delay ----------------------------------------------------------------------

    def departure(self) -> tuple[float, float, dict[str, Any]]:
        cfg, cp = self.cfg, self.cp
        kmax, reps = cfg.departure_max_warps, cfg.departure_repeats
        if kmax * reps > self.out.size:
            raise CollectError("departure_max_warps × departure_repeats exceeds the result buffer")
        ks = np.arange(1, kmax + 1)
        # Launch k reads 32 k words (coalesced) or 32 k lines (uncoalesced), plus a spacer line.
        words = 32 * 32 * reps * int(ks.sum()) + WORDS_PER_LINE * (kmax * reps + 1)
        data = cp.empty(words, dtype=cp.uint32)
        slopes: dict[int, float] = {}
        medians: dict[int, list[float]] = {}
        fits: dict[int, dict[str, Any]] = {}
        for uncoal in (0, 1):
            self.flush_l2()
            self.out.fill(0)
            offset = 0
            launch = 0
            for k in ks:
                for _ in range(reps):
                    # Fresh lines for every launch: each load is a compulsory DRAM access.
                    self.be.launch(
                        self.k["kp_departure"],
                        (1, 1, 1),
                        (32 * int(k), 1, 1),
                        (data[offset:], np.int32(uncoal), np.int32(launch), self.out, self.sink),
                    )
                    offset += 32 * int(k) * (32 if uncoal else 1) + WORDS_PER_LINE
                    launch += 1
            self.be.synchronize("departure-delay launches")
            cycles = self.out[: kmax * reps].get().reshape(kmax, reps).astype(np.float64)
            med = np.median(cycles, axis=1)
            slope, fit = departure_slope(ks, med)
            slopes[uncoal], medians[uncoal] = slope, [float(v) for v in med]
            fits[uncoal] = fit
        del data
        self.be.free_memory()
        coal = slopes[0]
        uncoal_per_tx = slopes[1] / WORDS_PER_LINE  # 32 lines per warp request
        prov = {
            "method": "k warps of one block each issue one load after a barrier; slope of "
            f"completion cycles (clock64) vs k, least squares, k = 1..{kmax}",
            "repeats": reps,
            "statistic": "median over repeats per k",
            "coalesced_cycles_by_k": [round(v, 1) for v in medians[0]],
            "uncoalesced_cycles_by_k": [round(v, 1) for v in medians[1]],
            "coalesced_fit": fits[0],
            "uncoalesced_fit": {**fits[1], "per_transaction": "slope / 32"},
        }
        return coal, uncoal_per_tx, prov

    # -- bandwidth, issue ---------------------------------------------------------------------

    def bandwidth(self) -> tuple[float, dict[str, Any]]:
        cfg, cp = self.cfg, self.cp
        n16 = cfg.bandwidth_bytes // 16
        src = cp.ones(n16 * 4, dtype=cp.float32)
        dst = cp.empty_like(src)
        threads = 256
        blocks = self.profile.sm_count * max(1, self.profile.max_threads_per_sm // threads)
        args = (src, dst, np.uint64(n16))
        fn = self.k["kp_copy"]
        for _ in range(3):  # warm-up: also raises the clocks for what follows
            self.be.launch(fn, (blocks, 1, 1), (threads, 1, 1), args)
        self.be.synchronize("copy warm-up")
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(cfg.bandwidth_repeats):
            start.record()
            self.be.launch(fn, (blocks, 1, 1), (threads, 1, 1), args)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        del src, dst
        self.be.free_memory()
        best_ms = min(times)
        gbs = 2 * n16 * 16 / (best_ms * 1e-3) / 1e9
        return gbs, {
            "method": "grid-stride float4 copy kernel, (read + written bytes) / time",
            "bytes_each_way": n16 * 16,
            "grid": blocks,
            "block": threads,
            "repeats": cfg.bandwidth_repeats,
            "statistic": "best",
            "ms": [round(t, 4) for t in times],
        }

    def issue(self) -> tuple[float, dict[str, Any]]:
        cfg, cp = self.cfg, self.cp
        sink = cp.zeros(32, dtype=cp.float32)
        args = (
            np.float32(1.0),
            np.float32(1.0001),
            np.float32(0.5),
            np.int32(cfg.issue_iters),
            self.out,
            sink,
        )
        per: list[float] = []
        for i in range(cfg.issue_repeats + 1):
            self.be.launch(self.k["kp_issue"], (1, 1, 1), (32, 1, 1), args)
            self.be.synchronize("issue-cycles kernel")
            if i > 0:  # the first run warms the instruction cache
                per.append(int(self.out[0].get()) / (cfg.issue_iters * 64))
        return min(per), {
            "method": "one warp, 8 independent FMA chains unrolled (64 FMAs per iteration); "
            "clock64 cycles / FMAs",
            "iterations": cfg.issue_iters,
            "repeats": cfg.issue_repeats,
            "statistic": "best",
            "cycles_per_inst": [round(v, 3) for v in per],
        }


def departure_slope(ks: np.ndarray, cycles: np.ndarray) -> tuple[float, dict[str, Any]]:
    """(delay per warp, fit record): the least-squares slope of completion cycles over k, floored
    at 0 (a negative delay is noise); the record keeps the raw slope and its standard error."""
    k = np.asarray(ks, dtype=np.float64)
    y = np.asarray(cycles, dtype=np.float64)
    (slope, intercept), res, *_ = np.polyfit(k, y, 1, full=True)
    dof = max(len(k) - 2, 1)
    resid_var = float(res[0]) / dof if len(res) else 0.0
    stderr = float(np.sqrt(resid_var / np.sum((k - k.mean()) ** 2)))
    fit: dict[str, Any] = {
        "slope": round(float(slope), 3),
        "intercept": round(float(intercept), 1),
        "slope_stderr": round(stderr, 3),
        "resolved": bool(slope > 2 * stderr),  # distinguishable from no delay at all
    }
    if slope < 0:
        fit["note"] = "negative slope is noise: delay floored at 0"
    return max(float(slope), 0.0), fit


def _clock_mhz(samples: list[tuple[float, float]]) -> float:
    """SM clock the chase ran at: clock64 cycles per globaltimer ns."""
    cyc = np.median([c for c, _ in samples])
    ns = np.median([n for _, n in samples])
    return float(cyc / ns * 1000.0) if ns > 0 else float("nan")


def run_microbenchmarks(
    profile: DeviceProfile,
    config: MicrobenchConfig = MicrobenchConfig(),  # noqa: B008
) -> tuple[dict[str, float], dict[str, Any]]:
    """Run every microbenchmark on the current device: (field → value, provenance)."""
    b = _Bench(profile, config)
    date = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    values: dict[str, float] = {}
    prov: dict[str, Any] = {}
    values["dram_bandwidth_gbs"], prov["dram_bandwidth_gbs"] = b.bandwidth()
    values["mem_latency_dram_cycles"], prov["mem_latency_dram_cycles"] = b.dram_latency()
    values["mem_latency_l2_cycles"], prov["mem_latency_l2_cycles"] = b.l2_latency()
    coal, uncoal, dep = b.departure()
    values["departure_delay_coal"], values["departure_delay_uncoal"] = coal, uncoal
    prov["departure_delay_coal"] = prov["departure_delay_uncoal"] = dep
    values["issue_cycles"], prov["issue_cycles"] = b.issue()
    for entry in prov.values():
        entry["date"] = date
    prov["microbench"] = {
        "date": date,
        "config": dataclasses.asdict(config),
        "cupy": getattr(b.cp, "__version__", "?"),
        "source": "klaraptor/cuda/microbench.cu",
        "commit": commit(),
    }
    return values, prov


def measure_profile(
    device_id: int = 0,
    store: Store | None = None,
    *,
    config: MicrobenchConfig = MicrobenchConfig(),  # noqa: B008 - frozen
    force: bool = False,
    resources: bool = True,
) -> DeviceProfile:
    """Device query + microbenchmarks, cached in `store` under the profile's key.

    A cached profile with every microbenchmark field is returned as is unless `force`.
    `resources`: also measure SAAKE's latency and gap per resource (klaraptor.collect.resources,
    in child processes, ~30 s); a resource benchmark that fails stays missing, with the reason
    in the provenance.
    """
    from klaraptor.device.profile import query_device

    base = query_device(device_id)
    if store is not None and not force:
        cached = store.cached_profile(base.key)
        if cached is not None and not cached.missing_microbench:
            return cached
    be = CupyBackend()
    with be.module().cuda.Device(device_id):
        values, prov = run_microbenchmarks(base, config)
    if resources:
        from klaraptor.collect.resources import measure_resources

        be.free_memory()  # the child processes need the device memory
        measured = measure_resources(base, device_id=device_id)
        values.update(measured.values)
        prov.update(measured.provenance)
    profile = base.with_microbench(provenance=prov, **values)
    if store is not None:
        store.save_profile(profile)
    return profile
