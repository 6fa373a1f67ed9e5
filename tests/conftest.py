"""Shared test configuration: tests marked `gpu` are skipped where no usable CUDA GPU exists."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_problem() -> str | None:
    """None when CuPy imports and sees a CUDA device, else why not."""
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable GPU here
        return f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
    return None if n > 0 else "no CUDA device"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and (problem := gpu_problem()) is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=problem))
