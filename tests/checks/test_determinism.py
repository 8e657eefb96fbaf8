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
    # run 1, two repeats, two at 8 threads, one under inference_mode, the with-grad outputs
    assert res.metrics["repeats"] == 7
    assert torch.get_num_threads() == before  # restored
