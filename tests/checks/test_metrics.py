"""The small pure functions behind the verdicts."""

from __future__ import annotations

import torch

from kernelcheck.checks.metrics import (
    ErrorStats,
    bits,
    first_bit_difference,
    fp32_ulp,
    row_digests,
    ulp_distance,
)


def test_bitwise_tells_plus_and_minus_zero_apart():
    a, b = torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])
    assert torch.allclose(a, b, atol=0, rtol=0)  # what the old harness used
    assert (bits(a) != bits(b)).tolist() == [True, False]
    assert "0x00000000 vs 0x80000000" in first_bit_difference(a, b)


def test_ulp_distance_counts_fp32_steps():
    g = torch.tensor([1.0], dtype=torch.float64)
    c = torch.nextafter(torch.tensor([1.0]), torch.tensor([2.0]))
    assert int(ulp_distance(c, g)[0]) == 1
    assert int(ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0], dtype=torch.float64))[0]) == 0
    assert fp32_ulp(1.0) == 2**-23


def test_error_stats_tolerance_nan_and_inf():
    st = ErrorStats(atol=1e-3, rtol=0.0)
    gold = torch.tensor([[1.0, 2.0, float("-inf")], [0.0, 5.0, 1.0]], dtype=torch.float64)
    cand = torch.tensor([[1.0005, 2.1, float("-inf")], [float("nan"), 5.0, 1.0]])
    st.update(cand, gold)
    assert st.n == 6 and st.n_bad == 2 and st.n_nonfinite == 1
    assert st.first_bad == (0, 1) and st.first_nonfinite == (1, 0)
    assert abs(st.max_abs - 0.1) < 1e-6


def test_error_stats_row_offset_locates_chunks():
    st = ErrorStats(atol=0.0)
    st.update(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.float64), row_offset=10)
    st.update(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2, dtype=torch.float64), row_offset=12)
    assert st.first_bad == (12, 1)


def test_max_ulp_distance_equals_the_int64_definition():
    from kernelcheck.checks.metrics import max_ulp_distance, ulp_distance

    torch.manual_seed(0)
    g = torch.randn(1000, dtype=torch.float64) * 10
    for c in (
        g.float(),
        (g + 1e-6 * torch.randn(1000, dtype=torch.float64)).float(),
        -g.float(),  # opposite signs everywhere
        torch.where(g > 0, g, -0.0 * g).float(),  # -0.0 against small negative golds
    ):
        assert max_ulp_distance(c, g) == int(ulp_distance(c, g).max())
    assert max_ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0], dtype=torch.float64)) == 0
    huge = torch.tensor([3e38, -3e38], dtype=torch.float64)  # opposite signs past 2^31 steps
    assert max_ulp_distance(-huge.float(), huge) == int(ulp_distance(-huge.float(), huge).max())


def test_row_digests_see_every_single_bit_flip():
    """One changed element always changes its row's digest, whichever bit, row or dtype;
    equal rows always give equal digests, and -0.0 is not +0.0."""
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(5, 1031, generator=gen).to(dtype)
        base = row_digests(x)
        assert torch.equal(base, row_digests(x.clone()))
        width = 8 * x.element_size()
        for row, col, bit in [(0, 0, 0), (2, 1030, width - 1), (4, 517, 7), (1, 3, width // 2)]:
            y = x.clone()
            y.view(bits(y).dtype)[row, col] ^= 1 << bit if bit < width - 1 else -(1 << bit)
            changed = (row_digests(y) != base).nonzero().flatten().tolist()
            assert changed == [row], (dtype, row, col, bit)
    z = torch.zeros(2, 4)
    z[1, 2] = -0.0
    d = row_digests(z)
    assert d[0] != d[1]


def test_row_digests_leave_their_input_alone():
    for t in (torch.arange(12, dtype=torch.int64).reshape(3, 4), torch.randn(3, 4)):
        before = t.clone()
        row_digests(t)
        assert torch.equal(bits(t), bits(before))


def test_row_digests_in_chunks_equal_whole(monkeypatch):
    from kernelcheck.checks import metrics

    x = torch.randn(37, 300)
    whole = row_digests(x)
    monkeypatch.setattr(metrics, "DIGEST_CHUNK_ELEMENTS", 1000)  # 3 rows a chunk
    assert torch.equal(row_digests(x), whole)
