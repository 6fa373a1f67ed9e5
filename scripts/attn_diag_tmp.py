# Which num_stages/num_warps let Triton 3.6 compile the tutorial's block-pointer attention kernel here.
import sys, traceback
sys.path.insert(0, "benchmarks")
import torch, triton
import triton_cases as cases
case = next(c for c in cases.CASES if c.name == "attention") if hasattr(cases, "CASES") else cases.FUSED_ATTENTION
ns = cases.load_tutorial(case.file)
grid, a, kw = case.make("cuda", N_CTX=1024, HEAD_DIM=64)
for bm, bn in ((64, 32), (128, 64)):
    for s in (1, 2, 3):
        for w in (4,):
            c = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
            try:
                case.jit(ns)[grid](*a, **kw, **c.all_kwargs()); torch.cuda.synchronize(); case.check(a); print("OK", bm, bn, s, w, flush=True)
            except Exception as e:
                print("FAIL", bm, bn, s, w, type(e).__name__, str(e)[:80], flush=True)
