"""The Triton tutorial kernels as evaluation cases: their vendored sources, configs, keys, how to
make a call at any key, the torch reference, training sizes and the 50-shape workloads.

The kernels themselves are byte-identical extracts of Triton's tutorials
(benchmarks/triton_tutorials/, PROVENANCE there). What is ours is everything around them: the
config lists of the tutorials that give none (vector add, softmax, layer norm), the grids, the
shapes, the references. Loaded by path (benchmarks/ is not a package) by
benchmarks/bench_triton.py and by the tests.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "triton_tutorials"


def load_tutorial(file: str) -> dict[str, Any]:
    """Execute a vendored extract in a fresh namespace (torch, triton, tl in scope, as in the
    tutorial) and return the namespace: each call gives new JITFunction objects, so two sides of a
    comparison never share Triton's in-memory kernel cache."""
    import torch
    import triton
    import triton.language as tl

    path = HERE / file
    ns: dict[str, Any] = {
        "torch": torch,
        "triton": triton,
        "tl": tl,
        "__name__": f"tut_{path.stem}",
        **{name: make() for name, make in _SUPPLIED.get(file, {}).items()},
    }
    exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102 - vendored tutorial code
    return ns


def _is_hip() -> Callable[[], bool]:
    """The attention tutorial's `is_hip()` (its config list calls it) asks Triton's active
    driver, which the CPU interpreter lacks; torch's build answers the same question."""
    import torch

    return lambda: torch.version.hip is not None


# Names a vendored extract uses but whose definition in the tutorial was not extracted.
_SUPPLIED: dict[str, dict[str, Callable[[], Any]]] = {"fused_attention.py": {"is_hip": _is_hip}}


@dataclass
class Case:
    """One tutorial kernel as klaraptor and triton.autotune see it."""

    name: str
    file: str
    kernel: str
    key: list[str]
    configs: Callable[[dict[str, Any]], list[Any]]
    configs_source: str
    make: Callable[..., tuple[Any, tuple[Any, ...], dict[str, Any]]]  # (device, **key)
    check: Callable[[tuple[Any, ...]], None]  # after a launch on the args make gave
    train: list[dict[str, int]]
    workload: list[dict[str, int]]
    notes: str = ""
    small: dict[str, int] = field(default_factory=dict)  # an interpreter-sized key
    small_extra: dict[str, int] = field(default_factory=dict)  # make()'s other arguments there
    # (train, workload) under --smoke where halving/stretching `small` would break the kernel's
    # shape rules (attention: N_CTX a multiple of BLOCK_M, HEAD_DIM >= BLOCK_N)
    smoke: tuple[list[dict[str, int]], list[dict[str, int]]] | None = None

    def jit(self, ns: dict[str, Any]) -> Any:
        return ns[self.kernel]


def _cfgs(ns: dict[str, Any], grid: list[tuple[dict[str, int], int, int]]) -> list[Any]:
    triton = ns["triton"]
    return [triton.Config(kw, num_warps=w, num_stages=s) for kw, w, s in grid]


