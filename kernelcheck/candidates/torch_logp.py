"""The ``torch`` candidate: the fp32 logp formula in plain PyTorch ops, on any device."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

IMPLEMENTATION = "torch:fp32-formula"
SUM_CHUNK = 1024
ROW_CHUNK_ELEMENTS = 1 << 24  # fp32 temporaries of one row chunk: 64 MiB each


def fixed_order_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim in an order that depends on its length alone.

    A plain ``x.sum(-1)`` on the CPU splits a long row across threads when there are
    fewer rows than threads, so a row's sum depends on the batch size (kernelcheck's
    ``backward_invariance`` catches it at V=151936). Summing fixed 1024-element chunks,
    then the chunk sums, keeps every reduction below torch's split threshold.
    """
    vocab = x.shape[-1]
    if vocab <= SUM_CHUNK:
        return x.sum(dim=-1)
    pad = (-vocab) % SUM_CHUNK
    chunks = F.pad(x, (0, pad)).unflatten(-1, (-1, SUM_CHUNK))  # zero padding adds exactly 0
    return chunks.sum(dim=-1).sum(dim=-1)


def _row_chunks(rows: int, vocab: int):
    step = max(1, ROW_CHUNK_ELEMENTS // max(1, vocab))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


class _Logp(torch.autograd.Function):
    """Row-chunked forward and backward, so memory stays bounded at the Qwen3 vocab."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        x2 = logits.reshape(-1, vocab)
        t1 = target.reshape(-1).long()
        valid = (t1 >= 0) & (t1 < vocab)
        safe = torch.where(valid, t1, torch.zeros_like(t1))
        out = torch.zeros(x2.shape[0], dtype=torch.float32, device=logits.device)
        row_max = torch.empty_like(out)
        log_sum = torch.empty_like(out)
        for sl in _row_chunks(x2.shape[0], vocab):
            x = x2[sl].float()
            m = x.amax(dim=-1, keepdim=True)
            shifted = x - m
            ls = torch.log(fixed_order_row_sum(torch.exp(shifted)))
            # max first, then the log-sum: exact for rows offset far from zero
            selected = shifted.gather(-1, safe[sl].unsqueeze(-1)).squeeze(-1)
            out[sl] = torch.where(valid[sl], selected - ls, torch.zeros_like(ls))
            row_max[sl], log_sum[sl] = m.squeeze(-1), ls
        ctx.save_for_backward(x2, safe, valid, row_max, log_sum)
        ctx.lead = tuple(logits.shape)
        return out.view(logits.shape[:-1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x2, safe, valid, row_max, log_sum = ctx.saved_tensors
        g = grad_out.reshape(-1).float()
        grad = torch.empty_like(x2)
        for sl in _row_chunks(x2.shape[0], x2.shape[1]):
            # d logp / d x = onehot(target) - softmax(x), zero on out-of-range rows
            p = torch.exp((x2[sl].float() - row_max[sl, None]) - log_sum[sl, None])
            onehot = torch.zeros_like(p).scatter_(-1, safe[sl].unsqueeze(-1), 1.0)
            coef = torch.where(valid[sl], g[sl], torch.zeros_like(g[sl]))
            grad[sl] = (coef[:, None] * (onehot - p)).to(x2.dtype)
        return grad.view(ctx.lead), None


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``(x[t] - max) - log(sum(exp(x - max)))`` in fp32; 0.0 where ``t`` is out of range."""
    if logits.dim() < 1 or tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal the logits lead shape "
            f"{tuple(logits.shape[:-1])}"
        )
    if math.prod(logits.shape) == 0 and logits.shape[-1] == 0:
        raise ValueError("logits vocab dimension must be > 0")
    return _Logp.apply(logits, target)
