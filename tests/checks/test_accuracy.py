"""The accuracy checks' row selection: ``only`` judges the rows of some of a mixed trial's
distributions (``shape_sweep`` leaves out its ``edges`` row, drawn for the precision
rules), and a failure still names the row as the trial holds it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernelcheck.spec.model import CheckConfig
from tests.conftest import run_one, with_candidate

MIX = ["normal", "heavy", "equal"]  # rows 2, 5, 8, ... are equal rows


def _with_only(catalog, check: str, only: tuple[str, ...]):
    op = catalog.ops["logp"]
    op = replace(op, checks={**op.checks, check: CheckConfig(params={"only": only})})
    return replace(catalog, ops={**catalog.ops, "logp": op})


@pytest.mark.parametrize("check", ["forward_accuracy", "backward_accuracy"])
def test_only_judges_the_rows_of_the_named_distributions(catalog, check):
    cat = with_candidate(catalog, "third", "broken_logp:off_in_every_third_row")
    shape = {"batch": 12, "vocab": 257}

    def judged(only):
        return run_one(
            _with_only(cat, check, only), "logp", "third", check, "fp32", shape,
            seeds=[0], distributions=MIX,
        )  # fmt: skip

    res = judged(("normal", "equal"))
    assert res.status == "fail", res.message
    # 4 equal rows judged of 8; the first is the trial's row 2, an equal row
    assert "4 of 8 elements outside" in res.message, res.message
    assert "first at [2]" in res.message and "equal]" in res.message, res.message
    res = judged(("normal", "heavy"))
    assert res.status == "pass", res.message
    assert judged(()).status == "fail"  # every row, as ever
