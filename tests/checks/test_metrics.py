"""The small pure functions behind the verdicts."""

from __future__ import annotations

import torch

from kernelcheck.checks.metrics import (
    ErrorStats,
    bits,
    first_bit_difference,
    fp32_ulp,
    row_mismatches,
    ulp_distance,
)


def test_bitwise_tells_plus_and_minus_zero_apart():
    a, b = torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])
    assert torch.allclose(a, b, atol=0, rtol=0)  # what the old harness used
    assert (bits(a) != bits(b)).tolist() == [True, False]
    assert "0x00000000 vs 0x80000000" in first_bit_difference(a, b)


def test_row_mismatches_per_row():
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = 1e-30
    assert row_mismatches(a, b).tolist() == [False, True, False]


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
