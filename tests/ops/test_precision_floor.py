"""``forward_precision`` says when its limit is mostly the ulp floor (``floor_dominated``):
there a pass proves "within a few ulps", not "as precise as an honest fp32 computation";
and where outputs near zero come from sums near 1, the floor is in ulps of the sum."""

from __future__ import annotations

from kernelcheck.checks.precision import floor_dominated
from kernelcheck.spec import load_catalog
from tests.conftest import FIXTURES, run_one, with_op_candidate

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


def _without_floor_magnitude(catalog, op_name: str):
    from dataclasses import replace

    from kernelcheck.spec.model import CheckConfig

    op = catalog.ops[op_name]
    params = op.checks["forward_precision"].params
    bare = CheckConfig(params={**params, "floor_magnitude": 0.0})
    op = replace(op, checks={**op.checks, "forward_precision": bare})
    return replace(catalog, ops={**catalog.ops, op_name: op})


def test_an_entropy_near_zero_is_judged_in_ulps_of_one(catalog):
    """A converged row's entropy (1e-6 to 1e-3) is log(s) - sum(p d), s = 1 + q: the
    shipped candidate errs by the sum's rounding, ulps of 1 (4.6e-7 at seed 1, 2.1 x the
    reference's, against an 8-ulp floor of 0.0008's 7.5e-9 without floor_magnitude)."""
    kw = dict(seeds=[1])
    shape = {"batch": 2, "seq": 3, "vocab": 10000}
    assert catalog.op("entropy").checks["forward_precision"].params["floor_magnitude"] == 1.0
    res = run_one(catalog, "entropy", "torch", "forward_precision", "fp32", shape, **kw)
    assert res.status == "pass", res.message
    bare = _without_floor_magnitude(catalog, "entropy")
    res = run_one(bare, "entropy", "torch", "forward_precision", "fp32", shape, **kw)
    assert res.status == "fail" and "peaked]" in res.message, res.message


def test_a_kl_near_zero_is_judged_in_ulps_of_one(catalog):
    """At a converged policy's top token d is ~1e-11 and kl ~1e-22: `(exp(d) - 1) - d`
    errs by d where the reference's `exp(d) - d - 1` rounds to 0; both err by exp(d)'s
    rounding, an ulp of 1, which ratio_kl's floor (256 ulps of at least 2^-8) allows."""
    planted = load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    shape, kw = {"batch": 8, "vocab": 151936}, dict(seeds=[0])
    res = run_one(planted, "ratio_kl", "kl-reassociated", "forward_precision", "fp32", shape, **kw)
    assert res.status == "pass", res.message
    bare = _without_floor_magnitude(planted, "ratio_kl")
    res = run_one(bare, "ratio_kl", "kl-reassociated", "forward_precision", "fp32", shape, **kw)
    assert res.status == "fail" and "kl" in res.message, res.message
