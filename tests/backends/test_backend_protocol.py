"""Both GPU backends are `GpuBackend`s and share one output check (`OutputCheck`); neither
needs a GPU or its library to be constructed."""

from __future__ import annotations

import inspect

import pytest

from klaraptor.backends.base import GpuBackend, OutputCheck
from klaraptor.backends.cupy_backend import CupyBackend
from klaraptor.backends.numba_backend import NumbaBackend


@pytest.mark.parametrize("backend", [CupyBackend, NumbaBackend])
def test_each_backend_is_a_gpu_backend_with_the_protocols_signatures(backend: type) -> None:
    assert isinstance(backend(), GpuBackend)
    for name, member in inspect.getmembers(GpuBackend, inspect.isfunction):
        if name.startswith("_"):
            continue
        ours = inspect.signature(getattr(backend, name))
        assert list(ours.parameters) == list(inspect.signature(member).parameters), name


@pytest.mark.parametrize("backend", [CupyBackend, NumbaBackend])
def test_the_output_check_is_written_once(backend: type) -> None:
    assert issubclass(backend, OutputCheck)
    assert "check_outputs" not in vars(backend)
