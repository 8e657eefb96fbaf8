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
