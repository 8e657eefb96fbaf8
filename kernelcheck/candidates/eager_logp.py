"""The ``eager`` candidate: logp as most PyTorch code writes it, ``log_softmax`` + ``gather``.

The fair speed baseline of ``kernelcheck bench`` (``bench_only`` in the spec): it is
what a fused kernel replaces. It is not a verified candidate: on the CPU its row sum
splits over threads when rows are few (not batch-invariant), and its sequential fp32
sum loses ~2e-5 on LM-scale rows at the Qwen3 vocab. ``kernelcheck run`` checks it only
when named (``--candidate eager``), which shows both.
"""

from __future__ import annotations

import torch

IMPLEMENTATION = "torch:log_softmax+gather"


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    x = logits.float()
    vocab = x.shape[-1]
    valid = (target >= 0) & (target < vocab)
    safe = torch.where(valid, target, torch.zeros_like(target))
    out = torch.log_softmax(x, dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, out, torch.zeros_like(out))
