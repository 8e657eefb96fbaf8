"""The ``torch`` candidate of rms_norm: fp32 accumulation in PyTorch ops, batch-invariant.

The mean square is :func:`~kernelcheck.candidates.torch_logp.fixed_order_row_sum`: a
plain ``sum(-1)`` on the CPU splits a long row over threads when rows are few, so a
row's result would depend on the batch size.
"""

from __future__ import annotations

import torch

from kernelcheck.candidates.honest import fixed_order_row_sum

IMPLEMENTATION = "torch:fp32-rms_norm"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    ms = fixed_order_row_sum(xf * xf).unsqueeze(-1) / x.shape[-1]
    return (xf * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)
