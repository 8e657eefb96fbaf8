"""The helpers of contract's NaN-rows and default-dtype probes: NaNs planted in the rows
asked for alone (never a row a contract rule fixes), a finite result where the gold is NaN
named, and the default dtype restored even when the block raises."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.checks import process_inputs


def test_nans_go_in_every_other_free_row_and_nowhere_else():
    owned = torch.tensor([True, False, False, True, False, False])
    planted = process_inputs.every_other(~owned)
    assert planted.tolist() == [False, True, False, False, True, False]
    head = {"x": torch.zeros(6, 2, 9), "w": torch.zeros(9)}
    nan = process_inputs.with_nans(head, ["x"], planted)
    rows = torch.isnan(nan["x"]).reshape(6, -1).sum(dim=1)
    assert rows.tolist() == [0, 1, 0, 0, 1, 0]
    assert not torch.isnan(head["x"]).any() and nan["w"] is head["w"]  # copies


def test_a_finite_result_where_the_gold_is_nan_is_named():
    want = torch.tensor([[1.0, float("nan")], [float("nan"), 2.0]], dtype=torch.float64)
    assert (
        process_inputs.hidden_nans(torch.tensor([[1.0, float("inf")], [float("nan"), 2.0]]), want)
        is None
    )
    found = process_inputs.hidden_nans(torch.tensor([[1.0, 0.5], [float("nan"), 2.0]]), want)
    assert found.startswith(
        "1 of 2 elements finite where the float64 gold is NaN; first at flat index 1"
    )


def test_the_default_dtype_comes_back_after_a_raise():
    before = torch.get_default_dtype()
    with pytest.raises(RuntimeError), process_inputs.default_dtype(torch.bfloat16):
        assert torch.zeros(1).dtype == torch.bfloat16
        raise RuntimeError("the candidate raised")
    assert torch.get_default_dtype() == before
