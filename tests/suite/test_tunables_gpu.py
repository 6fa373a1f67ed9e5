"""The tunables suite's CUDA kernels on a real GPU, through the helpers of
scripts/device_tunables_check.py (CuPy alone): for each kernel its default variant and its last
(most work per thread), compiled with the variant's defines or template instance, at the spec's
check sizes (tiny and odd: every tile partial somewhere) with the check blocks, outputs against
the references, inputs unchanged, a second launch identical. The script checks every variant.

Run on the GPU machine:  PYTHONPATH=src python3 -m pytest -q -m gpu tests/suite/test_tunables_gpu.py
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from klaraptor.spec import KernelSpec
from klaraptor.suite import tunables as T

cp = pytest.importorskip("cupy")
from tests.suite.test_suite_rodinia_gpu import _device_count  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_device_count() == 0, reason="no CUDA device"),
]

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_tunables_check.py"
_spec = importlib.util.spec_from_file_location("device_tunables_check", _SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


@pytest.mark.parametrize("spec", T.SPECS, ids=[s.name for s in T.SPECS])
def test_variants_match_the_reference(spec: KernelSpec) -> None:
    every = check.admitted_variants(spec)
    todo = [(spec, pv) for pv in dict.fromkeys([spec.default_variant, every[-1]])]
    fns, failures = check.compile_all(todo, jobs=2)
    assert not failures, "\n".join(failures)
    record, failures = check.check_kernel(spec, fns, list(spec.meta["check_sizes"]))
    assert not failures, "\n".join(failures)
    statuses = [c["status"] for v in record.values() for c in v["checks"]]
    assert statuses.count("ok") >= 10 and "failed" not in statuses
