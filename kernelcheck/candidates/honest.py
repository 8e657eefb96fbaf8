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
30-80x slower (:func:`exp_flushed_`, from :mod:`kernelcheck.flushed_exp`, which the
float64 gold uses too).

kernelcheck's ``forward_invariance`` and ``backward_invariance`` catch both
(``tests/candidates/test_honest.py`` shows them, and that the helpers fix them).
"""

from __future__ import annotations

import torch

from kernelcheck.flushed_exp import FLUSH_BELOW, exp_flushed_, exp_for

__all__ = [
    "FLUSH_BELOW",
    "exp_flushed_",
    "exp_for",
    "fixed_lanes",
    "fixed_order_row_sum",
    "pairwise_row_sum",
]

SUM_CHUNK = 1024
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
