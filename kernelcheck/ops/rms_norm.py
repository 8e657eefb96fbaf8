"""rms_norm: ``x * rsqrt(mean(x^2) + eps) * weight`` over the last dim, output like ``x``."""

from __future__ import annotations

import torch


def gold(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The exact answer in ``x``'s precision (kernelcheck passes float64); differentiable,
    so the gold gradients of ``x`` and of the shared ``weight`` come from autograd."""
    ms = x.square().mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(ms + eps) * weight


def reference_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """An honest kernel: mean square accumulated in fp32, the result rounded to ``x``'s
    dtype as the op's output is (``forward_precision``'s yardstick)."""
    xf = x.float()
    ms = xf.square().mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)
