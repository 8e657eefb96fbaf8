"""The single-pass loops of libkc_metrics_cpu give the torch passes' numbers, bit for bit."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.checks import fastpath
from kernelcheck.checks.metrics import ErrorProfile, ErrorStats, row_digests

needs_library = pytest.mark.skipif(
    fastpath._load() is None, reason="libkc_metrics_cpu is not built (pip install -e . builds it)"
)
DISTS = ["a", "b", "c"]


@pytest.fixture(params=["baseline", "avx2"])
def loop(request):
    """Each copy of the comparison loop in turn (the AVX2 one where the build and CPU have it)."""
    if fastpath._load() is None:
        pytest.skip("libkc_metrics_cpu is not built (pip install -e . builds it)")
    default = fastpath.isa()
    if fastpath.use_avx2(request.param == "avx2") != request.param:
        fastpath.use_avx2(default == "avx2")
        pytest.skip("this build or CPU has no AVX2 + F16C copy of the loop")
    yield request.param
    fastpath.use_avx2(default == "avx2")


def _stats(monkeypatch, cand, gold, atol, rtol, torch_passes: bool, split: int = 3):
    monkeypatch.setenv(fastpath.FORCE_TORCH_ENV, "1" if torch_passes else "0")
    st = ErrorStats(atol, rtol, profile=ErrorProfile(DISTS))
    st.update(cand[:split], gold[:split], row_offset=0)
    st.update(cand[split:], gold[split:], row_offset=split)
    return st


def _assert_same(a: ErrorStats, b: ErrorStats) -> None:
    plain = {k: v for k, v in a.__dict__.items() if k not in ("profile", "sum_abs")}
    assert plain == {k: v for k, v in b.__dict__.items() if k not in ("profile", "sum_abs")}
    # the one number summed in another order: the mean error (reported, never judged)
    assert a.sum_abs == pytest.approx(b.sum_abs, rel=1e-12, abs=0)
    assert a.profile.to_dict() == b.profile.to_dict()


def _planted(dtype: torch.dtype, scale: float, seed: int):
    gen = torch.Generator().manual_seed(seed)
    gold = torch.randn(7, 20011, dtype=torch.float64, generator=gen) * scale
    noise = torch.randn(7, 20011, dtype=torch.float64, generator=gen) * scale * 1e-2
    cand = (gold + noise).to(dtype)
    cand[2, 5] = -cand[2, 5]  # a sign flip: steps are the sum of the magnitudes
    cand[4, 7], gold[4, 7] = 0.0, 3.0 * scale  # far out
    cand[5, 100], gold[5, 100] = -0.0, 0.0  # -0 against +0 is no step
    gold[6, 3] = -1e-45  # rounds to a signed zero or a subnormal
    return cand, gold


@needs_library
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scale", [1.0, 1e-6, 3e3])  # fp16 stays finite
@pytest.mark.parametrize("tol", [(1e-2, 0.0), (0.0, 1e-2), (1e-5, 1e-3), (10.0, 0.0)])
def test_error_stats_equal_the_torch_passes(monkeypatch, dtype, scale, tol, loop):
    cand, gold = _planted(dtype, scale, seed=hash((str(dtype), scale)) % 1000)
    atol, rtol = tol[0] * scale, tol[1]
    fast = _stats(monkeypatch, cand, gold, atol, rtol, torch_passes=False)
    slow = _stats(monkeypatch, cand, gold, atol, rtol, torch_passes=True)
    _assert_same(fast, slow)
    if tol == (10.0, 0.0):
        assert fast.n_bad == 0 and fast.first_bad is None
    else:
        assert fast.n_bad > 0 and fast.first_bad is not None  # the planted elements fail


def _near_ties(dtype: torch.dtype) -> torch.Tensor:
    """float64 values at, just off and (through float) doubly rounded onto the ties of
    ``dtype``, normal and subnormal, and past its largest finite value."""
    base = torch.linspace(-1.0, 1.0, 4099, dtype=torch.float32)
    exps = [-24.0, -20.0, -14.0, -10.0, 0.0, 8.0, 15.0] if dtype == torch.float16 else [-130.0, 0.0]
    out = []
    for e in exps:
        x = (base * 2.0**e).to(dtype).to(torch.float64)
        up = torch.nextafter(x.to(dtype), torch.tensor(float("inf"), dtype=dtype))
        tie = (x + up.to(torch.float64)) / 2
        tiny = torch.finfo(torch.float64).eps * tie.abs()
        out += [tie, tie + tiny, tie - tiny, tie + 2**-60 * tie.abs(), x]
    if dtype == torch.float16:
        out.append(torch.tensor([65504.0, 65519.99, 65520.0, 65535.0, -65520.0]).double())
    flat = torch.cat([t.reshape(-1) for t in out])
    return flat[torch.isfinite(flat)]


@needs_library
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gold_rounds_to_the_candidate_dtype_as_torch_rounds_it(monkeypatch, dtype, loop):
    gold = _near_ties(dtype)
    n = gold.numel() // 8 * 8
    gold = gold[:n].reshape(8, -1)
    cand = gold.to(dtype)  # exact where torch's rounding and the library's agree
    fast = _stats(monkeypatch, cand, gold, 0.0, 0.0, torch_passes=False, split=4)
    slow = _stats(monkeypatch, cand, gold, 0.0, 0.0, torch_passes=True, split=4)
    _assert_same(fast, slow)
    counts = fast.profile.to_dict()["ulp"]["log2_counts"]
    assert counts == [gold.numel()]  # every element 0 steps from the gold rounded


@needs_library
def test_a_nan_chunk_takes_the_torch_passes(monkeypatch, loop):
    cand, gold = _planted(torch.float32, 1.0, seed=3)
    cand[1, 9] = float("nan")
    gold[5, 2] = float("inf")
    fast = _stats(monkeypatch, cand, gold, 1e-2, 0.0, torch_passes=False)
    slow = _stats(monkeypatch, cand, gold, 1e-2, 0.0, torch_passes=True)
    _assert_same(fast, slow)
    assert fast.n_nonfinite == 1
    assert fastpath.compare_rows(cand[:3], gold[:3], 1e-2, 0.0) is None  # refused: NaN


def _raw(cand, gold, atol, rtol):
    out = fastpath.compare_rows(cand, gold, atol, rtol)
    return None if out is None else [out.rows, out.counts, out.column_max, out.ulp_counts]


@needs_library
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [65536, 65539, 151936, 20011 * 4 + 3])
def test_the_avx2_loop_gives_the_baseline_bits(dtype, cols):
    """Every output of the two copies bit for bit, the row sums of |err| included: the AVX2
    copy's four lanes are the baseline's four partial sums, each in column order."""
    if fastpath.use_avx2(True) != "avx2":
        fastpath.use_avx2(False)
        pytest.skip("this build or CPU has no AVX2 + F16C copy of the loop")
    try:
        gen = torch.Generator().manual_seed(cols)
        gold = torch.randn(5, cols, dtype=torch.float64, generator=gen)
        gold[1] *= 1e-6
        gold[2, ::7] = 0.0
        gold[2, 1::7] = 2.0  # the candidate straddles 2: magnitudes whose top exponent bit differs
        gold[3] = gold[3] * 1e4 if dtype != torch.float16 else gold[3] * 3e3
        cand = gold * (1 + 1e-3 * torch.randn(5, cols, dtype=torch.float64, generator=gen))
        cand = cand.to(dtype)
        cand[0, cols - 1] = -cand[0, cols - 1]  # the tail of a row not a multiple of 4
        cand[4, 3], gold[4, 3] = 0.0, 50.0  # with atol 10, the row's one bad element: lane 3
        for atol, rtol in [(1e-3, 0.0), (0.0, 1e-2), (1e-5, 1e-3), (10.0, 0.0)]:
            fast = _raw(cand, gold, atol, rtol)
            fastpath.use_avx2(False)
            base = _raw(cand, gold, atol, rtol)
            fastpath.use_avx2(True)
            assert fast is not None and base is not None
            for a, b in zip(fast, base):
                assert torch.equal(a, b)
            if atol == 10.0:
                assert fast[1][4].tolist()[:2] == [1, 3]  # one bad element, found at column 3
    finally:
        fastpath.use_avx2(True)


@needs_library
def test_column_maxima_pending_across_chunks_meet_the_torch_passes(monkeypatch):
    """update_rows merges per-column maxima and buckets them once; a NaN chunk between two
    fast ones (the torch passes) and a profile merged in give the torch passes' profile."""
    gen = torch.Generator().manual_seed(5)
    gold = torch.randn(9, 40009, dtype=torch.float64, generator=gen)
    cand = (gold + 1e-2 * torch.randn(9, 40009, dtype=torch.float64, generator=gen)).float()
    closer = (gold + 1e-3 * torch.randn(9, 40009, dtype=torch.float64, generator=gen)).float()
    cand[6, 11] = float("nan")
    chunks = [(0, 3), (3, 6), (6, 7), (7, 9)]  # fast, fast, NaN (the torch passes), fast

    def profile(torch_passes: bool) -> dict:
        monkeypatch.setenv(fastpath.FORCE_TORCH_ENV, "1" if torch_passes else "0")
        st = ErrorStats(1e-2, 0.0, profile=ErrorProfile(DISTS))
        for a, b in chunks:
            fast = fastpath.compare_rows(cand[a:b], gold[a:b], 1e-2, 0.0)
            assert (fast is not None) == (not torch_passes and a != 6)
            st.update(cand[a:b], gold[a:b], row_offset=a)
        other = ErrorStats(1e-2, 0.0, profile=ErrorProfile(DISTS))  # a smaller error, which
        other.update(closer[:3], gold[:3], row_offset=0)  # must not hide a lost chunk
        st.profile.merge(other.profile)
        return st.profile.to_dict()

    assert profile(torch_passes=False) == profile(torch_passes=True)


