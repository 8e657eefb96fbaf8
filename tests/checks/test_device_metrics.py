"""The device path of the metrics (torch ops where the tensors are) gives the host path's
numbers: forced on CPU tensors here, compared number for number."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.checks import device_metrics, fastpath
from kernelcheck.checks.metrics import ErrorProfile, ErrorStats, integrity_problems, row_digests

DISTS = ["a", "b", "c"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _stats(monkeypatch, cand, gold, atol, rtol, device: bool, splits=(3, 7)) -> ErrorStats:
    """ErrorStats over row chunks (``splits`` the chunk starts) on one path."""
    monkeypatch.setenv(device_metrics.FORCE_ENV, "1" if device else "0")
    st = ErrorStats(atol, rtol, profile=ErrorProfile(DISTS))
    bounds = [0, *splits, cand.shape[0]]
    for lo, hi in zip(bounds, bounds[1:]):
        st.update(cand[lo:hi], gold[lo:hi], row_offset=lo)
    return st


def _assert_same(host: ErrorStats, dev: ErrorStats) -> None:
    skip = ("profile", "sum_abs")
    assert {k: v for k, v in host.__dict__.items() if k not in skip} == {
        k: v for k, v in dev.__dict__.items() if k not in skip
    }
    # the one number summed in another order: the mean error (reported, never judged)
    assert dev.sum_abs == pytest.approx(host.sum_abs, rel=1e-12, abs=0)
    assert host.profile.to_dict() == dev.profile.to_dict()
    assert torch.equal(host.profile.ulp_counts, dev.profile.ulp_counts)
    assert torch.equal(host.profile.column_max, dev.profile.column_max)
    assert host.profile.tail_max == dev.profile.tail_max


def _planted(dtype: torch.dtype, scale: float, cols: int, seed: int):
    """Rows of noise with planted elements: a sign flip, one far out, -0 against +0, a gold
    that rounds to a subnormal, a row of zeros (an out-of-range row) and huge values."""
    gen = torch.Generator().manual_seed(seed)
    gold = torch.randn(11, cols, dtype=torch.float64, generator=gen) * scale
    noise = torch.randn(11, cols, dtype=torch.float64, generator=gen) * scale * 1e-2
    cand = (gold + noise).to(dtype)
    cand[2, 5 % cols] = -cand[2, 5 % cols]
    cand[4, cols - 1], gold[4, cols - 1] = 0.0, 3.0 * scale  # far out, at the row's tail
    cand[5, 1 % cols], gold[5, 1 % cols] = -0.0, 0.0
    gold[6, 3 % cols] = -1e-45
    cand[8], gold[8] = 0.0, 0.0  # an ignored row: zeros on both sides
    big = 6e4 if dtype == torch.float16 else 3e38
    cand[9, :3], gold[9, :3] = big, -big  # opposite signs, the largest magnitudes
    return cand, gold


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 4099, 65539])
@pytest.mark.parametrize("tol", [(1e-2, 0.0), (0.0, 1e-2), (1e-5, 1e-3), (1e40, 0.0)])
def test_the_device_path_gives_the_host_numbers(monkeypatch, dtype, cols, tol):
    cand, gold = _planted(dtype, 1.0, cols, seed=cols)
    host = _stats(monkeypatch, cand, gold, *tol, device=False)
    dev = _stats(monkeypatch, cand, gold, *tol, device=True)
    _assert_same(host, dev)
    assert (host.n_bad == 0) == (tol[0] == 1e40)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_rows_give_the_host_numbers(monkeypatch, dtype):
    cand, gold = _planted(dtype, 1.0, 4099, seed=5)
    cand[1, 9] = float("nan")
    cand[7, 4098] = float("-inf")
    gold[10, 2] = float("inf")
    cand[10, 2] = float("inf")  # a non-finite gold met
    host = _stats(monkeypatch, cand, gold, 1e-2, 0.0, device=False)
    dev = _stats(monkeypatch, cand, gold, 1e-2, 0.0, device=True)
    _assert_same(host, dev)
    assert host.n_nonfinite == 2 and host.first_nonfinite == (1, 9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_chunks_give_the_one_pass_numbers(dtype):
    cand, gold = _planted(dtype, 3e3 if dtype != torch.float16 else 1.0, 65539, seed=2)
    whole = device_metrics.compare_rows(cand, gold, 1e-3, 1e-3)
    pieces = device_metrics.compare_rows(cand, gold, 1e-3, 1e-3, chunk_elements=70000)
    judged = [0, 2, 3]  # every row statistic but the sum, whose order follows the chunks
    for a, b in zip(
        [whole.rows[:, judged], whole.counts, whole.column_max, whole.ulp_counts],
        [pieces.rows[:, judged], pieces.counts, pieces.column_max, pieces.ulp_counts],
    ):
        assert torch.equal(a, b)
    assert torch.allclose(whole.rows[:, 1], pieces.rows[:, 1], rtol=1e-12, atol=0)
    native = fastpath.compare_rows(cand, gold, 1e-3, 1e-3)
    if native is not None:  # the host loop, where built: the same summaries (sums aside)
        assert torch.equal(native.counts, whole.counts)
        assert torch.equal(native.ulp_counts, whole.ulp_counts)
        assert torch.equal(native.column_max, whole.column_max)
        assert torch.equal(native.rows[:, judged], whole.rows[:, judged])


def test_a_nan_chunk_is_left_to_the_torch_passes():
    cand, gold = _planted(torch.float32, 1.0, 99, seed=1)
    cand[3, 3] = float("nan")
    assert device_metrics.compare_rows(cand, gold, 0.0, 0.0) is None
    assert device_metrics.compare_rows(cand[:3], gold[:3], 0.0, 0.0) is not None


def test_the_path_is_chosen_by_device_or_forced(monkeypatch):
    t = torch.zeros(2)
    monkeypatch.delenv(device_metrics.FORCE_ENV, raising=False)
    assert not device_metrics.applies(t)
    assert device_metrics.applies(t, force=True)
    assert device_metrics.applies(torch.zeros(2, device="meta"))
    monkeypatch.setenv(device_metrics.FORCE_ENV, "1")
    assert device_metrics.applies(t)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("cols", [1, 3001, 70001])
def test_row_digests_on_the_device_path_equal_the_host_ones(monkeypatch, dtype, cols):
    t = (torch.randn(13, cols) * 100).to(dtype)
    monkeypatch.setenv(device_metrics.FORCE_ENV, "0")
    host = row_digests(t)
    monkeypatch.setenv(device_metrics.FORCE_ENV, "1")
    dev = row_digests(t)
    assert dev.device.type == "cpu" and torch.equal(host, dev)


@pytest.mark.parametrize("device", [False, True])
def test_integrity_counts_the_same_changed_elements(monkeypatch, device):
    monkeypatch.setenv(device_metrics.FORCE_ENV, "1" if device else "0")
    before = {"x": torch.randn(5, 301), "ids": torch.arange(5)}
    after = {k: v.clone() for k, v in before.items()}
    after["x"][1, 7] = -0.0 if before["x"][1, 7] == 0 else -after["x"][1, 7]
    after["x"][4, 300] = float("nan")
    assert integrity_problems(before, after, [], "forward") == [
        "forward changed input 'x' (2 elements)"
    ]
    after["ids"] = torch.arange(6)
    assert integrity_problems(before, after, [], "forward")[1] == (
        "forward changed input 'ids' (-1 elements)"
    )


def test_changed_elements_in_chunks():
    a = torch.arange(1000, dtype=torch.int32)
    b = a.clone()
    b[[0, 499, 500, 999]] += 1
    assert device_metrics.changed_elements(a, b, chunk_elements=7) == 4
    assert device_metrics.changed_elements(a, b[:10]) == -1
