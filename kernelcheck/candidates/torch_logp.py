"""The ``torch`` candidate: the fp32 logp formula in plain PyTorch ops, on any device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IMPLEMENTATION = "torch:fp32-formula"
SUM_CHUNK = 1024


def fixed_order_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim in an order that depends on its length alone.

    A plain ``x.sum(-1)`` on the CPU splits a long row across threads when there are
    fewer rows than threads, so a row's sum depends on the batch size (kernelcheck's
    ``backward_invariance`` catches it at V=151936). Summing fixed 1024-element chunks,
    then the chunk sums, keeps every reduction below torch's split threshold.
    """
    vocab = x.shape[-1]
    if vocab <= SUM_CHUNK:
        return x.sum(dim=-1)
    pad = (-vocab) % SUM_CHUNK
    chunks = F.pad(x, (0, pad)).unflatten(-1, (-1, SUM_CHUNK))  # zero padding adds exactly 0
    return chunks.sum(dim=-1).sum(dim=-1)


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``(x[t] - max) - log(sum(exp(x - max)))`` in fp32; 0.0 where ``t`` is out of range.

    Subtracting the max before selecting keeps the result exact for rows offset far from
    zero, which ``x[t] - logsumexp(x)`` would round away. Autograd gives the backward.
    """
    if logits.dim() < 1 or tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal the logits lead shape "
            f"{tuple(logits.shape[:-1])}"
        )
    x = logits.float()
    vocab = x.shape[-1]
    target = target.long()
    valid = (target >= 0) & (target < vocab)
    safe = torch.where(valid, target, torch.zeros_like(target))
    row_max = x.detach().amax(dim=-1, keepdim=True)
    shifted = x - row_max
    log_sum = torch.log(fixed_order_row_sum(torch.exp(shifted)))
    selected = shifted.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    out = selected - log_sum
    return torch.where(valid, out, torch.zeros_like(out))
