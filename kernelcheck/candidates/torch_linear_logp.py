"""The ``torch`` candidate of linear_logp, batch-invariant on the CPU.

A BLAS matmul picks its kernel and blocking by the number of rows (a single token may
take a matrix-vector path), so a token's logits could depend on how many tokens share
the call. Here every logit is ``fixed_order_row_sum(hidden[t] * weight[v])`` over H and
the logp is the ``torch`` logp candidate's; the hidden gradient sums over V the same way,
and the weight gradient over the tokens.
Slow (a [tokens, V, H] product per token chunk), and honest: the yardstick, not a kernel.
"""

from __future__ import annotations

import torch

from kernelcheck.candidates.honest import fixed_order_row_sum
from kernelcheck.candidates.torch_logp import logp

IMPLEMENTATION = "torch:fp32-linear_logp(fixed-order dot products)"
CHUNK_ELEMENTS = 1 << 22  # one token chunk's [t, V, H] product: 16 MiB of fp32


def _row_chunks(rows: int, per_row: int):
    """Slices of ``rows`` whose products of ``per_row`` elements each fit CHUNK_ELEMENTS."""
    step = max(1, CHUNK_ELEMENTS // max(1, per_row))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


def _logits(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty(h.shape[0], w.shape[0], dtype=torch.float32, device=h.device)
    for sl in _row_chunks(h.shape[0], w.numel()):
        out[sl] = fixed_order_row_sum(h[sl, None, :] * w[None, :, :])
    return out


def _weight_gradient(g_logits: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``g_logits.T @ h``, each element summing over the tokens in a fixed order: a BLAS
    splits that sum across threads by the thread count (MKL's sgemm on Intel CPUs), so
    the shared gradient's bits would follow ``torch.get_num_threads()``."""
    g_by_vocab, h_by_hidden = g_logits.T.contiguous(), h.T.contiguous()  # [V, T], [H, T]
    out = torch.empty(g_by_vocab.shape[0], h.shape[1], dtype=torch.float32, device=h.device)
    for sl in _row_chunks(g_by_vocab.shape[0], h.numel()):
        out[sl] = fixed_order_row_sum(g_by_vocab[sl, None, :] * h_by_hidden[None, :, :])
    return out


class _LinearLogp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, bias):
        h = hidden.float().reshape(-1, hidden.shape[-1])
        w = weight.float()
        logits = _logits(h, w)
        if bias is not None:  # F.linear's bias: one fp32 add per logit, after the dot product
            logits += bias.float()
        ctx.save_for_backward(hidden, weight, target, logits)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return logp(logits, target.reshape(-1)).view(hidden.shape[:-1])

    @staticmethod
    def backward(ctx, grad):
        _, _, target, logits = ctx.saved_tensors
        with torch.enable_grad():
            x = logits.detach().requires_grad_(True)
            out = logp(x, target.reshape(-1))
            (g_logits,) = torch.autograd.grad(out, x, grad.reshape(-1).float())
        return gradients_from_logits(ctx, g_logits)


def gradients_from_logits(ctx, g_logits: torch.Tensor) -> tuple:
    """The backward's results from the logits' gradient [N, V] (fp32): d_hidden, d_weight
    and d_bias (where asked), each element a fixed-order sum."""
    hidden, weight, _, _ = ctx.saved_tensors
    h = hidden.float().reshape(-1, hidden.shape[-1])
    w = weight.float()
    d_hidden = torch.empty_like(h)
    for sl in _row_chunks(h.shape[0], w.numel()):
        # [t, H, V]: each hidden gradient element sums over V in a fixed order
        prod = (g_logits[sl, :, None] * w[None, :, :]).transpose(1, 2)
        d_hidden[sl] = fixed_order_row_sum(prod)
    d_weight = _weight_gradient(g_logits, h)
    d_bias = None
    if ctx.needs_input_grad[3]:  # sums over the tokens, in a fixed order
        d_bias = fixed_order_row_sum(g_logits.T.contiguous()).to(ctx.bias_dtype)
    return (
        d_hidden.to(hidden.dtype).view(hidden.shape),
        d_weight.to(weight.dtype),
        None,
        d_bias,
    )


def linear_logp(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
):
    check_arguments(weight, target, bias)
    return _LinearLogp.apply(hidden, weight, target, bias)


def check_arguments(weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None):
    """Upstream's refusals: a bias that is not [V], a target outside [0, V)."""
    vocab = weight.shape[0]
    if bias is not None and tuple(bias.shape) != (vocab,):
        raise ValueError(f"bias must be 1-D [{vocab}], got {tuple(bias.shape)}")
    if bool(((target < 0) | (target >= vocab)).any()):
        raise ValueError(f"target ids must be in [0, {vocab}); mask padding before this op")
