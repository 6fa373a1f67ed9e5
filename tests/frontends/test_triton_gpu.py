"""klaraptor.triton.autotune on a real GPU: compiled launches, the compiled variants' registers
and shared memory read back, the choice dispatched, builds served from the store. Brief (a few
seconds); the evaluation is benchmarks/bench_triton.py."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the triton extra (torch, triton) is not installed")
triton = pytest.importorskip("triton", reason="the triton extra (torch, triton) is not installed")
tl = pytest.importorskip("triton.language")


@pytest.fixture(autouse=True)
def _cuda() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("0", ""):
        pytest.skip("this run uses Triton's interpreter (TRITON_INTERPRET=1)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")


def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


CONFIGS = [
    triton.Config({"BLOCK": 256}, num_warps=2),
    triton.Config({"BLOCK": 1024}, num_warps=4),
    triton.Config({"BLOCK": 4096}, num_warps=8),
]


def _sample(n: int):
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    return (lambda META: (triton.cdiv(n, META["BLOCK"]),)), (x, out, n), {}


def _tuned(tmp_path):
    from klaraptor.triton import autotune

    return autotune(
        configs=CONFIGS,
        key=["n"],
        warmup=1,
        rep=3,
        sample=_sample,
        store=str(tmp_path / "s.db"),
        progress=False,
    )(triton.jit(scale_kernel))


def test_gpu_build_reads_resources_and_launches_correctly(tmp_path) -> None:
    tuned = _tuned(tmp_path)
    build = tuned.build([2**14, 2**16, 2**18])
    assert build.measured == 9 and not build.from_store
    assert set(build.resources) == {0, 1, 2}
    assert all(r.num_regs > 0 for r in build.resources.values())
    assert (build.active > 0).all()
    for n in (3 * 2**20 + 7, 2**23):
        x = torch.rand(n, device="cuda")
        out = torch.full_like(x, -1.0)
        grid = lambda META, n=n: (triton.cdiv(n, META["BLOCK"]),)  # noqa: E731
        tuned[grid](x, out, n)
        torch.testing.assert_close(out, x * 2.0 + 1.0)
        assert tuned.best_config in CONFIGS
        assert 0 < tuned.last_select_us < 5000


def test_gpu_store_serves_a_second_process_view(tmp_path) -> None:
    _tuned(tmp_path).build([2**14, 2**16])
    again = _tuned(tmp_path)
    n = 2**20
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    again[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x * 2.0 + 1.0)
    (build,) = again._builds.values()
    assert build.from_store and build.measured == 6


def test_gpu_tutorial_matmul(tmp_path) -> None:
    import importlib.util
    import sys
    from pathlib import Path

    from klaraptor.triton import autotune

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "triton_cases.py"
    if not path.exists():
        pytest.skip("benchmarks/triton_cases.py is not beside the tests")
    spec = importlib.util.spec_from_file_location("triton_cases", path)
    cases = importlib.util.module_from_spec(spec)
    sys.modules["triton_cases"] = cases
    spec.loader.exec_module(cases)
    case = cases.MATMUL
    ns = cases.load_tutorial(case.file)
    configs = case.configs(ns)[:6]
    tuned = autotune(
        configs=configs,
        key=case.key,
        warmup=1,
        rep=3,
        store=str(tmp_path / "s.db"),
        sample=lambda **key: case.make("cuda", **key),
        progress=False,
    )(case.jit(ns))
    tuned.build([{"M": 128, "N": 512, "K": 512}, {"M": 256, "N": 512, "K": 512}])
    grid, args, kwargs = case.make("cuda", M=1024, N=512, K=512)
    tuned[grid](*args, **kwargs)
    case.check(args)
    assert tuned.best_config in configs
