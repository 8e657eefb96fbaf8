"""The README's worked example of a user's own candidate, outside the package."""

import torch


def logp(logits, target):
    x = logits.float()
    valid = (target >= 0) & (target < x.shape[-1])
    m = x.amax(-1, keepdim=True)
    lse = torch.log(torch.exp(x - m).sum(-1))
    sel = x.gather(-1, target.clamp(0, x.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) - m.squeeze(-1)
    return torch.where(valid, sel - lse, 0.0)
