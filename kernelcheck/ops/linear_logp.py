"""linear_logp: the lm_head matmul fused with the selected-token logp.

``logits = hidden @ weight.T`` ([T, H] x [V, H] -> [T, V]), then
``logits[target] - logsumexp(logits)``, fp32 out. Out-of-range targets raise (upstream
masks padding before this op).
"""

from __future__ import annotations

import torch

from kernelcheck.ops import logp as logp_op


def gold(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Exact in the inputs' precision (float64 from kernelcheck); differentiable in hidden
    and in the shared weight, whose gradient sums over every token."""
    return logp_op.gold(hidden @ weight.T, target)


def reference_fp32(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor):
    """The matmul and the logp in fp32, as upstream does for bf16/fp16 operands."""
    return logp_op.reference_fp32(hidden.float() @ weight.float().T, target)
