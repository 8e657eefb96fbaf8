"""logp: ``logits[..., target] - logsumexp(logits[..., :])``, 0.0 where target is out of range."""

from __future__ import annotations

import torch

from kernelcheck.flushed_exp import exp_flushed_, exp_for


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` (upstream's sampling temperature); T = 1 leaves them as is."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return logits if temperature == 1.0 else logits / temperature


def _valid(target: torch.Tensor, vocab: int, mask: torch.Tensor | None) -> torch.Tensor:
    """Rows that select a logit: the target in range and, with a mask, the mask true
    (upstream: masked positions give exactly 0.0, whatever id they hold)."""
    valid = (target >= 0) & (target < vocab)
    return valid if mask is None else valid & mask


def gold(
    logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The exact answer, in whatever precision ``logits`` has (kernelcheck passes float64).

    Differentiable, so the gold gradient ``g * (onehot - softmax)`` comes from autograd;
    rows with an out-of-range target, or masked out, get a zero gradient through ``where``.
    """
    logits = _tempered(logits, temperature)
    vocab = logits.shape[-1]
    valid = _valid(target, vocab, mask)
    safe = torch.where(valid, target, torch.zeros_like(target))
    selected = logits.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    lse = torch.logsumexp(logits, dim=-1) if logits.requires_grad else _logsumexp(logits)
    return torch.where(valid, selected - lse, torch.zeros_like(lse))


# Below e^-600 a float64 term is under 1e-260: next to the row max's term (exactly 1)
# even 1e6 of them cannot change a float64 sum, while exp() of arguments near the
# subnormal range (and of -inf) takes a slow path, 10-25x slower. Clamping there keeps
# the gold's value; only its speed changes.
EXP_FLOOR = -600.0


def _logsumexp(x: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` over the last dim in float64, in place on one temporary."""
    m = x.amax(dim=-1, keepdim=True)
    e = (x - m).clamp_(min=EXP_FLOOR).exp_()
    return m.squeeze(-1) + e.sum(dim=-1).log_()


def reference_fp32(
    logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """An honest fp32 computation on the same inputs: the yardstick of ``forward_precision``.

    Max subtraction first, then one fp32 sum: the error any fp32-accumulating kernel
    should be within a small factor of.
    """
    x = logits.float()
    if temperature != 1.0:  # divide after the exact max subtraction, as an honest kernel does
        x = _tempered(x - x.amax(dim=-1, keepdim=True), temperature)
    valid = _valid(target, x.shape[-1], mask)
    safe = torch.where(valid, target, torch.zeros_like(target))
    row_max = x.amax(dim=-1, keepdim=True)
    shifted = x - row_max
    log_sum = torch.log(exp_for(logits.dtype)(shifted).sum(dim=-1))
    selected = x.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    logp = (selected - row_max.squeeze(-1)) - log_sum
    return torch.where(valid, logp, torch.zeros_like(logp))


def gold_backward(
    upstream: list[torch.Tensor],
    logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
):
    """The gold gradient analytically: ``g * (onehot(target) - softmax(logits / T)) / T``,
    zero on rows whose target is out of range or masked out. Same float64 math as
    autograd of :func:`gold`, in a few in-place passes (tests/test_gold.py checks they
    agree)."""
    logits = _tempered(logits, temperature)
    g = upstream[0] if temperature == 1.0 else upstream[0] / temperature
    valid = _valid(target, logits.shape[-1], mask)
    coef = torch.where(valid, g, torch.zeros_like(g))
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    grad = exp_flushed_(shifted, below=EXP_FLOOR)  # softmax at or below e^-600 (1e-260): 0
    grad.mul_((-coef / grad.sum(dim=-1)).unsqueeze(-1))
    safe = torch.where(valid, target, torch.zeros_like(target))
    grad.scatter_add_(-1, safe.unsqueeze(-1), coef.unsqueeze(-1))
    return {"logits": grad}


def gradient_scale(
    upstream: list[torch.Tensor],
    logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
):
    """What ``backward_precision`` measures an entry's error against: the size of the
    terms of ``g * (onehot - p) / T``, ``|g| * (onehot + p) / T``. The target entry
    ``g * (1 - p_t)`` cancels where the token is confident (p_t near 1, as a rollout's
    own sampled token mostly is): an honest fp32 kernel rounds p_t near 1 by an ulp of
    1, not of ``1 - p_t``, and which one-ulp draw the reference got decided its verdict.
    Every other entry: ``|gradient|``."""
    grad = gold_backward(upstream, logits, target, temperature, mask)["logits"]
    valid = _valid(target, logits.shape[-1], mask)
    g = upstream[0].abs() if temperature == 1.0 else upstream[0].abs() / temperature
    coef = torch.where(valid, g, torch.zeros_like(g))
    safe = torch.where(valid, target, torch.zeros_like(target)).unsqueeze(-1)
    picked = grad.gather(-1, safe)  # g (1 - p_t) / T: the size is g (1 + p_t) / T
    grad.abs_().scatter_(-1, safe, 2 * coef.unsqueeze(-1) - picked.abs())
    return {"logits": grad}
