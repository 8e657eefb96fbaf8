"""logp: ``logits[..., target] - logsumexp(logits[..., :])``, 0.0 where target is out of range."""

from __future__ import annotations

import torch


def gold(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The exact answer, in whatever precision ``logits`` has (kernelcheck passes float64).

    Differentiable, so the gold gradient ``g * (onehot - softmax)`` comes from autograd;
    rows with an out-of-range target get a zero gradient through ``where``.
    """
    vocab = logits.shape[-1]
    valid = (target >= 0) & (target < vocab)
    safe = torch.where(valid, target, torch.zeros_like(target))
    selected = logits.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    lse = torch.logsumexp(logits, dim=-1)
    return torch.where(valid, selected - lse, torch.zeros_like(lse))


def reference_fp32(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """An honest fp32 computation on the same inputs: the yardstick of ``forward_precision``.

    Max subtraction first, then one fp32 sum: the error any fp32-accumulating kernel
    should be within a small factor of.
    """
    x = logits.float()
    vocab = x.shape[-1]
    valid = (target >= 0) & (target < vocab)
    safe = torch.where(valid, target, torch.zeros_like(target))
    row_max = x.amax(dim=-1, keepdim=True)
    log_sum = torch.log(torch.exp(x - row_max).sum(dim=-1))
    selected = x.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    logp = (selected - row_max.squeeze(-1)) - log_sum
    return torch.where(valid, logp, torch.zeros_like(logp))
