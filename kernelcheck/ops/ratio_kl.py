"""ratio_kl: the PPO/GRPO policy ratio and the reference KL of the selected tokens.

``ratio = exp(logp_policy - old_logps)``, ``kl = exp(d) - d - 1`` with
``d = logp_ref - logp_policy``; at masked positions (``attention_mask`` false) both
exponents are 0: exactly ratio 1 and kl 0, whatever id the position holds.
"""

from __future__ import annotations

import torch


def _selected_logp(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def gold(policy_logits, ref_logits, action_ids, attention_mask, old_logps):
    """Exact in the logits' precision (float64 from kernelcheck); differentiable in the
    policy logits only, as upstream's op is."""
    safe = torch.where(attention_mask, action_ids, torch.zeros_like(action_ids))
    lp = _selected_logp(policy_logits, safe)
    lr = _selected_logp(ref_logits.detach(), safe)
    zero = torch.zeros_like(lp)
    delta = torch.where(attention_mask, lp - old_logps.to(lp.dtype), zero)
    diff = torch.where(attention_mask, lr - lp, zero)
    return torch.exp(delta), torch.exp(diff) - diff - 1


def reference_fp32(policy_logits, ref_logits, action_ids, attention_mask, old_logps):
    """An honest fp32 kernel's error (``forward_precision``): each selected logp as the
    logp op's fp32 reference computes it (max subtraction, one fp32 sum), then the ratio
    and the KL in fp32. Not the gold's formula in fp32: its two logsumexps of nearly
    equal rows round alike and cancel in d, an accident no fused kernel shares (the
    torch candidate's kl erred 35x as much as that on bf16 logits)."""
    from kernelcheck.ops.logp import reference_fp32 as logp_fp32

    safe = torch.where(attention_mask, action_ids, torch.zeros_like(action_ids))
    lp = logp_fp32(policy_logits, safe)
    lr = logp_fp32(ref_logits.detach(), safe)
    zero = torch.zeros_like(lp)
    delta = torch.where(attention_mask, lp - old_logps.float(), zero)
    diff = torch.where(attention_mask, lr - lp, zero)
    return torch.exp(delta), torch.exp(diff) - diff - 1


def gradient_scale(upstream, policy_logits, ref_logits, action_ids, attention_mask, old_logps):
    """What ``backward_precision`` measures an entry's error against: the size of the
    terms of the policy logits' gradient ``c * (onehot - p)``, ``|c| * (onehot + p)``,
    with ``c = g_ratio * ratio - g_kl * (exp(d) - 1)`` per position (0 where masked).
    The target entry ``c * (1 - p_t)`` cancels at a confident token (p_t near 1): an
    honest fp32 kernel rounds p_t by an ulp of 1 there (see logp's ``gradient_scale``)."""
    safe = torch.where(attention_mask, action_ids, torch.zeros_like(action_ids))
    ratio, _ = gold(policy_logits, ref_logits, action_ids, attention_mask, old_logps)
    lp = _selected_logp(policy_logits, safe)
    lr = _selected_logp(ref_logits, safe)
    c = torch.zeros_like(lp)
    if upstream[0] is not None:
        c = c + upstream[0] * ratio
    if len(upstream) > 1 and upstream[1] is not None:
        c = c - upstream[1] * torch.expm1(lr - lp)
    c = torch.where(attention_mask, c, torch.zeros_like(c)).abs().unsqueeze(-1)
    scale = torch.softmax(policy_logits, dim=-1).mul_(c)
    return {"policy_logits": scale.scatter_add_(-1, safe.unsqueeze(-1), c)}
