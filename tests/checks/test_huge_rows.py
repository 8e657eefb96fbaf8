"""The huge lead's batch and calls (kernelcheck/checks/huge_rows.py): a large tensor that
cannot be mirrored is left unjudged, never built whole; each call runs alone within an
address-space budget, in a case process of its own only; running out there, in
kernelcheck's own copies, leaves the rows unjudged, while the candidate's faults stay its
own."""

from __future__ import annotations

import resource

import pytest
import torch

from kernelcheck.cases.mirrored import mirroring_available
from kernelcheck.checks.far_rows import FILLERS, JUDGED, row_order
from kernelcheck.checks.huge_rows import (
    HugeRowsUnjudged,
    call_alone_within_budget,
    mirrored_placement,
)
from kernelcheck.checks.outcome import CandidateFault

pytestmark = pytest.mark.skipif(mirroring_available() is not None, reason="Linux only")


def test_a_small_tensor_is_copied_and_a_large_one_of_part_pages_is_left_unjudged():
    order = row_order(1000)
    ids = torch.arange(2 * JUDGED + FILLERS)  # one element a row: a plain copy
    placed = mirrored_placement(ids, order, (1000,), "cpu")
    assert placed.tolist() == order
    wide = torch.zeros(2 * JUDGED + FILLERS, 2049, dtype=torch.bfloat16)
    with pytest.raises(HugeRowsUnjudged, match="not whole pages"):
        mirrored_placement(wide, row_order(1 << 14), (1 << 14,), "cpu")


def test_rows_of_whole_pages_are_mirrored_in_the_far_rows_order():
    source = torch.randn(2 * JUDGED + FILLERS, 2048).to(torch.bfloat16)
    order = row_order(5000)
    placed = mirrored_placement(source, order, (5000,), "cpu")
    assert torch.equal(placed, source[order])


def test_in_process_no_call_is_made():
    with pytest.raises(HugeRowsUnjudged, match="in process"):
        with call_alone_within_budget("cpu", own_process=False):
            pytest.fail("the call ran")


def test_a_call_runs_within_an_address_space_limit_that_comes_back_after():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with call_alone_within_budget("cpu", own_process=True):
        assert resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_kernelchecks_own_allocation_past_the_budget_leaves_the_rows_unjudged():
    with pytest.raises(HugeRowsUnjudged, match="own copies past the budget") as raised:
        with call_alone_within_budget("cpu", own_process=True):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
    assert raised.value.out_of_memory
    with pytest.raises(CandidateFault, match="its own"):  # the candidate's: a result
        with call_alone_within_budget("cpu", own_process=True):
            raise CandidateFault("its own")
    with pytest.raises(RuntimeError, match="another"):  # not memory: kernelcheck's bug
        with call_alone_within_budget("cpu", own_process=True):
            raise RuntimeError("another error")
