"""``determinism`` repeats at 8 threads too: partials added in thread finish order show
there, and the honest candidates give the same bits at every thread count."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import run_small, with_candidate


def test_partials_in_thread_finish_order_fail_at_8_threads(catalog):
    torch.manual_seed(0)  # the planted bug's coin
    cat = with_candidate(catalog, "bug", "scale_bugs:thread_finish_order")
    res = run_small(cat, "bug", ["determinism"], seeds=[0])["determinism"]
    assert res.status == "fail", res.message
    assert "(at 8 threads)" in res.message
    assert res.metrics["threads"] == 8


@pytest.mark.parametrize("candidate", ["torch", "cpu"])
def test_honest_candidates_are_deterministic_at_every_thread_count(catalog, candidate):
    before = torch.get_num_threads()
    res = run_small(catalog, candidate, ["determinism"], seeds=[0])["determinism"]
    assert res.status == "pass", res.message
    # run 1, two repeats, two at 8 threads, one at 3, one under inference_mode, the
    # with-grad outputs
    assert res.metrics["repeats"] == 8
    assert torch.get_num_threads() == before  # restored


def test_a_floored_thread_partition_fails_at_an_odd_thread_count(catalog):
    """Work that 1, 2 and 8 threads split evenly (a 10,000-column row) leaves a remainder
    at 3: a partition that floors V / threads drops it there only."""
    cat = with_candidate(catalog, "bug", "scale_bugs:vocab_split_floors_slices")
    shape = {"batch": 2, "vocab": 10000}
    res = run_small(cat, "bug", ["determinism"], shape=shape, seeds=[0])["determinism"]
    assert res.status == "fail" and "(at 3 threads)" in res.message, res.message
