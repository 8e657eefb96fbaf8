"""Helpers for writing honest, batch-invariant torch candidates (public: import them).

Plain torch ops can give a row other bits depending on its batch:

- on the CPU a reduction over a long last dim is split across threads when rows are few
  (``x.sum(-1)`` of one 151936-element row is summed in parts, of 64 rows in one
  pass each); on a GPU the reduction's layout (threads per row, vector width, splits
  across blocks) is picked from the number of rows and the data's alignment:
  :func:`fixed_order_row_sum` sums in an order fixed by the row length, on any device;
- an elementwise transcendental (``torch.sigmoid``) computes whole SIMD vectors and a
  scalar tail with other bits, and where a row's elements fall depends on the batch:
  :func:`fixed_lanes` keeps each element in a lane fixed by its column.

And one of speed: ``exp`` of an argument below about -87 (a softmax term under 1e-38,
common when logits are offset by 1e4 and rounded to bf16) takes a slow path on x86,
30-80x slower (:func:`exp_flushed_`).

kernelcheck's ``forward_invariance`` and ``backward_invariance`` catch both
(``tests/candidates/test_honest.py`` shows them, and that the helpers fix them).
"""

from __future__ import annotations

import functools
import math

import torch

SUM_CHUNK = 1024
FLUSH_BELOW = -87.0  # exp(-87) = 1.6e-38, above fp32's smallest normal (1.2e-38)
LANES = 64  # a multiple of every SIMD width torch uses
CHUNK_ELEMENTS = 32768  # torch's parallel grain: a chunk this size runs on one thread


def fixed_order_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim in an order that depends on its length alone, on any device.

    On the CPU: a plain ``x.sum(-1)`` splits a long row across threads when there are
    fewer rows than threads, so a row's sum depends on the batch size (kernelcheck's
    ``backward_invariance`` catches it at V=151936). Summing fixed 1024-element chunks
    (the tail as one more), then the chunk sums, keeps every reduction below torch's
    split threshold. Elsewhere (CUDA, NPU), where a reduction's layout follows the
    number of rows and the alignment, :func:`pairwise_row_sum`. A choice by device,
    never by batch. Importable for your own honest torch candidates.
    """
    if x.device.type != "cpu":
        return pairwise_row_sum(x)
    vocab = x.shape[-1]
    if vocab <= SUM_CHUNK:
        return x.sum(dim=-1)
    full = vocab - vocab % SUM_CHUNK
    parts = x[..., :full].unflatten(-1, (-1, SUM_CHUNK)).sum(dim=-1)
    if full < vocab:
        parts = torch.cat([parts, x[..., full:].sum(dim=-1, keepdim=True)], dim=-1)
    return parts.sum(dim=-1)


def pairwise_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim by a tree of element-wise adds fixed by its length: the
    first half plus the second, again and again (an odd last element is carried up).

    No reduction kernel is involved: each add is one correctly rounded fp32 addition per
    element, which every device computes alike whatever the batch, the thread layout or
    the alignment. About twice the reads of one pass; the tree is pairwise, so its error
    grows with log2 of the length. 16-bit input is summed in fp32 (as torch's ``sum``
    accumulates it) and the result rounded back once.
    """
    n = x.shape[-1]
    if n == 0:
        return x.sum(dim=-1)
    out_dtype = x.dtype
    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.float()
    while n > 1:
        half = n // 2
        summed = x[..., :half] + x[..., half : 2 * half]
        x = torch.cat([summed, x[..., 2 * half :]], dim=-1) if n % 2 else summed
        n = x.shape[-1]
    return x[..., 0].to(out_dtype)


def fixed_lanes(fn, g: torch.Tensor) -> torch.Tensor:
    """``fn`` (elementwise) of fp32 rows ``[rows, n]``, each element in a vector lane fixed
    by its column: rows padded to ``LANES`` columns, in one-thread chunks of whole rows."""
    rows, n = g.shape
    width = -(-n // LANES) * LANES
    step = max(1, CHUNK_ELEMENTS // width)
    out = torch.empty_like(g)
    for start in range(0, rows, step):
        part = g[start : start + step]
        buf = torch.zeros(part.shape[0], width, dtype=torch.float32, device=g.device)
        buf[:, :n] = part
        out[start : start + step] = fn(buf)[:, :n]
    return out


@functools.cache
def _flushed_at_most(dtype: torch.dtype, below: float) -> float:
    """exp(below) raised by half the relative step to exp of the next argument up in
    ``dtype``: above exp(below) by far more than exp's error (a few ulps), below exp of
    every argument greater than ``below``."""
    b = torch.tensor(below, dtype=dtype)
    step = float(torch.nextafter(b, torch.zeros_like(b)) - b)
    return math.exp(below) * (1 + step / 2)


def exp_flushed_(x: torch.Tensor, below: float = FLUSH_BELOW) -> torch.Tensor:
    """``x.exp_()`` with the results of arguments at or below ``below`` flushed to +0.

    Subnormal and underflowing results of ``exp`` take a slow path here (measured: 0.2 ms
    for 1M arguments at -80, 15.6 ms at -95, 6.4 ms at -128). A softmax term under 2e-38
    cannot change an fp32 sum that holds the row max's term (exactly 1), so flushing it
    keeps the log-sum; a gradient element there becomes 0 instead of a subnormal. Three
    passes and no mask: arguments are clamped to ``below`` (exp of the clamped ones is
    then exp(below), a normal number: 1.65e-38 at the default -87), and results no larger
    than just above it become 0; NaN stays NaN. Per element, so a row's bits never depend
    on its batch. (logp's float64 gold floors its softmax the same way, at -600.)
    """
    at_most = _flushed_at_most(x.dtype, below)
    return torch.nn.functional.threshold_(x.clamp_(min=below).exp_(), at_most, 0.0)


def exp_for(dtype: torch.dtype):
    """The in-place exp for logits of ``dtype``: :func:`exp_flushed_` for bf16/fp16, whose
    rows offset by 1e4 are multiples of 64 apart (most terms on exp's slow path); plain
    for fp32, where the flush's extra passes cost more than they save. A choice by dtype,
    never by batch."""
    return torch.Tensor.exp_ if dtype == torch.float32 else exp_flushed_
