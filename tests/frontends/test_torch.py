"""torch tensors as kernel arguments, on the CPU: inference, device errors, stream handles.

CUDA tensors need a GPU (tests/frontends/test_frontends_gpu.py); here CPU tensors check what is
read from tensors and that a tensor on the CPU is refused before any launch.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from klaraptor.core.errors import MissingDependencyError, SpecError  # noqa: E402
from klaraptor.frontends.inference import array_facts, describe_args  # noqa: E402
from klaraptor.frontends.torch import (  # noqa: E402
    TensorDeviceError,
    TorchBridge,
    is_tensor,
    torch_module,
)
from klaraptor.store import Store  # noqa: E402


def test_torch_tensor_facts_for_inference() -> None:
    t = torch.zeros(6, 4, dtype=torch.float16)
    assert is_tensor(t) and not is_tensor(np.zeros(3))
    assert array_facts(t) == ((6, 4), np.dtype("float16"), "C")
    assert array_facts(t.t())[2] == ""  # a transposed view is not contiguous
    info = describe_args((t, torch.ones(24, dtype=torch.int32), 6), {"n": 6}, ("a", "b", "n"))
    assert [i.describe() for i in info] == [
        "float16[n, 4] (C order, from torch.Tensor)",
        "int32[4 * n] (C order, from torch.Tensor)",
        "int n",
    ]
    with pytest.raises(SpecError, match=r"argument 0 \(a\) is a non-contiguous array"):
        describe_args((t.t(),), {"n": 6}, ("a",))


def test_torch_cpu_tensor_is_refused_with_the_fix() -> None:
    args = (torch.zeros(8), torch.zeros(8), 8)
    with pytest.raises(TensorDeviceError) as e:
        TorchBridge(args, ("x", "y", "n"), "scale")
    msg = str(e.value)
    assert "argument 0 (x) of scale is a torch tensor on the CPU" in msg
    assert ".to('cuda:0')" in msg


def test_torch_cpu_tensor_to_a_tuned_numba_kernel_is_refused(tmp_path: Path, h200) -> None:  # noqa: ANN001
    pytest.importorskip("numba")
    from numba import cuda

    import klaraptor

    @klaraptor.tune(
        data={"n": "x.shape[0]"},
        grid="ceil(n / bx)",
        store=Store(tmp_path / "s.sqlite"),
        device=h200,
        on_missing="default",
    )
    @cuda.jit
    def double(x, y):  # noqa: ANN001
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = 2 * x[i]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TensorDeviceError, match=r"argument 0 \(x\) of double .* CPU"):
            double(torch.ones(16), torch.zeros(16))


def test_torch_stream_handles() -> None:
    bridge = TorchBridge((1,), ("n",), "k")  # no tensors: device 0
    assert bridge.stream_ptr(7) == 7

    class Proto:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 99)

    class CupyLike:
        ptr = 42

    assert bridge.stream_ptr(Proto()) == 99 and bridge.stream_ptr(CupyLike()) == 42
    with pytest.raises(Exception, match="cannot read a CUDA stream handle from str"):
        bridge.stream_ptr("default")


def test_torch_pointer_converters_check_the_device() -> None:
    bridge = TorchBridge((1,), (), "k")
    convs = bridge.pointer_converters((torch.zeros(2), 5), as_numpy=True)
    assert convs[1](5) == 5
    with pytest.raises(TensorDeviceError, match="argument 0 of k is a torch tensor on the CPU"):
        convs[0](torch.zeros(2))


def test_torch_missing_dependency_names_the_extra(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"klaraptor\[torch\]"):
        torch_module()
