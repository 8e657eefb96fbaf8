"""The spec's data model (kernelcheck/spec/model.py)."""

import pytest

from kernelcheck.spec.model import eval_dim_expr


def test_dim_expressions_never_eval():
    assert eval_dim_expr("vocab+7", {"vocab": 10}) == 17
    assert eval_dim_expr("vocab - 1", {"vocab": 10}) == 9
    assert eval_dim_expr(-100, {"vocab": 10}) == -100
    with pytest.raises(ValueError):
        eval_dim_expr("__import__('os')", {"vocab": 10})
