"""A PyTorch custom op (torch.library) whose kernel launches through klaraptor.

    python examples/torch_custom_op.py

`klaraptor_examples::scale_add(x, y, alpha)` computes alpha * x + y with a CUDA kernel: the
tensors go to the kernel without copies, the launch goes to torch's current stream, and the
block is chosen per call from the tensors' size. The op has a fake (meta) implementation, so
torch.compile can trace models that use it.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np
import torch

import klaraptor

SRC = r"""
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, float alpha,
                                     int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}"""


def register(**tune_options: Any) -> tuple[Any, Any]:
    """Register the op (once per process); `tune_options` go to klaraptor.tune. Returns the op
    and the tuned kernel it launches."""
    kernel = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", **tune_options)(
        cp.RawKernel(SRC, "scale_add")
    )

    @torch.library.custom_op("klaraptor_examples::scale_add", mutates_args=())
    def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        kernel(x, y, out, np.float32(alpha), np.int32(x.numel()))
        return out

    @scale_add.register_fake
    def _(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        return torch.empty_like(x)

    return scale_add, kernel


class ResidualScale(torch.nn.Module):
    """relu(alpha · layer(x) + x): the custom op inside a forward pass."""

    def __init__(self, width: int, op: Any, alpha: float = 0.5) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(width, width)
        self.op, self.alpha = op, alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.op(self.layer(x), x, self.alpha))


def main(
    op_and_kernel: tuple[Any, Any] | None = None, batch: int = 4096, width: int = 1024
) -> float:
    """Run the model on a side stream and compare with plain torch; returns the max error."""
    op, kernel = op_and_kernel or register()
    model = ResidualScale(width, op).cuda()
    x = torch.randn(batch, width, device="cuda")
    stream = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(stream):
        got = model(x)
        want = torch.relu(model.alpha * model.layer(x) + x)
    stream.synchronize()
    err = float((got - want).abs().max())
    grid, block, _ = kernel.plan_for(x, x, x, np.float32(0.5), np.int32(x.numel()))
    print(f"max |custom op - torch| = {err:.3g}; block {block} for n = {x.numel()}")
    return err


if __name__ == "__main__":
    main()
