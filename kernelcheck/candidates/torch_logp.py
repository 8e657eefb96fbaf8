"""The ``torch`` candidate: the fp32 logp formula in plain PyTorch ops, on any device."""

from __future__ import annotations

import math

import torch

from kernelcheck.candidates.honest import exp_for, fixed_order_row_sum

IMPLEMENTATION = "torch:fp32-formula"
ROW_CHUNK_ELEMENTS = 1 << 22  # one row chunk: a 16 MiB fp32 buffer (measured: 4 MiB chunks
# were 15-25% slower at the Qwen3 shape, from per-op overhead on 4x as many ops)


def _row_chunks(rows: int, vocab: int):
    step = max(1, ROW_CHUNK_ELEMENTS // max(1, vocab))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


class _Logp(torch.autograd.Function):
    """Row-chunked forward and backward, so memory stays bounded at the Qwen3 vocab."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, temperature: float, mask):
        # with a temperature T: softmax((x - max) / T), dividing after the exact max
        # subtraction (x / T first would round 1e4-sized logits by ~1e-3); T = 1 divides
        # nothing, so every bit is as without it
        tempered = temperature != 1.0
        vocab = logits.shape[-1]
        x2 = logits.reshape(-1, vocab)
        t1 = target.reshape(-1).long()
        valid = (t1 >= 0) & (t1 < vocab)
        if mask is not None:  # a masked-out position selects nothing: exactly 0.0
            valid &= mask.reshape(-1).to(device=valid.device, dtype=torch.bool)
        safe = torch.where(valid, t1, torch.zeros_like(t1))
        selected = x2.gather(-1, safe.unsqueeze(-1)).squeeze(-1).float()
        row_max = torch.empty(x2.shape[0], dtype=torch.float32, device=logits.device)
        log_sum = torch.empty_like(row_max)
        exp_ = exp_for(logits.dtype)
        # one fp32 buffer for every chunk: a fresh multi-MB tensor per chunk costs its
        # page faults each time (allocations this size come straight from mmap)
        buf = torch.empty(0, dtype=torch.float32, device=logits.device)
        for sl in _row_chunks(x2.shape[0], vocab):
            x = x2[sl]
            m = x.amax(dim=-1, keepdim=True).float()
            if buf.shape[0] < x.shape[0]:
                buf = torch.empty(x.shape, dtype=torch.float32, device=logits.device)
            e = buf[: x.shape[0]]
            if x.dtype == torch.float32:
                torch.sub(x, m, out=e)
            else:
                e.copy_(x).sub_(m)
            if tempered:
                e.div_(temperature)
            # max first, then the log-sum: exact for rows offset far from zero
            log_sum[sl] = torch.log(fixed_order_row_sum(exp_(e)))
            row_max[sl] = m.squeeze(-1)
        shifted = selected - row_max
        if tempered:
            shifted = shifted / temperature
        out = torch.where(valid, shifted - log_sum, torch.zeros_like(log_sum))
        ctx.save_for_backward(x2, safe, valid, row_max, log_sum)
        ctx.lead = tuple(logits.shape)
        ctx.temperature = temperature
        return out.view(logits.shape[:-1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x2, safe, valid, row_max, log_sum = ctx.saved_tensors
        temperature = ctx.temperature
        g = grad_out.reshape(-1).float()
        if temperature != 1.0:
            g = g / temperature  # d/dx of f((x - max) / T)
        coef = torch.where(valid, g, torch.zeros_like(g))
        grad = torch.empty_like(x2)
        exp_ = exp_for(x2.dtype)
        buf = torch.empty(0, dtype=torch.float32, device=x2.device)
        for sl in _row_chunks(x2.shape[0], x2.shape[1]):
            # d logp / d x = onehot(target) - softmax(x), zero on out-of-range rows
            x, p = x2[sl], grad[sl]  # computed in place in the gradient's rows: no copy
            if x.dtype != torch.float32:  # a bf16/fp16 gradient: an fp32 chunk, rounded once
                if buf.shape[0] < x.shape[0]:
                    buf = torch.empty(x.shape, dtype=torch.float32, device=x2.device)
                p = buf[: x.shape[0]]
            if x.dtype == torch.float32:
                torch.sub(x, row_max[sl, None], out=p)
            else:  # exact upcast, then the one fp32 subtraction: torch.sub with mixed dtypes
                p.copy_(x).sub_(row_max[sl, None])  # takes a scalar path, 5x slower
            if temperature != 1.0:
                p.div_(temperature)
            exp_(p.sub_(log_sum[sl, None])).mul_(-coef[sl, None])
            p.scatter_add_(-1, safe[sl].unsqueeze(-1), coef[sl].unsqueeze(-1))
            if x.dtype != torch.float32:
                grad[sl].copy_(p)
        return grad.view(ctx.lead), None, None, None


def logp(
    logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(x[t] - max) - log(sum(exp(x - max)))`` in fp32 with ``x = logits / temperature``;
    0.0 where ``t`` is out of range or ``mask`` is false."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logits.dim() < 1 or tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal the logits lead shape "
            f"{tuple(logits.shape[:-1])}"
        )
    if math.prod(logits.shape) == 0 and logits.shape[-1] == 0:
        raise ValueError("logits vocab dimension must be > 0")
    if mask is not None and tuple(mask.shape) != tuple(target.shape):
        raise ValueError(
            f"mask shape {tuple(mask.shape)} must equal the target shape {tuple(target.shape)}"
        )
    return _Logp.apply(logits, target, float(temperature), mask)
