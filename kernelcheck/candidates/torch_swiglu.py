"""The ``torch`` candidate of swiglu: ``silu(gate) * up`` in fp32, rounded once.

Batch-invariant on the CPU by construction. torch's CPU ``sigmoid`` computes whole SIMD
vectors and a scalar tail, and the two give other bits for some inputs: on a flat
``[rows, inter]`` tensor a row's elements fall wherever the batch puts them, so a row's
result depends on the batch (kernelcheck's ``forward_invariance`` catches a plain
``g * torch.sigmoid(g) * u`` at inter = 1000). Here every row is padded to a multiple of
``LANES`` columns and evaluated in single-threaded chunks of whole padded rows (below
torch's parallel grain), so each element always sits in the same vector lane.
"""

from __future__ import annotations

import torch

from kernelcheck.candidates.honest import fixed_lanes

IMPLEMENTATION = "torch:fp32-swiglu(padded rows)"


def _silu_parts(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sigmoid(g), silu(g))`` of fp32 rows; only the sigmoid needs fixed lanes (a
    product is exact IEEE arithmetic on either path)."""
    sig = fixed_lanes(torch.sigmoid, g)
    return sig, g * sig


class _Swiglu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        g = gate.float().reshape(-1, gate.shape[-1])
        u = up.float().reshape(-1, up.shape[-1])
        _, silu = _silu_parts(g)
        ctx.save_for_backward(gate, up)
        return (silu * u).to(gate.dtype).view(gate.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gate, up = ctx.saved_tensors
        n = gate.shape[-1]
        g = gate.float().reshape(-1, n)
        u = up.float().reshape(-1, n)
        dy = grad.float().reshape(-1, n)
        sig, silu = _silu_parts(g)
        # d silu / dg = s + g s (1 - s) = s + silu (1 - s)
        dsilu = sig + silu * (1 - sig)
        d_gate = (dy * u * dsilu).to(gate.dtype).view(gate.shape)
        d_up = (dy * silu).to(up.dtype).view(up.shape)
        return d_gate, d_up


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return _Swiglu.apply(gate, up)
