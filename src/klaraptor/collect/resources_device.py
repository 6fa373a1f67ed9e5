"""The GPU side of klaraptor.collect.resources: runs the kernels and records raw numbers.

Run as a child process (`python -m klaraptor.collect.resources_device --out RAW.jsonl NAME...`) by
`resources.collect_raw`: each benchmark appends a "start" line, then a "done" line with its raw
data or an "error" line, so a crash or a hang costs only that benchmark. Nothing is analysed
here; the definitions and the analysis are in resources.py.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.collect.resources import (
    CHAINS_PER_THREAD,
    ISSUE_STEP_OPCODES,
    OPTIONS,
    PIPES,
    REQUEST_BYTES,
    WARPS_PER_BLOCK,
    ResourceConfig,
    chase_links,
    source,
)

STREAM_THREADS = 256  # kp_stream's __launch_bounds__(256, 8)
STREAM_BLOCKS_PER_SM = 8


class Device:
    """Compiled kernels, the device's limits and scratch buffers."""

    def __init__(self, config: ResourceConfig, device_id: int = 0) -> None:
        from klaraptor.backends.cupy_backend import CupyBackend
        from klaraptor.device.profile import query_device

        be = CupyBackend()
        self.be = be
        self.cp = be.module()
        self.cfg = config
        self.prof = query_device(device_id)
        self.src = source()
        self.rng = np.random.default_rng(config.seed)
        cp = self.cp
        n_sm = self.prof.sm_count
        self.out = cp.zeros(max(n_sm, 2), dtype=cp.int64)
        self.smid = cp.zeros(max(n_sm, 1), dtype=cp.uint32)
        # More than half the SM's shared memory: one gap-kernel block per SM.
        self.one_block_smem = self.prof.smem_per_sm // 2
        if self.one_block_smem > self.prof.smem_per_block_optin:
            raise RuntimeError("cannot force one block per SM with shared memory on this GPU")
        self._flush: Any = None
        self._flush_value = 0
        self._stream_buf: Any = None

    def kernel(self, name: str, unroll: int | None = None) -> Any:
        u = self.cfg.unrolls[0] if unroll is None else unroll
        return self.be.compile(self.src, name, (*OPTIONS, f"-DKP_U={u}"))

    def flush_l2(self) -> None:
        if self._flush is None:
            self._flush = self.cp.empty(2 * self.prof.l2_bytes, dtype=self.cp.uint8)
        self._flush_value = (self._flush_value + 1) % 251
        self._flush.fill(self._flush_value)
        self.be.synchronize("L2 flush")

    def stream_buffer(self, nbytes: int) -> Any:
        """One reusable buffer of at least `nbytes` (the DRAM stream, the chases)."""
        if self._stream_buf is None or self._stream_buf.nbytes < nbytes:
            self._stream_buf = None
            self.be.free_memory()
            self._stream_buf = self.cp.zeros(nbytes // 4, dtype=self.cp.uint32)
        return self._stream_buf


# -- chain kernels -------------------------------------------------------------------------------


def _pipe_args(d: Device, name: str, iters: int, threads: int) -> tuple[Any, ...]:
    cp = d.cp
    if name == "smem":
        sink = cp.zeros(d.prof.sm_count * threads, dtype=cp.uint32)
        return (np.uint32(d.cfg.smem_words), np.int32(iters), np.int32(0), d.out, d.smid, sink)
    if name == "issue":
        sink = cp.zeros(d.prof.sm_count * threads, dtype=cp.float32)
        return (
            np.float32(0.5),
            np.float32(0.999),
            np.uint32(0x9E3779B9),
            np.uint32(0x7F4A7C15),
            np.int32(iters),
            np.int32(0),
            d.out,
            d.smid,
            sink,
        )
    b = PIPES[name]
    dt = np.dtype(b.dtype)
    sink = cp.zeros(d.prof.sm_count * threads, dtype=dt)
    return (dt.type(b.p), dt.type(b.q), np.int32(iters), np.int32(0), d.out, d.smid, sink)


def _timed(d: Device, fn: Any, grid: int, block: int, args: tuple[Any, ...], smem: int) -> list:
    """Warm-up launch, then `launch_repeats` launches: clock64 cycles of each block per launch."""
    d.be.opt_in_dynamic_smem(fn, smem)
    runs = []
    for i in range(d.cfg.launch_repeats + 1):
        d.be.launch(fn, (grid, 1, 1), (block, 1, 1), args, shared_mem=smem)
        d.be.synchronize(f"{fn.name}")
        if i > 0:
            runs.append((d.out[:grid].get().tolist(), d.smid[:grid].get().tolist()))
    return runs


def run_chain_pair(d: Device, name: str, lat_kernel: str, thr_kernel: str) -> dict[str, Any]:
    """Both unroll variants of a latency kernel (1 warp) and a gap kernel (1 block per SM)."""
    cfg, n_sm = d.cfg, d.prof.sm_count
    per_step = len(ISSUE_STEP_OPCODES) if name == "issue" else PIPES[name].per_step
    chains = 1 if name == "issue" else CHAINS_PER_THREAD
    lat_smem = 4 * cfg.smem_words if name == "smem" else 0
    lat, thr = [], []
    for u in cfg.unrolls:
        runs = _timed(
            d, d.kernel(lat_kernel, u), 1, 32, _pipe_args(d, name, cfg.lat_iters, 32), lat_smem
        )
        lat.append({"unroll": u, "iters": cfg.lat_iters, "cycles": [r[0][0] for r in runs]})
        threads = 32 * WARPS_PER_BLOCK
        runs = _timed(
            d,
            d.kernel(thr_kernel, u),
            n_sm,
            threads,
            _pipe_args(d, name, cfg.thr_iters, threads),
            d.one_block_smem,
        )
        thr.append(
            {
                "unroll": u,
                "iters": cfg.thr_iters,
                "cycles": [r[0] for r in runs],
                "smid": runs[-1][1],
            }
        )
    return {
        "kind": "pipe",
        "per_step": per_step,
        "chains": chains,
        "warps": WARPS_PER_BLOCK,
        "lat": lat,
        "thr": thr,
    }


def bench_pipe(name: str) -> Callable[[Device], dict[str, Any]]:
    def run(d: Device) -> dict[str, Any]:
        return run_chain_pair(d, name, f"kp_lat_{name}", f"kp_thr_{name}")

    return run


def bench_sfu(d: Device) -> dict[str, Any]:
    raw = run_chain_pair(d, "ex2", "kp_lat_ex2", "kp_thr_ex2")
    raw["also"] = {"rsq": run_chain_pair(d, "rsq", "kp_lat_rsq", "kp_thr_rsq")}
    return raw


def bench_issue(d: Device) -> dict[str, Any]:
    return run_chain_pair(d, "issue", "kp_issue_mix", "kp_issue_mix")


# -- memory ------------------------------------------------------------------------------------


def _write_chase(d: Device, buf: Any, lines: np.ndarray) -> int:
    """Link `lines` of `buf` into a cycle (see resources.chase_links); the first line's address."""
    idx, val = chase_links(int(buf.data.ptr), lines)
    buf.view(d.cp.uint64)[d.cp.asarray(idx)] = d.cp.asarray(val)
    d.be.synchronize("chase setup")
    return int(buf.data.ptr) + int(lines[0]) * REQUEST_BYTES


def _chase(d: Device, start: Any, steps: int, kernel: str = "kp_chase_warp") -> dict[str, float]:
    """One warp's timed chase: `start` is the first address (kp_chase_warp) or the device array
    of each lane's first address (kp_chase_scatter)."""
    sink = d.cp.zeros(32, dtype=d.cp.uint64)
    first = np.uint64(start) if isinstance(start, int) else start
    d.be.launch(
        d.kernel(kernel), (1, 1, 1), (32, 1, 1), (first, np.int32(steps), np.int32(0), d.out, sink)
    )
    d.be.synchronize(f"pointer chase ({kernel})")
    cycles, ns = (int(v) for v in d.out[:2].get())
    return {"cycles": cycles, "ns": ns}


def _all_sms(d: Device, kernel: str, first_args: tuple[Any, ...], flush: bool) -> list[float]:
    """Event times (ms) of `kernel` on 8 blocks of 256 threads per SM, args `first_args` then
    (flag 0, sink); one untimed run first (it warms clocks, TLB and, for the L2, the cache)."""
    cp = d.cp
    fn = d.kernel(kernel)
    blocks = d.prof.sm_count * STREAM_BLOCKS_PER_SM
    sink = cp.zeros(blocks * STREAM_THREADS, dtype=cp.uint32)
    args = (*first_args, np.int32(0), sink)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(d.cfg.stream_repeats + 1):
        if flush:
            d.flush_l2()
        start.record()
        d.be.launch(fn, (blocks, 1, 1), (STREAM_THREADS, 1, 1), args)
        end.record()
        end.synchronize()
        if i > 0:
            times.append(float(cp.cuda.get_elapsed_time(start, end)))
    return times


def _stream(d: Device, buf: Any, rows: int, laps: int, flush: bool) -> list[float]:
    return _all_sms(d, "kp_stream", (buf, np.int32(rows), np.int32(laps)), flush)


def _stream_shape(d: Device) -> tuple[int, int]:
    """(warps in the stream grid, bytes per row)."""
    warps = d.prof.sm_count * STREAM_BLOCKS_PER_SM * STREAM_THREADS // 32
    return warps, warps * 8 * REQUEST_BYTES


def bench_l2(d: Device) -> dict[str, Any]:
    """The L2's latency (a pointer chase) and its gap for coalesced requests: 8 whole-line
    loads per warp and lap, every request its own line, in the L2-resident window the scattered
    benchmark uses (kp_l2_lines, kp_scatter's addresses); `rows` 1 for `stream_gap`."""
    cfg = d.cfg
    n_lines = _l2_window_lines(cfg)
    warps, row_bytes = _stream_shape(d)
    buf = d.stream_buffer(max(cfg.chase_l2_bytes, row_bytes))
    start = _write_chase(d, buf, d.rng.permutation(n_lines))
    _chase(d, start, n_lines)  # loads every line into L2
    samples = [_chase(d, start, n_lines) for _ in range(cfg.chase_l2_laps)]
    variants = _l2_window_laps(d, buf, n_lines, "kp_l2_lines")
    return {
        "kind": "memory",
        "chase": {"steps": n_lines, "bytes": cfg.chase_l2_bytes, "samples": samples},
        "stream": {
            "variants": variants,
            "warps": warps,
            "sm_count": d.prof.sm_count,
            "row_bytes": row_bytes,
        },
    }


# Lines a lap of kp_scatter moves on in the L2-resident window: a short step, so consecutive
# laps touch different lines of the same warmed window.
L2_SCATTER_LAP_LINES = 97 * 256


def _l2_window_lines(cfg: ResourceConfig) -> int:
    """Lines of the L2-resident window that kp_scatter and kp_l2_lines wrap in (a power of
    two: they mask the line index)."""
    n_lines = cfg.chase_l2_bytes // REQUEST_BYTES
    if n_lines & (n_lines - 1):
        raise ValueError("chase_l2_bytes / 128 must be a power of two (the L2 window)")
    return n_lines


def _l2_window_laps(d: Device, buf: Any, n_lines: int, kernel: str) -> list[dict[str, Any]]:
    """`kernel` (kp_scatter's arguments) timed at each of `stream_l2_laps` laps in the warmed
    L2 window, as `stream_gap` reads them (8 requests per warp and lap, `rows` 1)."""
    return [
        {
            "rows": 1,
            "laps": laps,
            "ms": _scatter(d, buf, n_lines, laps, L2_SCATTER_LAP_LINES, False, kernel=kernel),
        }
        for laps in d.cfg.stream_l2_laps
    ]


def _scatter(
    d: Device,
    buf: Any,
    window_lines: int,
    laps: int,
    lap_lines: int,
    flush: bool,
    kernel: str = "kp_scatter",
) -> list[float]:
    args = (buf, np.uint32(window_lines), np.uint32(lap_lines), np.int32(laps))
    return _all_sms(d, kernel, args, flush)


def _scatter_chase(d: Device, buf: Any, order: np.ndarray) -> tuple[Any, int]:
    """(32 lane starts spread evenly along the chase cycle `order`, steps each lane can take
    within its own stretch of it) for kp_chase_scatter; the links must be written already."""
    step = len(order) // 32
    base = int(buf.data.ptr)
    starts = d.cp.asarray(
        [base + int(order[lane * step]) * REQUEST_BYTES for lane in range(32)],
        dtype=d.cp.uint64,
    )
    return starts, step - 1


def bench_l2_scatter(d: Device) -> dict[str, Any]:
    """The L2 under scattered warp requests: 32 lines of one sector each (kp_scatter,
    kp_chase_scatter), in the same L2-resident window as `bench_l2`."""
    cfg = d.cfg
    n_lines = _l2_window_lines(cfg)
    warps, _ = _stream_shape(d)
    buf = d.stream_buffer(cfg.chase_l2_bytes)
    order = d.rng.permutation(n_lines)
    _write_chase(d, buf, order)
    starts, steps = _scatter_chase(d, buf, order)
    _chase(d, starts, steps, "kp_chase_scatter")  # loads every line into L2
    samples = [_chase(d, starts, steps, "kp_chase_scatter") for _ in range(cfg.chase_l2_laps)]
    variants = _l2_window_laps(d, buf, n_lines, "kp_scatter")
    # The same addresses written (kp_scatter_store), after the loads (the window stays warm):
    # the gap of a scattered store, which the L2 serves at about half the rate of a scattered
    # load (H200, 2026-11-29: 108 against 49 cycles per request per SM).
    stores = _l2_window_laps(d, buf, n_lines, "kp_scatter_store")
    return {
        "kind": "memory",
        "chase": {"steps": steps, "bytes": cfg.chase_l2_bytes, "samples": samples},
        "stream": {"variants": variants, "warps": warps, "sm_count": d.prof.sm_count},
        "store_stream": {"variants": stores, "warps": warps, "sm_count": d.prof.sm_count},
        "lines_per_request": 32,
    }


def _window_lines(cfg: ResourceConfig) -> int:
    """Lines per DRAM chase window; raises when a chase's steps do not fit one."""
    window_lines = cfg.chase_window_bytes // REQUEST_BYTES
    if cfg.chase_dram_steps + 1 > window_lines:
        raise ValueError("chase_dram_steps must be below the lines per window")
    return window_lines


def _dram_windows(d: Device, buf: Any) -> Iterator[np.ndarray]:
    """Each DRAM chase's lines: chase_dram_steps + 1 fresh random lines of one window, the
    chase_dram_windows windows spread over `buf` (within the TLB's reach each)."""
    cfg = d.cfg
    window_lines = _window_lines(cfg)
    spacing = (buf.nbytes // REQUEST_BYTES) // cfg.chase_dram_windows
    for w in range(cfg.chase_dram_windows):
        yield d.rng.permutation(window_lines)[: cfg.chase_dram_steps + 1] + w * spacing


def bench_dram(d: Device) -> dict[str, Any]:
    cfg = d.cfg
    warps, row_bytes = _stream_shape(d)
    rows_max = max(cfg.stream_dram_rows)
    _window_lines(cfg)
    buf = d.stream_buffer(
        max(rows_max * row_bytes, cfg.chase_dram_windows * cfg.chase_window_bytes)
    )
    variants = [
        {"rows": rows, "laps": 1, "ms": _stream(d, buf, rows, 1, flush=True)}
        for rows in cfg.stream_dram_rows
    ]
    samples = []
    for lines in _dram_windows(d, buf):
        start = _write_chase(d, buf, lines)
        d.flush_l2()
        samples.append(_chase(d, start, cfg.chase_dram_steps))
    return {
        "kind": "memory",
        "chase": {"steps": cfg.chase_dram_steps, "samples": samples},
        "stream": {
            "variants": variants,
            "warps": warps,
            "sm_count": d.prof.sm_count,
            "row_bytes": row_bytes,
        },
    }


def bench_dram_scatter(d: Device) -> dict[str, Any]:
    """DRAM under scattered warp requests: 32 lines of one sector each. Latency: one warp, each
    lane chasing its own pointer through fresh random lines (the windows of `bench_dram`, the
    L2 flushed before each), so a step waits for the slowest of 32 lines from DRAM. Gap: every
    SM's kp_scatter over a window past the L2, each lap on lines no earlier lap touched (flushed
    before each run), `stream_dram_scatter_laps` laps."""
    cfg = d.cfg
    warps, _ = _stream_shape(d)
    lap_lines = warps * 256
    laps_max = max(cfg.stream_dram_scatter_laps)
    window = 1 << max(int(np.ceil(np.log2(lap_lines * laps_max))), 1)
    window_lines = _window_lines(cfg)
    buf = d.stream_buffer(max(window, cfg.chase_dram_windows * window_lines) * REQUEST_BYTES)
    samples, steps = [], 0
    for lines in _dram_windows(d, buf):
        _write_chase(d, buf, lines)
        starts, steps = _scatter_chase(d, buf, lines)
        d.flush_l2()
        samples.append(_chase(d, starts, steps, "kp_chase_scatter"))
    variants = [
        {"rows": 1, "laps": laps, "ms": _scatter(d, buf, window, laps, lap_lines, flush=True)}
        for laps in cfg.stream_dram_scatter_laps
    ]
    # The same fresh lines written (kp_scatter_store, flushed first): DRAM takes a scattered
    # store at about a third of a scattered load's rate (H200, 2026-11-29: 386 against 140
    # cycles a request per SM, `experiments/device_dram_scatter_store_check.py`).
    stores = [
        {
            "rows": 1,
            "laps": laps,
            "ms": _scatter(d, buf, window, laps, lap_lines, True, kernel="kp_scatter_store"),
        }
        for laps in cfg.stream_dram_scatter_laps
    ]
    return {
        "kind": "memory",
        "chase": {"steps": steps, "samples": samples},
        "stream": {"variants": variants, "warps": warps, "sm_count": d.prof.sm_count},
        "store_stream": {"variants": stores, "warps": warps, "sm_count": d.prof.sm_count},
        "lines_per_request": 32,
    }


def bench_launch(d: Device) -> dict[str, Any]:
    """Event times of the empty kernel: one block per SM, and two large grids per block size.

    Each timed launch waits behind `kp_hold` (about `hold_us`), so the host has queued it and its
    end event before the GPU starts it: the events time the GPU alone."""
    cp, cfg, n_sm = d.cp, d.cfg, d.prof.sm_count
    empty, hold = d.kernel("kp_empty"), d.kernel("kp_hold")
    sink = cp.zeros(1, dtype=cp.int32)
    hold_cycles = np.int64(cfg.hold_us * d.prof.sm_clock_mhz)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def times(grid: int, threads: int) -> list[float]:
        out = []
        for i in range(cfg.dispatch_repeats + 1):
            d.be.launch(hold, (1, 1, 1), (1, 1, 1), (hold_cycles,))
            start.record()
            d.be.launch(empty, (grid, 1, 1), (threads, 1, 1), (np.int32(0), sink))
            end.record()
            end.synchronize()
            if i > 0:  # the first launch loads the module
                out.append(float(cp.cuda.get_elapsed_time(start, end)))
        return out

    grids = [n_sm * w for w in cfg.dispatch_waves]
    return {
        "kind": "dispatch",
        "sm_count": n_sm,
        "one_per_sm": times(n_sm, cfg.dispatch_threads[0]),
        "variants": [
            {"threads": t, "grids": grids, "ms": [times(g, t) for g in grids]}
            for t in cfg.dispatch_threads
        ],
    }


RUNNERS: dict[str, Callable[[Device], dict[str, Any]]] = {
    "fp32": bench_pipe("fp32"),
    "fp64": bench_pipe("fp64"),
    "sfu": bench_sfu,
    "alu": bench_pipe("alu"),
    "imad": bench_pipe("imad"),
    "smem": bench_pipe("smem"),
    "issue": bench_issue,
    "l2": bench_l2,
    "l2_scatter": bench_l2_scatter,
    "dram": bench_dram,
    "dram_scatter": bench_dram_scatter,
    "launch": bench_launch,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--config", default="{}")
    ap.add_argument("names", nargs="+")
    a = ap.parse_args(argv)
    cfg_dict = json.loads(a.config)
    # JSON gives lists where the fields are tuples; the values are otherwise as written
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in cfg_dict.items()
    }
    cfg = ResourceConfig(**fields)

    def emit(event: dict[str, Any]) -> None:
        with a.out.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")

    from klaraptor.backends.cupy_backend import CupyBackend

    cp = CupyBackend().module()
    with cp.cuda.Device(a.device):
        d = Device(cfg, a.device)
        for name in a.names:
            emit({"event": "start", "name": name})
            t0 = time.monotonic()
            try:
                raw = RUNNERS[name](d)
                emit({"event": "done", "name": name, "raw": raw, "seconds": time.monotonic() - t0})
            except Exception:  # noqa: BLE001 - recorded, the next benchmark still runs
                emit(
                    {
                        "event": "error",
                        "name": name,
                        "error": traceback.format_exc()[-3000:],
                        "seconds": time.monotonic() - t0,
                    }
                )
                if not d.be.context_alive():
                    return 3  # a sticky CUDA error: the parent continues in a new process
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
