"""Shared test configuration and fixtures.

- Tests marked `gpu` are skipped where no usable CUDA GPU exists (the one GPU check,
  `klaraptor.backends.cupy_backend.gpu_problem`).
- `h200`: the committed, measured H200 profile; `recorded`: the recorded H200 dataset;
  `recorded_store`: a store holding recorded kernels; `make_spec`: a spec factory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor.backends.cupy_backend import gpu_problem
from klaraptor.device.profile import DeviceProfile, recorded_profile
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import Store
from klaraptor.suite.recorded import RecordedDataset, load_recorded

_gpu_problem = functools.cache(gpu_problem)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and (problem := _gpu_problem()) is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=problem))


@pytest.fixture(scope="session")
def h200() -> DeviceProfile:
    """The committed H200 profile (device query + microbenchmarks)."""
    return recorded_profile("h200")


@pytest.fixture(scope="session")
def recorded() -> RecordedDataset:
    """The recorded H200 dataset shipped with the package."""
    return load_recorded()


@pytest.fixture
def recorded_store(recorded: RecordedDataset, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """`recorded_store(*kernels)`: a fresh store holding the recorded data of those kernels."""
    opened: list[Store] = []

    def make(*kernels: str) -> Store:
        s = recorded.to_store(tmp_path / f"recorded{len(opened)}.sqlite", kernels=list(kernels))
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


SCALE_SRC = r"""extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}"""


def scale_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    import cupy

    n = D["n"]
    x = cupy.asarray(rng.random(n, dtype=np.float32))
    return x, cupy.empty_like(x), np.int32(n)


def scale_reference(D: Any, host: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: 2.0 * np.asarray(host[0], dtype=np.float64)}


@pytest.fixture
def make_spec() -> Callable[..., KernelSpec]:
    """`make_spec(**fields)`: the README's 1-D `scale` kernel as a KernelSpec, any field
    overridden (its make_args and reference are module-level, so workers can import them)."""

    def make(**fields: Any) -> KernelSpec:
        base: dict[str, Any] = {
            "name": "test.scale",
            "source": SCALE_SRC,
            "kernel": "scale",
            "data": (DataParam("n", arg=2),),
            "dim": 1,
            "grid": ("ceil(n / bx)", "1", "1"),
            "make_args": scale_args,
            "reference": scale_reference,
            "outputs": (1,),
        }
        base.update(fields)
        return KernelSpec(**base)

    return make


# The kernels the README's examples use (tests/test_readme.py runs them) and the bad-input
# suite's: what `recorded_home` imports.
RECORDED_KERNELS = ("polybench.atax.k1", "polybench.gemm.gemm", "rodinia.srad.k1")


@pytest.fixture(scope="session")
def recorded_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KLARAPTOR_HOME whose store holds recorded H200 builds (`klaraptor import-recorded
    --kernels ...`, run once per session) of RECORDED_KERNELS and of the README's kernels.
    Tests that write to it (history) copy the file first."""
    import re

    from klaraptor.cli import main

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    named = set(re.findall(r"\b((?:polybench|rodinia)\.\w+\.\w+)\b", readme))
    kernels = sorted(named | set(RECORDED_KERNELS))
    home = tmp_path_factory.mktemp("recorded_home")
    store = home / "klaraptor.sqlite"
    assert (
        main(["--store", str(store), "import-recorded", "--jobs", "2", "--kernels", *kernels]) == 0
    )
    assert not (home / "klaraptor.sqlite-wal").exists()  # closed: the file alone is the store
    return home
