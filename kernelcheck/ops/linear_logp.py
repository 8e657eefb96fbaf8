"""linear_logp: the lm_head matmul fused with the selected-token logp.

``logits = hidden @ weight.T (+ bias)`` ([T, H] x [V, H] -> [T, V]), then
``logits[target] - logsumexp(logits)``, fp32 out. Out-of-range targets raise (upstream
masks padding before this op).
"""

from __future__ import annotations

import torch

from kernelcheck.ops import logp as logp_op


def _linear(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """``F.linear``: the lm_head's logits, ``bias`` added to every token's row."""
    logits = hidden @ weight.T
    return logits if bias is None else logits + bias


def gold(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact in the inputs' precision (float64 from kernelcheck); differentiable in hidden
    and in the shared weight, whose gradient sums over every token."""
    return logp_op.gold(_linear(hidden, weight, bias), target)


def reference_fp32(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
):
    """The matmul (and bias) and the logp in fp32, as upstream does for bf16/fp16 operands."""
    b = None if bias is None else bias.float()
    return logp_op.reference_fp32(_linear(hidden.float(), weight.float(), b), target)
