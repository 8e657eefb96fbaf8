"""``forward_precision`` says when its limit is mostly the ulp floor (``floor_dominated``):
there a pass proves "within a few ulps", not "as precise as an honest fp32 computation"."""

from __future__ import annotations

from kernelcheck.checks.precision import floor_dominated
from tests.conftest import run_one, with_op_candidate

SWIGLU = {"batch": 2, "seq": 16, "inter": 256}


def test_floor_dominated_compares_the_floor_with_ratio_x_the_reference_error():
    assert floor_dominated(3.8e-6, 2.0, 3.4e-7)  # an elementwise op: ref exactly rounded
    assert not floor_dominated(7.5e-9, 2.0, 2.9e-8)
    assert not floor_dominated(2.0, 2.0, 1.0)  # equal: the ratio term is as large


def test_an_elementwise_pass_says_its_limit_is_the_floor(catalog):
    """swiglu's fp32 reference is exactly rounded: 2 x its error < 8 ulp of max|out|."""
    res = run_one(catalog, "swiglu", "torch", "forward_precision", "fp32", SWIGLU)
    assert res.status == "pass" and res.metrics["floor_dominated"] is True, res.metrics


def test_a_reduction_pass_limited_by_the_reference_says_so(catalog):
    """ratio_kl at 2x3x10000: the reference's logp error (times the ratio) outweighs the
    floor of max|out|, so the limit is the precision rule proper."""
    shape = {"batch": 2, "seq": 3, "vocab": 10000}
    # without drifted rows, whose KL of 2 to 30 nats puts the floor above the reference
    mixed = "normal+large+masked+equal+heavy+lm"
    res = run_one(catalog, "ratio_kl", "torch", "forward_precision", "fp32", shape,
                  distributions=[mixed])  # fmt: skip
    assert res.status == "pass" and res.metrics["floor_dominated"] is False, res.metrics


def test_a_floor_dominated_failure_says_so_in_its_message(catalog):
    cat = with_op_candidate(catalog, "swiglu", "planted", "generic_bugs:bf16_rounded__swiglu")
    res = run_one(cat, "swiglu", "planted", "forward_precision", "fp32", SWIGLU)
    assert res.status == "fail" and res.metrics["floor_dominated"] is True
    assert "floor-dominated: the 8-ulp floor exceeds 2 x the reference error" in res.message
