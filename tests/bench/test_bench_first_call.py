"""The CPU parts of `benchmarks/bench_first_call.py` (issue 33): the README's front-end examples
found and instrumented without changing what they do, the figures read back from a run's output,
and a run on this GPU-less machine that records each front-end's failure and still merges
`first_call_s` into bench_cost.json."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_first_call.py"


@pytest.fixture(scope="module")
def fc():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("bench_first_call", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_examples_found_per_frontend(fc) -> None:  # noqa: ANN001
    ex = fc.readme_examples((ROOT / "README.md").read_text())
    assert set(ex) == {"cupy", "cuda_core", "numba"}
    assert "cp.RawKernel" in ex["cupy"] and "compile_kernel" in ex["cuda_core"]
    assert "@cuda.jit" in ex["numba"]


@pytest.mark.parametrize("fe", ["cupy", "cuda_core", "numba"])
def test_instrumented_example_keeps_every_line_and_times_the_first_call(fc, fe: str) -> None:  # noqa: ANN001
    code = fc.readme_examples((ROOT / "README.md").read_text())[fe]
    timed = fc.instrument(code, sync="numba" if fe == "numba" else "cupy")
    compile(timed, fe, "exec")
    lines = timed.splitlines()
    original = code.splitlines()
    ours = [ln for ln in lines if ln not in original]
    assert all(
        ln == "" or "_kl_" in ln or "synchronize" in ln.lower() or ln.startswith(("print(", "    "))
        for ln in ours
    )
    at = iter(lines)
    assert all(ln in at for ln in original)  # every line of the example, in order
    i = lines.index("_kl_t0 = _kl_time.perf_counter()")
    assert lines[i + 1].startswith("saxpy(") and "synchronize" in lines[i + 2].lower()
    assert lines[i + 3] == "_kl_t1 = _kl_time.perf_counter()"
    assert not any(ln.startswith("saxpy(") for ln in lines[:i])


def test_instrument_runs_and_reports(fc, tmp_path: Path) -> None:  # noqa: ANN001
    # A stand-in example without a GPU: the instrumented text runs and prints its marker line.
    code = (
        "import types\nklaraptor = types.SimpleNamespace(tune=lambda **k: (lambda f: f))\n"
        "saxpy = klaraptor.tune(data={})(lambda *a: sum(a))\nsaxpy(1, 2)\nprint('after')\n"
    )
    timed = fc.instrument(code).replace(
        "__import__('cupy').cuda.runtime.deviceSynchronize()", "pass"
    )
    p = subprocess.run([sys.executable, "-c", timed], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = fc.parse_run(p.stdout, "")
    assert got["first_call_s"] >= 0 and got["report"] is None and "after" in p.stdout


def test_instrument_refuses_an_example_without_a_tuned_call(fc) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="klaraptor.tune"):
        fc.instrument("print(1)\n")
    with pytest.raises(ValueError, match="never calls"):
        fc.instrument("k = klaraptor.tune(data={})(f)\n")


def test_parse_run_reads_the_wrapped_build_message(fc) -> None:  # noqa: ANN001
    stderr = (
        "klaraptor: built cupy.saxpy.vf2ef165a8301 in 4.9 s \n(model scaling)\nplan ... 128/128"
    )
    stdout = 'x\nKLARAPTOR_FIRST_CALL {"first_call_s": 5.1, "before_first_call_s": 1.0}\n'
    got = fc.parse_run(stdout, stderr)
    assert got["build_s"] == 4.9 and got["model"] == "scaling" and got["first_call_s"] == 5.1


def test_run_without_gpu_records_failures_and_merges(fc, tmp_path: Path) -> None:  # noqa: ANN001
    from klaraptor.backends.cupy_backend import gpu_problem

    if gpu_problem() is None:
        pytest.skip("a GPU is present: the GPU run is the device script's")
    (tmp_path / "bench_cost.json").write_text(json.dumps({"kernels": []}))
    p = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--frontends", "cupy", "--limit-each", "60"],
        capture_output=True, text=True, timeout=200,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "first_call.json").read_text())
    assert doc["first_call_s"] == {"cupy": None}
    assert doc["frontends"]["cupy"]["error"].startswith("rc=")
    assert doc["provenance"]["commit"]
    cost = json.loads((tmp_path / "bench_cost.json").read_text())
    assert cost["first_call_s"] == {"cupy": None} and cost["kernels"] == []
