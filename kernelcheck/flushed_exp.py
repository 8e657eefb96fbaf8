"""``exp`` without its slow path: arguments whose result would be subnormal give +0.

Shared numerics of the gold (``ops/logp.py`` floors its float64 softmax with it) and of
the honest torch candidates (``candidates/honest.py`` re-exports it for users): both
stages use it, so it lives below both.
"""

from __future__ import annotations

import functools
import math

import torch

FLUSH_BELOW = -87.0  # exp(-87) = 1.6e-38, above fp32's smallest normal (1.2e-38)


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