@needs_library
def test_small_or_odd_chunks_are_refused():
    g = torch.randn(4, 100, dtype=torch.float64)
    assert fastpath.compare_rows(g.float(), g, 0.0, 0.0) is None  # below MIN_ELEMENTS
    big = torch.randn(4, fastpath.MIN_ELEMENTS, dtype=torch.float64)
    assert fastpath.compare_rows(big.float(), big, 0.0, 0.0) is not None
    assert fastpath.compare_rows(big.float().t(), big.t(), 0.0, 0.0) is not None  # copied
    assert fastpath.compare_rows(big, big, 0.0, 0.0) is None  # a float64 candidate
    assert fastpath.compare_rows(big.float()[None], big[None], 0.0, 0.0) is None  # 3-D


@needs_library
@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32],
)
def test_row_digests_equal_the_torch_passes(monkeypatch, dtype, loop):
    t = (torch.randn(50, 3001) * 100).to(dtype)
    monkeypatch.setenv(fastpath.FORCE_TORCH_ENV, "1")
    slow = row_digests(t)
    monkeypatch.setenv(fastpath.FORCE_TORCH_ENV, "0")
    fast = row_digests(t)
    assert torch.equal(fast, slow)
    t[17, 2999] = t[17, 2999] + 7  # one element changed: that row's digest, no other
    assert (row_digests(t) != fast).nonzero().flatten().tolist() == [17]
