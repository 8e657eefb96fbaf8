"""The public helpers for honest candidates keep a row's bits whatever its batch."""

from __future__ import annotations

import torch

from kernelcheck.candidates.honest import fixed_lanes, fixed_order_row_sum
from kernelcheck.checks.metrics import bits


def _alone_vs_batched(fn, x: torch.Tensor) -> int:
    """How many rows of ``x`` get other bits alone than in the whole batch."""
    batched = fn(x)
    alone = torch.cat([fn(x[i : i + 1]) for i in range(x.shape[0])])
    return int((bits(alone) != bits(batched)).reshape(x.shape[0], -1).any(1).sum())


def test_fixed_order_row_sum_is_batch_invariant_at_the_qwen3_vocab():
    x = torch.randn(16, 151936, generator=torch.Generator().manual_seed(0))
    assert _alone_vs_batched(fixed_order_row_sum, x) == 0
    # and it is a sum: close to float64's
    assert torch.allclose(fixed_order_row_sum(x).double(), x.double().sum(-1), atol=1e-2)


def test_fixed_lanes_is_batch_invariant_where_plain_sigmoid_is_not():
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0))
    assert _alone_vs_batched(torch.sigmoid, x) > 0  # torch's SIMD body vs scalar tail
    assert _alone_vs_batched(lambda t: fixed_lanes(torch.sigmoid, t), x) == 0
    assert torch.allclose(fixed_lanes(torch.sigmoid, x), torch.sigmoid(x), rtol=1e-6, atol=0)