def _distinct(values: list[dict[str, int]]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


# -- vector add ---------------------------------------------------------------------------------
def _add_make(device: str, n_elements: int):
    import torch
    import triton

    x = torch.rand(n_elements, device=device)
    y = torch.rand(n_elements, device=device)
    out = torch.empty(n_elements, device=device)
    grid = lambda META: (triton.cdiv(n_elements, META["BLOCK_SIZE"]),)  # noqa: E731
    return grid, (x, y, out, n_elements), {}


def _add_check(args: tuple[Any, ...]) -> None:
    import torch

    x, y, out, _ = args
    torch.testing.assert_close(out, x + y)


def _block_size_by_warps(ns: dict[str, Any]) -> list[Any]:
    """Our list for the tutorials that give none (vector add, layer norm): BLOCK_SIZE in
    {512, 1024, 2048, 4096} x num_warps in {2, 4, 8}, 3 stages."""
    return _cfgs(
        ns, [({"BLOCK_SIZE": b}, w, 3) for b in (512, 1024, 2048, 4096) for w in (2, 4, 8)]
    )


def _round(v: float, m: int) -> int:
    return max(m, int(round(v / m)) * m)


VECTOR_ADD = Case(
    name="vector_add",
    file="vector_add.py",
    kernel="add_kernel",
    key=["n_elements"],
    configs=_block_size_by_warps,
    configs_source="ours (the tutorial launches BLOCK_SIZE=1024 only): BLOCK_SIZE in "
    "{512, 1024, 2048, 4096} x num_warps in {2, 4, 8}",
    make=_add_make,
    check=_add_check,
    # Training reaches a few waves (2^23 elements: up to 4 waves of 512-element programs on 132
    # SMs) so that the time of one wave is seen; the workload is 2x to 32x larger.
    train=[{"n_elements": 2**k} for k in (20, 21, 22, 23)],
    workload=_distinct(
        [{"n_elements": _round(v, 4096)} for v in [2**24 * 16 ** (i / 49) for i in range(50)]]
    ),
    small={"n_elements": 3000},
)


# -- fused softmax ------------------------------------------------------------------------------
def _softmax_make(device: str, n_rows: int, n_cols: int):
    import torch
    import triton

    x = torch.randn(n_rows, n_cols, device=device)
    y = torch.empty_like(x)
    # One program per row (the tutorial sizes a persistent grid from its own occupancy
    # arithmetic; with one program per row the grid is the user's, as autotune expects).
    grid = (n_rows,)
    block = triton.next_power_of_2(n_cols)
    return grid, (y, x, x.stride(0), y.stride(0), n_rows, n_cols), {"BLOCK_SIZE": block}


def _softmax_check(args: tuple[Any, ...]) -> None:
    import torch

    y, x = args[0], args[1]
    torch.testing.assert_close(y, torch.softmax(x, dim=1), atol=1e-5, rtol=1e-4)


FUSED_SOFTMAX = Case(
    name="fused_softmax",
    file="fused_softmax.py",
    kernel="softmax_kernel",
    key=["n_rows", "n_cols"],
    configs=lambda ns: _cfgs(ns, [({}, w, s) for w in (2, 4, 8, 16) for s in (1, 2, 4)]),
    configs_source="ours (the tutorial picks num_warps=8 and num_stages from shared memory): "
    "num_warps in {2, 4, 8, 16} x num_stages in {1, 2, 4}; BLOCK_SIZE = next_power_of_2(n_cols) "
    "as in the tutorial",
    make=_softmax_make,
    check=_softmax_check,
    train=[{"n_rows": r, "n_cols": c} for r in (1024, 4096) for c in (256, 512)],
    workload=_distinct(
        [
            {"n_rows": r, "n_cols": c}
            for r in (4096, 8192, 16384, 32768, 65536)
            for c in (640, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096)
        ]
    ),
    notes="one program per row; each distinct next_power_of_2(n_cols) is a new compilation",
    small={"n_rows": 5, "n_cols": 37},
)


# -- matmul -------------------------------------------------------------------------------------
def _matmul_make(device: str, M: int, N: int, K: int):
    import torch
    import triton

    a = torch.randn((M, K), device=device, dtype=torch.float16)
    b = torch.randn((K, N), device=device, dtype=torch.float16)
    c = torch.empty((M, N), device=device, dtype=torch.float16)
    grid = lambda META: (  # noqa: E731
        triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),
    )
    args = (
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )
    return grid, args, {"ACTIVATION": ""}


def _matmul_check(args: tuple[Any, ...]) -> None:
    import torch

    a, b, c = args[:3]
    ref = (a.float() @ b.float()).half()
    torch.testing.assert_close(c, ref, atol=5e-2 * math.sqrt(a.shape[1]) / 8, rtol=1e-2)


