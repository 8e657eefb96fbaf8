"""The ``torch`` candidate of entropy: the shifted fp32 formula with fixed-order row sums
(:func:`~kernelcheck.candidates.torch_logp.fixed_order_row_sum`), so batch-invariant."""

from __future__ import annotations

import torch

from kernelcheck.candidates.honest import fixed_order_row_sum

IMPLEMENTATION = "torch:fp32-entropy"


def entropy(logits: torch.Tensor) -> torch.Tensor:
    x = logits.float()
    d = x - x.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(d)
    s = fixed_order_row_sum(e)
    live = e > 0  # masked (-inf) entries: e = 0, and 0 * -inf must add 0, not NaN
    ed = torch.where(live, e * torch.where(live, d, torch.zeros_like(d)), torch.zeros_like(e))
    return torch.log(s) - fixed_order_row_sum(ed) / s
