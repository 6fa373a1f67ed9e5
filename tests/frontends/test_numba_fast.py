"""The Numba backend's fast launch path (`klaraptor.backends.numba_fast`, issue 33): used when it
takes the kernel, the usual `kernel[grid, block, 0, smem](*args)` when it refuses or its first
launch fails, and a launch error (not a silent switch) once it has worked. On a GPU, a real
kernel launched both ways computes the same."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from klaraptor.backends.numba_backend import NumbaBackend, NumbaCompiled
from klaraptor.core.errors import LaunchError

ROOT = Path(__file__).resolve().parents[2]


class _Dispatcher:
    """Stands in for a Numba dispatcher: records `d[grid, block, stream, smem](*args)`."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getitem__(self, cfg: tuple) -> object:
        return lambda *args: self.calls.append((cfg, args))


class _Fast:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def __call__(self, grid, block, args, smem):  # noqa: ANN001, ANN204
        if self.fail is not None:
            raise self.fail
        self.calls.append((tuple(grid), tuple(block), args, smem))


def _compiled(fast: _Fast) -> NumbaCompiled:
    return NumbaCompiled(_Dispatcher(), (), "k", fast=fast)


def test_fast_path_launches_when_it_works() -> None:
    fn = _compiled(_Fast())
    NumbaBackend().launch(fn, (4, 1, 1), (32, 1, 1), (1, 2), 0)
    assert fn.fast.calls == [((4, 1, 1), (32, 1, 1), (1, 2), 0)]
    assert fn.dispatcher.calls == [] and fn.fast_ok and not fn.fast_off


def test_a_first_fast_launch_that_fails_falls_back_for_good() -> None:
    fn = _compiled(_Fast(fail=RuntimeError("no such parameter layout")))
    be = NumbaBackend()
    be.launch(fn, (4, 1, 1), (32, 1, 1), (1,), 0)
    be.launch(fn, (8, 1, 1), (32, 1, 1), (1,), 0)
    assert [c[0] for c in fn.dispatcher.calls] == [((4, 1, 1), (32, 1, 1), 0, 0)] + [
        ((8, 1, 1), (32, 1, 1), 0, 0)
    ]
    assert "no such parameter layout" in fn.fast_off and not fn.fast_ok


def test_a_fast_failure_after_success_is_the_launchs_error() -> None:
    fast = _Fast()
    fn = _compiled(fast)
    be = NumbaBackend()
    be.launch(fn, (4, 1, 1), (32, 1, 1), (1,), 0)
    fast.fail = RuntimeError("CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(LaunchError, match=r"grid \(4, 1, 1\), block \(2048, 1, 1\).*INVALID"):
        be.launch(fn, (4, 1, 1), (2048, 1, 1), (1,), 0)
    assert fn.dispatcher.calls == []


def test_arguments_it_refuses_go_the_usual_way() -> None:
    from klaraptor.backends.numba_fast import FastLaunchUnavailable

    fast = _Fast()
    fn = _compiled(fast)
    be = NumbaBackend()
    be.launch(fn, (4, 1, 1), (32, 1, 1), (1,), 0)
    fast.fail = FastLaunchUnavailable("an argument is a host array Numba copies back")
    be.launch(fn, (4, 1, 1), (32, 1, 1), (2,), 0)
    assert len(fn.dispatcher.calls) == 1 and "host array" in fn.fast_off


def test_switched_off_by_environment(monkeypatch) -> None:  # noqa: ANN001
    from klaraptor.backends import numba_backend

    monkeypatch.setenv(numba_backend.FAST_ENV, "0")
    fn = NumbaCompiled(_Dispatcher(), (), "k")
    NumbaBackend().launch(fn, (1, 1, 1), (32, 1, 1), (), 0)
    assert fn.fast is None and fn.fast_off and len(fn.dispatcher.calls) == 1


GPU_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    from klaraptor.backends.numba_backend import NumbaBackend, NumbaCompiled

    @cuda.jit
    def saxpy(a, x, y, n):
        i = cuda.grid(1)
        if i < n:
            y[i] = a * x[i] + y[i]

    n = 100_003
    x = cuda.to_device(np.arange(n, dtype=np.float32))
    saxpy[1, 32](np.float32(2), x, cuda.device_array(n, np.float32), n)  # compiles it
    (sig,) = saxpy.overloads
    be = NumbaBackend()
    outs = []
    for fast_env in ("1", "0"):
        import os
        os.environ["KLARAPTOR_NUMBA_FAST_LAUNCH"] = fast_env
        fn = NumbaCompiled(saxpy, sig, "saxpy")
        y = cuda.to_device(np.ones(n, dtype=np.float32))
        args = (np.float32(2), x, y, n)
        for _ in range(3):
            be.launch(fn, ((n + 127) // 128, 1, 1), (128, 1, 1), args, 0)
        cuda.synchronize()
        outs.append(y.copy_to_host())
        print(fast_env, "fast" if fn.fast_ok else "usual: " + fn.fast_off)
    expected = 1 + 3 * 2 * np.arange(n, dtype=np.float32)
    assert np.allclose(outs[0], expected) and np.array_equal(outs[0], outs[1])
    print("same")
    """
)


@pytest.mark.gpu
def test_real_kernel_computes_the_same_both_ways(tmp_path: Path) -> None:
    pytest.importorskip("numba.cuda")
    pythonpath = os.pathsep.join(
        [str(ROOT / "scripts" / "device_env"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": pythonpath}
    p = subprocess.run(
        [sys.executable, "-c", GPU_SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 fast" in p.stdout and "0 usual" in p.stdout and "same" in p.stdout
