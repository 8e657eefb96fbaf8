"""A case's place in the grid: the conditions checks and timeouts both decide by."""

from __future__ import annotations

import torch

from kernelcheck.cases.grid import Case, at_first_dtype, at_first_grid_case, row_work
from kernelcheck.checks.context import CaseContext


def _case(op, dtype: str, sizes: dict) -> Case:
    return Case(op.name, "torch", "cpu", dtype, tuple(sizes.items()), (0,), ())


def test_the_first_grid_case_is_the_first_dtype_at_the_first_shape(catalog):
    for op in catalog.ops.values():
        first, last = op.grid.dtypes[0], op.grid.dtypes[-1]
        shape = dict(op.grid.shapes[0])
        assert at_first_grid_case(op, _case(op, first, shape)), op.name
        if len(op.grid.shapes) > 1:
            other = _case(op, first, dict(op.grid.shapes[1]))
            assert at_first_dtype(op, other) and not at_first_grid_case(op, other), op.name
        if last != first:
            assert not at_first_dtype(op, _case(op, last, shape)), op.name


def test_row_work_is_the_product_of_a_rows_dims_and_the_context_agrees(catalog):
    op = catalog.ops["linear_logp"]
    sizes = {"tokens": 7, "hidden": 16, "vocab": 300}
    assert row_work(op, sizes) == 16 * 300
    case = _case(op, op.grid.dtypes[-1], sizes)
    ctx = CaseContext(op, case, None, None, None, torch.device("cpu"), False)
    assert ctx.row_work == 4800 and ctx.at_first_dtype() == at_first_dtype(op, case)
