"""The ``torch`` candidate of ratio_kl: selected logps by the batch-invariant ``torch``
logp candidate (fixed-order row sums), then the ratio and the KL in fp32."""

from __future__ import annotations

import torch

from kernelcheck.candidates.torch_logp import logp

IMPLEMENTATION = "torch:fp32-ratio_kl"


def ratio_kl(policy_logits, ref_logits, action_ids, attention_mask, old_logps):
    lp, lr = selected_logps(policy_logits, ref_logits, action_ids, attention_mask)
    return ratio_and_kl(lp, lr, attention_mask, old_logps)


def selected_logps(policy_logits, ref_logits, action_ids, attention_mask, logp_of=logp):
    """The policy's logps of the actions (with grad) and the reference's (without), by
    ``logp_of``; an id out of range at an active position raises."""
    vocab = policy_logits.shape[-1]
    bad = attention_mask & ((action_ids < 0) | (action_ids >= vocab))
    if bool(bad.any()):
        raise ValueError(f"action id outside [0, {vocab}) at an active (unmasked) position")
    safe = torch.where(attention_mask, action_ids, torch.zeros_like(action_ids))
    lp = logp_of(policy_logits, safe)
    with torch.no_grad():
        lr = logp_of(ref_logits, safe)
    return lp, lr


def ratio_and_kl(lp, lr, attention_mask, old_logps, kl_of=None):
    """exp(lp - old) and kl_of(d) (d = lr - lp; default exp(d) - d - 1) in fp32; 1 and 0
    where masked."""
    zero = torch.zeros_like(lp)
    delta = torch.where(attention_mask, lp - old_logps.float(), zero)
    diff = torch.where(attention_mask, lr - lp, zero)
    return torch.exp(delta), (kl_of or _k3)(diff)


def _k3(d):
    """Schulman's k3 estimator of KL(policy || reference) at one token."""
    return torch.exp(d) - d - 1