# LLM-serving-like: tokens in flight (batch x sequence) against the projections of a 7B-class
# model (hidden 4096, MLP 11008; fused QKV 12288).
_NK = [(4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008)]
_TOKENS = [1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384]
MATMUL = Case(
    name="matmul",
    file="matmul.py",
    kernel="matmul_kernel",
    key=["M", "N", "K"],
    configs=lambda ns: ns["get_cuda_autotune_config"](),
    configs_source="the tutorial's get_cuda_autotune_config() (16 configs)",
    make=_matmul_make,
    check=_matmul_check,
    train=[{"M": m, "N": n, "K": k} for m in (256, 1024) for n, k in _NK],
    workload=[{"M": m, "N": n, "K": k} for m in _TOKENS for n, k in _NK][:50],
    small={"M": 32, "N": 32, "K": 32},
)


# -- layer norm (forward) -----------------------------------------------------------------------
def _ln_make(device: str, N: int, M: int = 4096):
    import torch

    x = -2.3 + 0.5 * torch.randn((M, N), device=device, dtype=torch.float16)
    w = torch.rand((N,), device=device, dtype=torch.float16)
    b = torch.rand((N,), device=device, dtype=torch.float16)
    y = torch.empty_like(x)
    mean = torch.empty((M,), device=device, dtype=torch.float32)
    rstd = torch.empty((M,), device=device, dtype=torch.float32)
    return (M,), (x, y, w, b, mean, rstd, x.stride(0), N, 1e-5), {}


def _ln_check(args: tuple[Any, ...]) -> None:
    import torch

    x, y, w, b = args[:4]
    ref = torch.nn.functional.layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y.float(), ref, atol=1e-2, rtol=0)


LAYER_NORM = Case(
    name="layer_norm",
    file="layer_norm.py",
    kernel="_layer_norm_fwd_fused",
    key=["N"],
    configs=_block_size_by_warps,
    configs_source="ours (the tutorial sets BLOCK_SIZE = next_power_of_2(N) and num_warps by a "
    "heuristic): BLOCK_SIZE in {512, 1024, 2048, 4096} x num_warps in {2, 4, 8}; rows M = 4096",
    make=_ln_make,
    check=_ln_check,
    train=[{"N": n} for n in (256, 512, 768, 1024)],
    workload=[{"N": 1280 + 256 * i} for i in range(50)],
    notes="key N as the tutorial's kernel arguments allow (M is the grid: 4096 rows throughout)",
    small={"N": 40},
    small_extra={"M": 3},
)

# -- fused attention (forward) ------------------------------------------------------------------
_ATTN_SM_SCALE = 0.5  # the tutorial's test value
_ATTN_CAUSAL = True  # prefill in a decoder: causal, as the tutorial's causal benchmark


def _attn_make(device: str, N_CTX: int, HEAD_DIM: int, Z: int = 4, H: int = 32):
    """The tutorial's `_attention.forward` launch of `_attn_fwd` (the block-pointer path), with
    its inputs as in its test: (Z, H, N_CTX, HEAD_DIM) fp16, normal(0, 0.5)."""
    import torch
    import triton

    shape = (Z, H, N_CTX, HEAD_DIM)
    q = torch.empty(shape, device=device, dtype=torch.float16).normal_(mean=0.0, std=0.5)
    k = torch.empty(shape, device=device, dtype=torch.float16).normal_(mean=0.0, std=0.5)
    v = torch.empty(shape, device=device, dtype=torch.float16).normal_(mean=0.0, std=0.5)
    o = torch.empty_like(q)
    M = torch.empty((Z, H, N_CTX), device=device, dtype=torch.float32)
    grid = lambda args: (triton.cdiv(q.shape[2], args["BLOCK_M"]), q.shape[0] * q.shape[1], 1)  # noqa: E731
    args = (
        q,
        k,
        v,
        _ATTN_SM_SCALE,
        M,
        o,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *o.stride(),
        Z,
        H,
        N_CTX,
    )
    return grid, args, {"HEAD_DIM": HEAD_DIM, "CAUSAL": _ATTN_CAUSAL}


def _attn_reference(q: Any, k: Any, v: Any, causal: bool, sm_scale: float) -> Any:
    """softmax(Q K^T * sm_scale, causally masked) V in float32, as the tutorial's test."""
    import torch

    n = q.shape[2]
    p = torch.matmul(q.float(), k.float().transpose(2, 3)) * sm_scale
    if causal:
        p = p.masked_fill(
            ~torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device)), float("-inf")
        )
    return torch.matmul(torch.softmax(p, dim=-1), v.float())


