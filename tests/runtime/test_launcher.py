"""The one launcher (`runtime.launcher.Launcher`) on the CPU: online refinement through a
front-end adapter, its pinning and persistence, the cached path once pinned, streams, settle().

The adapter is the real cuda.core one (`frontends.cuda_core.CoreAdapter`, its generated launch
functions included) with cuda.core's `launch` replaced by a recorder, as in
tests/frontends/test_cuda_core.py: there is no GPU here. The timings are injected through the
launcher's `clock=` (events as sequence numbers, a time per trial); the selector, the store and
its history are real. tests/runtime/test_gpu_launch.py and tests/frontends/test_frontends_gpu.py
refine on a GPU with each front-end's own CUDA events.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from klaraptor.core.errors import LaunchError
from klaraptor.core.types import LaunchConfig
from klaraptor.frontends import cuda_core
from klaraptor.frontends.adapters import TuneAdapter
from klaraptor.runtime.adapter import EventClock, HostClock, LaunchAdapter
from klaraptor.runtime.cupy_launch import SpecAdapter
from klaraptor.runtime.launcher import Launcher, TunedKernel
from klaraptor.runtime.selector import Selector
from klaraptor.store import KernelRecord, Store
from tests import helpers as hs


class ScriptedClock:
    """Events are sequence numbers (a trial's start is even, its end the next odd one); trial i
    took `ms[i]`; `finished` says whether the GPU has completed them."""

    def __init__(self, ms: list[float]) -> None:
        self.ms = ms
        self.n = 0
        self.finished = False
        self.recorded_on: list[Any] = []

    def stream(self, stream: Any | None) -> Any:
        return 0 if stream is None else stream

    def record(self, stream: Any) -> int:
        self.recorded_on.append(stream)
        self.n += 1
        return self.n - 1

    def done(self, event: Any) -> bool:
        return self.finished

    def elapsed_ms(self, start: Any, end: Any) -> float:
        assert end == start + 1
        return self.ms[start // 2]

    def wait(self, event: Any) -> None:
        self.finished = True


class _LaunchConfig:
    def __init__(self, grid: Any = 1, block: Any = 1, shmem_size: int = 0) -> None:
        self.grid, self.block, self.shmem_size = grid, block, shmem_size


class _Array:
    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4"}


class _TorchStream:
    cuda_stream = 777


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """cuda.core's launch as a recorder of (stream, grid, block, smem, args)."""
    calls: list[tuple[Any, ...]] = []

    def launch(stream: Any, config: Any, kernel: Any, *args: Any) -> None:
        calls.append((stream, config.grid, config.block, config.shmem_size, args))

    device = SimpleNamespace(
        default_stream="default", create_stream=lambda s: f"stream {s.__cuda_stream__()[1]}"
    )
    core = SimpleNamespace(launch=launch, LaunchConfig=_LaunchConfig, Device=lambda _=0: device)
    monkeypatch.setattr(cuda_core, "cuda_core_module", lambda: core)
    return calls


def _setup(tmp_path: Path, refine: int, clock: EventClock) -> tuple[Launcher, Selector, Any]:
    spec, helper = hs.mn_spec(), hs.mn_helper()
    store = Store(tmp_path / "s.sqlite")
    store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
    selector = Selector(helper, store=store, device_key="dev", spec=spec)
    ck = cuda_core.CoreKernel(kernel="kernel", source=hs.MN_SRC, name="mn", options=())
    adapter = cuda_core.CoreAdapter(ck)
    assert isinstance(adapter, LaunchAdapter) and isinstance(adapter, TuneAdapter)
    return (
        Launcher(adapter, spec=spec, selector=selector, refine=refine, clock=clock),
        selector,
        store,
    )


def _expected(selector: Selector, D: tuple[int, int], k: int) -> list[Any]:
    chosen = selector.select(D).block
    return [chosen, *(b for b in selector.refine_blocks(D, k) if b != chosen)]


def test_refinement_times_each_candidate_then_pins_the_fastest(
    tmp_path: Path, launched: list[tuple[Any, ...]]
) -> None:
    M, N = 3000, 2000
    clock = ScriptedClock([])
    tk, selector, store = _setup(tmp_path, 4, clock)
    buf = _Array(4096)
    args = (buf, np.int32(M), np.int32(N))
    spec = hs.mn_spec()
    D = spec.size((M, N))
    model = selector.select(D)
    cands = _expected(selector, (M, N), 4)
    assert len(cands) >= 3, cands
    clock.ms = [1.0 + i for i in range(len(cands))]
    clock.ms[2] = 0.25  # the third candidate is the fastest
    for i, block in enumerate(cands):
        grid = selector.grid_for(D, block)
        smem = 4 * block[0] * block[1]
        assert tk.launch_for(*args) == LaunchConfig(model.params, block, grid, smem)
        assert tk.plan_source(*args) == "model"
        if i == 1:  # a call on a given stream is timed on that stream
            tk(*args, stream=_TorchStream())
        else:
            tk(*args)
        stream = "stream 777" if i == 1 else "default"
        assert launched[-1] == (stream, grid, block, smem, (4096, np.int32(M), np.int32(N)))
    # The events bracket each launch on its stream: the default one, the given one.
    assert clock.recorded_on[:2] == [0, 0]
    assert all(isinstance(s, _TorchStream) for s in clock.recorded_on[2:4])
    assert len(launched) == len(cands) and clock.n == 2 * len(cands)
    # The GPU has not finished: the next call launches the model's choice and pins nothing.
    tk(*args)
    assert launched[-1][2] == model.block and selector.select(D).source == "model"
    clock.finished = True
    tk(*args)  # now the fastest is pinned, and launched
    assert launched[-1][2] == cands[2] and tk.plan_for(*args)[1] == cands[2]
    sel = selector.select(D)
    assert sel.source == "refined" and sel.block == cands[2] and sel.measured_ms == 0.25
    assert tk.plan_source(*args) == "refined" and not tk._refining
    # Pinned, the plan dict holds the plain launch: no event is recorded any more.
    n = clock.n
    tk(*args)
    tk(*args, stream=_TorchStream())
    assert clock.n == n and [c[2] for c in launched[-2:]] == [cands[2]] * 2
    store.close()
    # A new process (a new Selector over the same store) starts from the refined choice.
    with Store(tmp_path / "s.sqlite") as again:
        fresh = Selector(hs.mn_helper(), store=again, device_key="dev", spec=spec)
        assert fresh.select(D).source == "refined" and fresh.select(D).block == cands[2]


def test_settle_waits_and_pins_among_the_timed(
    tmp_path: Path, launched: list[tuple[Any, ...]]
) -> None:
    clock = ScriptedClock([2.0, 1.0, 3.0])
    tk, selector, store = _setup(tmp_path, 4, clock)
    args = (_Array(1), np.int32(1500), np.int32(900))
    cands = _expected(selector, (1500, 900), 4)
    assert len(cands) >= 3
    tk(*args)
    tk(*args)  # two of the candidates timed, the others never launched
    tk.settle()
    sel = selector.select((1500, 900))
    assert sel.source == "refined" and sel.block == cands[1] and sel.measured_ms == 1.0
    assert tk.plan_for(*args)[1] == cands[1] and not tk._refining
    store.close()


def test_no_refinement_without_refine_or_a_model_choice(
    tmp_path: Path, launched: list[tuple[Any, ...]]
) -> None:
    clock = ScriptedClock([])
    tk, selector, store = _setup(tmp_path, 1, clock)
    args = (_Array(1), np.int32(3000), np.int32(2000))
    tk(*args)
    tk(*args)
    assert clock.n == 0 and [c[2] for c in launched] == [selector.select((3000, 2000)).block] * 2
    # A refined choice (from an earlier process, here fixed by hand) is not refined again.
    other = selector.refine_blocks((1200, 800), 4)[-1]
    selector.fix((1200, 800), other, 0.5)
    tk4 = Launcher(tk.adapter, spec=hs.mn_spec(), selector=selector, refine=4, clock=clock)
    tk4(_Array(1), np.int32(1200), np.int32(800))
    assert clock.n == 0 and launched[-1][2] == other
    store.close()


def test_a_failed_launch_names_the_configuration(
    tmp_path: Path, launched: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tk, selector, store = _setup(tmp_path, 0, HostClock())

    def broken(*a: Any) -> None:
        raise RuntimeError("CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(cuda_core.cuda_core_module(), "launch", broken)
    block = selector.select((3000, 2000)).block
    shown = re.escape(f"block {block}")
    with pytest.raises(LaunchError, match=rf"launch of mn \(grid .*, {shown}.*CUDA_ERROR"):
        tk(_Array(1), np.int32(3000), np.int32(2000))
    store.close()


def test_kernel_launcher_is_the_one_launcher_over_the_spec_adapter() -> None:
    from klaraptor.assemble.kernel import Kernel

    spec, helper = hs.mn_spec(), hs.mn_helper()
    kern = Kernel(helper, spec=spec, store=None, device_key="dev")
    tk = kern.launcher(refine=3)
    assert isinstance(tk, TunedKernel) and isinstance(tk, Launcher) and tk.refine == 3
    assert isinstance(tk.adapter, SpecAdapter) and isinstance(tk.adapter, LaunchAdapter)
    assert kern.launcher(refine=3) is tk and tk.spec is spec and tk.selector is kern.selector
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(tk)


def test_host_clock_times_synchronous_launches() -> None:
    clock = HostClock()
    s = clock.stream(None)
    start = clock.record(s)
    sum(range(10000))
    end = clock.record(s)
    assert clock.done(end) and clock.elapsed_ms(start, end) > 0
