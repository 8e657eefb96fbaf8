"""The ``torch`` candidate of swiglu: ``silu(gate) * up`` in fp32, rounded once."""

from __future__ import annotations

import torch

IMPLEMENTATION = "torch:fp32-swiglu"


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    g = gate.float()
    return (g * torch.sigmoid(g) * up.float()).to(gate.dtype)
