"""The public helpers for honest candidates keep a row's bits whatever its batch."""

from __future__ import annotations

import torch

from kernelcheck.candidates import honest
from kernelcheck.candidates.honest import fixed_lanes, fixed_order_row_sum, pairwise_row_sum
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


def _tree_sum(values: list) -> float:
    """The pairwise tree spelled out one float32 add at a time: halves added element by
    element, an odd last element carried up."""
    import numpy as np

    v = [np.float32(x) for x in values]
    while len(v) > 1:
        half = len(v) // 2
        v = [v[i] + v[half + i] for i in range(half)] + v[2 * half :]
    return v[0]


def test_pairwise_row_sum_is_the_fixed_tree_and_batch_invariant():
    g = torch.Generator().manual_seed(3)
    for n in (1, 2, 3, 5, 8, 13, 64, 257):
        x = torch.randn(4, n, generator=g) * torch.logspace(0, 6, n)  # rounding matters
        got = pairwise_row_sum(x)
        want = torch.tensor([float(_tree_sum(row.tolist())) for row in x])
        assert torch.equal(bits(got), bits(want.float())), n
    x = torch.randn(16, 151936, generator=g)
    assert _alone_vs_batched(pairwise_row_sum, x) == 0
    flat = torch.randn(16 * 151936 + 3, generator=g)
    misaligned = flat[3:].view(16, 151936)  # a row start off the vector alignment
    assert torch.equal(
        bits(pairwise_row_sum(misaligned)), bits(pairwise_row_sum(misaligned.clone()))
    )
    assert torch.allclose(pairwise_row_sum(x).double(), x.double().sum(-1), atol=1e-2)
    assert pairwise_row_sum(torch.zeros(2, 0)).shape == (2,)
    half = x[:2].to(torch.bfloat16)  # 16-bit rows are summed in fp32, rounded once
    got = pairwise_row_sum(half)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, pairwise_row_sum(half.float()).to(torch.bfloat16))


def test_fixed_order_row_sum_takes_the_tree_off_the_cpu(monkeypatch):
    """On a GPU or NPU (here a meta tensor stands in for one: no kernel runs) the row sum
    is the element-wise tree; on the CPU the 1024-chunk sums."""
    seen = []
    monkeypatch.setattr(
        honest, "pairwise_row_sum", lambda t: seen.append(t.device.type) or t[..., 0]
    )
    fixed_order_row_sum(torch.empty(2, 3000, device="meta"))
    fixed_order_row_sum(torch.ones(2, 3000))
    assert seen == ["meta"]


def test_fixed_lanes_is_batch_invariant_where_plain_sigmoid_is_not():
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0))
    assert _alone_vs_batched(torch.sigmoid, x) > 0  # torch's SIMD body vs scalar tail
    assert _alone_vs_batched(lambda t: fixed_lanes(torch.sigmoid, t), x) == 0
    assert torch.allclose(fixed_lanes(torch.sigmoid, x), torch.sigmoid(x), rtol=1e-6, atol=0)
