"""Which (BLOCK_M, BLOCK_N, num_stages) let the installed Triton compile the fused-attention
tutorial's block-pointer forward kernel (benchmarks/triton_tutorials/fused_attention.py) on this
GPU, and check its output against torch. Usage (device): PYTHONPATH=src python
benchmarks/triton_attention_compile_check.py. On the H200 with Triton 3.6.0 (591f5ee,
collect_logs/triton_attention_compile_591f5ee.log) only num_stages=1 compiles; 2 and 3 fail in
Triton's TritonGPUPipeline pass."""

from __future__ import annotations

import sys

sys.path.insert(0, "benchmarks")

import torch  # noqa: E402
import triton  # noqa: E402
import triton_cases as cases  # noqa: E402


def main() -> None:
    case = cases.FUSED_ATTENTION
    ns = cases.load_tutorial(case.file)
    grid, a, kw = case.make("cuda", N_CTX=1024, HEAD_DIM=64)
    for bm, bn in ((64, 32), (128, 64)):
        for stages in (1, 2, 3):
            c = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=4)
            try:
                case.jit(ns)[grid](*a, **kw, **c.all_kwargs())
                torch.cuda.synchronize()
                case.check(a)
                print("OK", bm, bn, stages, 4, flush=True)
            except Exception as e:  # noqa: BLE001 - the compiler's error is the finding
                print("FAIL", bm, bn, stages, 4, type(e).__name__, str(e)[:80], flush=True)


if __name__ == "__main__":
    main()
