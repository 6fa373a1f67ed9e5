"""numba-cuda against a NumPy without `numpy.row_stack` (the H200 machine: numba-cuda 0.30.4
registers `overload(np.row_stack)` on its first compilation, and that NumPy removed the alias).

klaraptor says what is wrong and how to fix it; the GPU harness's shim
(scripts/device_env/sitecustomize.py) restores the alias in that environment only. The failure
is reproduced for real: `numba.cuda.compile_ptx` compiles without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from klaraptor.collect.process import _raise_fatal
from klaraptor.core.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "scripts" / "device_env"


def python(code: str, *paths: Path) -> dict:
    """Run `code` in a fresh interpreter with `paths` first on PYTHONPATH (and not the shim the
    GPU harness puts there, unless given); its last line, JSON."""
    # The real compiler, not the simulator tests/frontends/conftest.py turns on without a GPU.
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(ROOT / "src"), str(ROOT)])
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_shim_on_this_numpy_imports_nothing_and_adds_only_a_missing_alias() -> None:
    native = python("import json, numpy\nprint(json.dumps(hasattr(numpy, 'row_stack')))")
    out = python(
        "import json, sys\n"
        "early = 'numpy' in sys.modules\n"
        "import numpy, sitecustomize\n"
        "print(json.dumps({'early': early, 'shim': sitecustomize.__file__,\n"
        "                  'alias': numpy.row_stack is numpy.vstack}))",
        SHIM,
    )
    # A NumPy with row_stack keeps its own; one without (the H200's) gets the alias.
    assert out == {"early": False, "shim": str(SHIM / "sitecustomize.py"), "alias": not native}


def test_the_shim_gives_a_numpy_without_row_stack_the_alias(tmp_path: Path) -> None:
    # A package named numpy that has vstack and, like NumPy 2.x, no row_stack.
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(
        "def vstack(tup):\n    return tup\n\n"
        "def __getattr__(attr):\n"
        "    raise AttributeError(f'module {__name__!r} has no attribute {attr!r}')\n"
    )
    code = (
        "import json, numpy\n"
        "print(json.dumps({'file': numpy.__file__, 'alias': numpy.row_stack is numpy.vstack}))"
    )
    out = python(code, SHIM, tmp_path)
    assert out == {"file": str(tmp_path / "numpy" / "__init__.py"), "alias": True}
    # Without the shim the same NumPy has no row_stack.
    code = "import json, numpy\nprint(json.dumps({'has': hasattr(numpy, 'row_stack')}))"
    assert python(code, tmp_path) == {"has": False}
    # An availability check (find_spec without loading) before the import must not use the
    # shim up: on the H200 pytest's process asked first, and numba-cuda then failed.
    code = (
        "import importlib.util, json\n"
        "assert importlib.util.find_spec('numpy') is not None\n"
        "import numpy\n"
        "print(json.dumps({'alias': numpy.row_stack is numpy.vstack}))"
    )
    assert python(code, SHIM, tmp_path) == {"alias": True}


def test_the_shim_still_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    out = python("import builtins, json\nprint(json.dumps(builtins.SHADOWED_RAN))", SHIM, tmp_path)
    assert out is True


DROP_ROW_STACK = "numpy.__dict__.pop('row_stack', None)"  # as a NumPy that removed it
NUMBA_COMPILE = """
import json, numpy
{prepare}
from numba import cuda, types
from klaraptor.backends.numba_backend import incompatible_numpy

def fill(x, n):
    i = cuda.grid(1)
    if i < n:
        x[i] = 1.0

try:
    cuda.compile_ptx(fill, (types.float32[::1], types.int64), cc=(9, 0))
    out = {{"compiled": True}}
except Exception as exc:
    hint = incompatible_numpy(exc)
    out = {{"compiled": False, "error": f"{{type(exc).__name__}}: {{exc}}",
            "hint": None if hint is None else str(hint), "numpy": numpy.__version__}}
print(json.dumps(out))
"""


def test_numba_cuda_without_row_stack_fails_and_klaraptor_says_why() -> None:
    pytest.importorskip("numba.cuda")
    out = python(NUMBA_COMPILE.format(prepare=DROP_ROW_STACK))
    assert out["compiled"] is False
    assert out["error"] == "AttributeError: module 'numpy' has no attribute 'row_stack'"
    hint = out["hint"]
    assert hint is not None and f"NumPy {out['numpy']}" in hint
    assert "numpy.row_stack" in hint and "klaraptor[numba]" in hint


def test_with_the_shims_alias_numba_cuda_compiles() -> None:
    pytest.importorskip("numba.cuda")
    prepare = f"{DROP_ROW_STACK}\nfrom sitecustomize import add_row_stack\nadd_row_stack(numpy)"
    out = python(NUMBA_COMPILE.format(prepare=prepare), SHIM)
    if not out["compiled"] and "row_stack" not in out["error"]:
        pytest.skip(f"numba-cuda cannot compile PTX here: {out['error']}")
    assert out == {"compiled": True}


def test_other_attribute_errors_are_not_taken_for_it() -> None:
    from klaraptor.backends.numba_backend import incompatible_numpy

    try:
        import numpy

        numpy.no_such_name  # noqa: B018 - raised outside Numba's code
    except AttributeError as exc:
        assert incompatible_numpy(exc) is None
    assert incompatible_numpy(ValueError("module 'numpy' has no attribute 'row_stack'")) is None


def test_a_worker_reporting_it_raises_missing_dependency_error() -> None:
    ev = {"error": "MissingDependencyError", "message": "numba-cuda 0.30.4 … klaraptor[numba]"}
    with pytest.raises(MissingDependencyError, match=r"klaraptor\[numba\]"):
        _raise_fatal(ev, "")
