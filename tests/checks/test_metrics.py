"""The small pure functions behind the verdicts."""

from __future__ import annotations

import pytest
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


def _fp32_steps_from(value: float, steps: int) -> float:
    """The fp32 value ``steps`` steps above ``value`` (positive values)."""
    return float(torch.tensor(value).view(torch.int32).add(steps).view(torch.float32))


def test_ulp_log2_histogram_buckets_steps_by_bit_length():
    from kernelcheck.checks.metrics import ULP_BUCKETS, ulp_bucket_label, ulp_log2_histogram

    gold = torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 5.0, float("inf"), 3.0], dtype=torch.float64)
    steps = [0, 1, 3, 1000]  # from 1.0: buckets 0, 1, 2 (2-3), 10 (512-1023)
    cand = torch.tensor(
        [*(_fp32_steps_from(1.0, k) for k in steps), 2.0, -0.0, float("nan"), float("inf"), 4.0]
    )
    counts = ulp_log2_histogram(cand, gold)
    assert counts.shape == (ULP_BUCKETS,)
    want = [0] * ULP_BUCKETS
    want[0] = 4  # 1.0, 2.0, -0.0 against 0.0, and inf where the gold is inf
    want[1], want[2], want[10] = 1, 1, 1
    want[23] = 1  # 4.0 against 3.0: 2^22 fp32 steps (0x40800000 - 0x40400000), bit length 23
    want[-1] = 1  # NaN where the gold is finite
    assert counts.tolist() == want
    assert [ulp_bucket_label(k) for k in (0, 1, 2, 10, 32, 33)] == [
        "0", "1", "2-3", "512-1023", ">=2^31", "NaN/Inf",
    ]  # fmt: skip


def test_ulp_log2_histogram_counts_steps_of_the_candidate_dtype():
    from kernelcheck.checks.metrics import ulp_log2_histogram

    gold = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    for dtype in (torch.bfloat16, torch.float16):
        one = torch.tensor([1.0], dtype=dtype)
        up = torch.nextafter(one, torch.tensor([2.0], dtype=dtype))
        cand = torch.cat([one, up, torch.nextafter(up, torch.tensor([2.0], dtype=dtype))])
        assert ulp_log2_histogram(cand, gold).tolist()[:3] == [1, 1, 1], dtype
    huge = torch.tensor([3e38], dtype=torch.float64)  # opposite signs: past 2^31 steps
    assert ulp_log2_histogram(-huge.float(), huge).tolist()[32] == 1


def test_error_stats_profile_equals_the_pure_functions():
    from kernelcheck.checks.metrics import ErrorProfile, column_bucket_max, ulp_log2_histogram

    torch.manual_seed(1)
    gold = torch.randn(12, 200, dtype=torch.float64)
    cand = (gold + 1e-6 * torch.randn(12, 200, dtype=torch.float64)).float()
    cand[7, 3] = float("nan")  # the non-finite path of ErrorStats.update too
    st = ErrorStats(profile=ErrorProfile(["normal", "large", "heavy"]))
    st.update(cand[:5], gold[:5])
    st.update(cand[5:], gold[5:], row_offset=5)
    p = st.profile
    assert p.ulp_counts.tolist() == ulp_log2_histogram(cand, gold).tolist()
    err = (cand.double() - gold).abs().nan_to_num(0.0)
    body, tail = column_bucket_max(err)
    assert torch.equal(p.column_max, body) and p.tail_max == tail
    for k, name in enumerate(["normal", "large", "heavy"]):
        assert p.by_distribution[name] == float(err[k::3].max())
    d = p.to_dict()
    assert d["ulp"]["unit"] == "fp32" and d["ulp"]["nonfinite"] == 1
    assert d["columns"] == {
        "columns": 200, "width": 3, "max_abs": d["columns"]["max_abs"], "tail_start": 192,
        "tail_max_abs": float(f"{tail:.3g}"),
    }  # fmt: skip
    merged = ErrorProfile(["normal"])
    merged.merge(p)
    merged.merge(p)
    assert merged.ulp_counts.tolist() == (2 * p.ulp_counts).tolist()
    assert merged.by_distribution == p.by_distribution


