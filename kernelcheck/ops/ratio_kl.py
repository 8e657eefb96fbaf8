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
    """The same formula in fp32: an honest kernel's error (``forward_precision``)."""
    f = (t.float() for t in (policy_logits, ref_logits))
    return tuple(o.float() for o in gold(*f, action_ids, attention_mask, old_logps.float()))
