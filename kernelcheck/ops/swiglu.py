"""swiglu: ``silu(gate) * up``, elementwise, output like ``gate``."""

from __future__ import annotations

import torch


def gold(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Exact in ``gate``'s precision (float64 from kernelcheck); differentiable."""
    return gate * torch.sigmoid(gate) * up


def reference_fp32(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """In fp32, rounded once to the output dtype."""
    g = gate.float()
    return (g * torch.sigmoid(g) * up.float()).to(gate.dtype)