def _attn_check(args: tuple[Any, ...]) -> None:
    import torch

    q, k, v, sm_scale, _, o = args[:6]
    ref = _attn_reference(q, k, v, _ATTN_CAUSAL, sm_scale)
    torch.testing.assert_close(o.float(), ref, atol=1e-2, rtol=0)


# Prefill lengths as a server pads them (to 128 tokens: the kernel has no boundary checks, so
# N_CTX must be a multiple of its largest BLOCK_M), 1152 to 7424 tokens; batch 4 x 32 heads of
# dimension 64, as the tutorial's benchmark.
FUSED_ATTENTION = Case(
    name="attention",
    file="fused_attention.py",
    kernel="_attn_fwd",
    key=["N_CTX", "HEAD_DIM"],
    configs=lambda ns: list(filter(ns["keep"], ns["configs"])),
    configs_source="the tutorial's `configs` filtered by its `keep`: BLOCK_M in {64, 128} x "
    "BLOCK_N in {32, 64} x num_stages in {3, 4, 7} x num_warps in {4, 8}, where `keep` drops 8 "
    "warps unless BLOCK_M * BLOCK_N >= 128 * 128, i.e. always here: 12 configs, all 4 warps",
    make=_attn_make,
    check=_attn_check,
    train=[{"N_CTX": n, "HEAD_DIM": 64} for n in (256, 512, 768, 1024)],
    workload=[{"N_CTX": 1152 + 128 * i, "HEAD_DIM": 64} for i in range(50)],
    notes="forward only, causal, fp16, Z=4 x H=32, HEAD_DIM=64 (the key's HEAD_DIM is fixed); "
    "the block-pointer kernel of the tutorial at commit 003da478 (its loop covers all of N_CTX "
    "even when causal, masking the blocks above the diagonal)",
    small={"N_CTX": 128, "HEAD_DIM": 64},
    small_extra={"Z": 1, "H": 2},
    smoke=(
        [{"N_CTX": 128, "HEAD_DIM": 64}, {"N_CTX": 256, "HEAD_DIM": 64}],
        [{"N_CTX": 384, "HEAD_DIM": 64}, {"N_CTX": 512, "HEAD_DIM": 64}],
    ),
)


def _attn_stages1(ns: dict[str, Any]) -> list[Any]:
    """The tutorial's configs filtered by its `keep`, each at num_stages=1 (duplicates once)."""
    triton = ns["triton"]
    out: list[Any] = []
    seen: set[tuple[Any, ...]] = set()
    for c in filter(ns["keep"], ns["configs"]):
        key = (tuple(sorted(c.kwargs.items())), c.num_warps)
        if key not in seen:
            seen.add(key)
            out.append(triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=1))
    return out


# Triton 3.6 on the H200 compiles the block-pointer kernel only at num_stages=1 (2, 3, 4 and 7
# fail in its TritonGPUPipeline pass: benchmarks/triton_attention_compile_check.py), so none of
# the tutorial's 12 configs compiles there. This case keeps everything else of the tutorial's
# list and runs it at num_stages=1.
FUSED_ATTENTION_STAGES1 = dataclasses.replace(
    FUSED_ATTENTION,
    name="attention_stages1",
    configs=_attn_stages1,
    configs_source="the tutorial's `configs` filtered by its `keep` (BLOCK_M in {64, 128} x "
    "BLOCK_N in {32, 64}, 4 warps), each at num_stages=1, the only stage count Triton 3.6 "
    "compiles for this kernel on the H200 (the tutorial's 3, 4 and 7 do not): 4 configs",
)

# Cheapest first, so that a run cut short by its time limit keeps the most kernels.
CASES = [VECTOR_ADD, LAYER_NORM, MATMUL, FUSED_SOFTMAX, FUSED_ATTENTION_STAGES1, FUSED_ATTENTION]