def test_column_bucket_max_finds_the_column_and_the_tail():
    from kernelcheck.checks.metrics import column_bucket_max

    err = torch.zeros(5, 130, dtype=torch.float64)  # 64 buckets of 2 columns, then 2 more
    err[2, 5] = 3.0
    body, tail = column_bucket_max(err)
    assert body.shape == (64,) and int(body.argmax()) == 2 and float(body.max()) == 3.0
    assert tail == 0.0
    err[4, 129] = 7.0
    assert column_bucket_max(err)[1] == 7.0
    few, none = column_bucket_max(torch.arange(10.0).reshape(1, 10))  # one bucket per column
    assert few.tolist() == list(range(10)) and none is None
    even, none = column_bucket_max(torch.ones(2, 128))
    assert even.shape == (64,) and none is None


def test_max_by_row_class_follows_the_row_offset():
    from kernelcheck.checks.metrics import max_by_row_class

    err = torch.tensor([[1.0, 0.0], [0.0, 5.0], [2.0, 0.0], [0.0, 0.0]])
    assert max_by_row_class(err, 2) == [2.0, 5.0]
    assert max_by_row_class(err, 2, row_offset=1) == [5.0, 2.0]  # row 0 is row 1 overall
    assert max_by_row_class(err[:1], 3) == [1.0, None, None]


def test_position_counts_bucket_the_positions_of_a_batch():
    from kernelcheck.checks.invariance import position_counts

    bad = torch.zeros(300, dtype=torch.bool)
    bad[[0, 18, 19, 299]] = True
    width, compared, mismatched = position_counts(bad)
    assert width == 19 and len(compared) == 16 and sum(compared) == 300
    assert mismatched[:2] == [2, 1] and mismatched[-1] == 1 and sum(mismatched) == 4
    assert position_counts(torch.tensor([False, True])) == (1, [1, 1], [0, 1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_step_distance_and_its_histogram_agree_with_the_plain_integer_order(dtype):
    """The bitwise blend against |ordered(c) - ordered(g)| in int64, on random bit
    patterns of every sign, with zeros of both signs and, in fp32, distances past 2^24
    (the histogram's double path) and past 2^31 (wrapped)."""
    from kernelcheck.checks.metrics import ULP_BUCKETS, step_distance, ulp_log2_histogram

    view = torch.int32 if dtype == torch.float32 else torch.int16
    bits_ = 32 if dtype == torch.float32 else 16
    gen = torch.Generator().manual_seed(5)
    lo, hi = -(2 ** (bits_ - 1)), 2 ** (bits_ - 1) - 1
    raw = torch.randint(lo, hi, (2, 20000), generator=gen, dtype=torch.int64).to(view)
    c, g = raw[0].view(dtype), raw[1].view(dtype)
    finite = torch.isfinite(c) & torch.isfinite(g)
    c, g = c[finite], g[finite]
    c = torch.cat([c, torch.tensor([0.0, -0.0, 1.0], dtype=dtype)])
    g = torch.cat([g, torch.tensor([-0.0, 0.0, 1.0], dtype=dtype)])
    g64 = g.double()

    def ordered(t):
        i = t.view(view).to(torch.int64)
        return torch.where(i < 0, -(i & (2 ** (bits_ - 1) - 1)), i)

    want = (ordered(c) - ordered(g)).abs()
    dist, wrapped = step_distance(c, g64)
    got = dist.to(torch.int64)
    if wrapped is not None:
        got[wrapped] = want[wrapped]  # the callers take those through the int64 path
        assert bool((want[wrapped] >= 2**31).all())
    assert torch.equal(got, want)
    assert want.max() >= (2**24 if dtype == torch.float32 else 1)
    lengths = torch.tensor([int(d).bit_length() for d in want.tolist()])
    expect = torch.bincount(lengths.clamp(max=32), minlength=ULP_BUCKETS)
    assert ulp_log2_histogram(c, g64).tolist() == expect.tolist()
