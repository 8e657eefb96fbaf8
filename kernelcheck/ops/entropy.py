"""entropy: ``-sum(softmax(x) * log_softmax(x))`` over the last dim, fp32 out."""

from __future__ import annotations

import torch


def gold(logits: torch.Tensor) -> torch.Tensor:
    """Exact in ``logits``' precision (float64 from kernelcheck); differentiable.

    ``log(s) - sum(e * d) / s`` with ``d = x - max``, ``e = exp(d)``, ``s = sum(e)``: both
    terms stay O(log V) for rows offset far from zero; ``-inf`` entries (masked) add 0.
    """
    d = logits - logits.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(d)
    s = e.sum(dim=-1)
    ed = torch.where(e > 0, e * torch.where(e > 0, d, torch.zeros_like(d)), torch.zeros_like(e))
    return torch.log(s) - ed.sum(dim=-1) / s


def _softmax_parts(logits: torch.Tensor):
    """``p = softmax(x)``, ``d = x - max`` (0 where ``p`` is: a masked entry, whose terms
    every caller multiplies by ``p``), ``log s`` (``s = sum(exp(d))``) and ``sum(p * d)``,
    in ``logits``' precision: ``log p = d - log s``, ``H = log s - sum(p * d)``."""
    d = logits - logits.amax(dim=-1, keepdim=True)
    p = torch.exp(d)
    log_s = p.sum(dim=-1, keepdim=True).log_()
    p.div_(log_s.exp())
    d = torch.where(p > 0, d, torch.zeros_like(d))
    return p, d, log_s, (p * d).sum(dim=-1, keepdim=True)


def gold_backward(upstream: list[torch.Tensor], logits: torch.Tensor):
    """``dH/dx = -g * p * (log p + H)``, with ``log p + H = d - sum(p * d)``: its two
    ``log s`` cancelled on paper. Autograd of :func:`gold` adds ``1/s`` and subtracts it
    again, so in a near one-hot row (``p_max = 1 - 1e-28``) it loses the argmax entry,
    whose true value (1e-26 there) an fp32 kernel can hold: that gold failed an exact
    kernel."""
    p, d, _, mean = _softmax_parts(logits)
    return {"logits": p.mul_(d - mean).mul_(-upstream[0].unsqueeze(-1))}


def gradient_scale(upstream: list[torch.Tensor], logits: torch.Tensor):
    """What ``backward_precision`` measures an entry's error against: the size of the
    terms of ``-g * p * (log p + H)``, ``|g| * p * (1 + |log p| + H)``. Where the terms
    cancel (a near one-hot row's argmax entry, ``log p`` and ``H`` both near 0, or an
    entry whose ``-log p`` is near ``H``) an honest fp32 kernel rounds the terms, not
    their difference; elsewhere this is a small multiple of ``|gradient|``."""
    p, d, log_s, mean = _softmax_parts(logits)
    size = (2 * log_s + 1) - d - mean  # 1 + |log p| + H: d <= 0 and log s >= 0
    return {"logits": p.mul_(size).mul_(upstream[0].abs().unsqueeze(-1))}


def reference_fp32(logits: torch.Tensor) -> torch.Tensor:
    """The same formula in fp32 with plain sums: an honest kernel's error."""
    return gold(logits.float()).float()
