"""Precision hints name a cause only where the result's evidence shows it (issue 25.6).

Each planted kernel's real cause is not the one the old hints named: a bf16 intermediate
in a norm with a 16-bit output ("the output is stored in 16 bits"), an fp32 entropy that
cancels two ~1e4 terms, an exp that flushes subnormals and a long fp32 sum ("accumulates
in lower precision than fp32?").
"""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.checks.diagnose import (
    CANCELLING,
    ROUNDING,
    Evidence,
    gather,
    likely_cause,
    ulps_16,
)
from tests.conftest import FIXTURES, run_one, run_small, with_candidate

WRONG = ("stored in 16 bits", "lower precision than fp32")


@pytest.fixture(scope="module")
def planted():
    names = ["planted_rms_norm.toml", "planted_entropy.toml", "planted_tail_exp.toml"]
    return api.load_catalog([FIXTURES / n for n in names])


def precision(catalog, op, candidate, dtype, shape=None, **kw):
    res = run_one(catalog, op, candidate, "forward_precision", dtype, shape, seeds=[0], **kw)
    assert res.status == "fail", res.message
    assert not any(w in res.message for w in WRONG), res.message
    return res, res.metrics["evidence"]


def test_a_bf16_variance_under_a_16_bit_output_is_not_blamed_on_the_output(planted):
    res, ev = precision(planted, "rms_norm", "bf16-variance", "fp16", {"batch": 2, "hidden": 256})
    assert ev["sixteen_bit"] == "fp16" and ev["ulps_16"] > ROUNDING
    assert "rounding:" not in res.message
    assert f"{ev['ulps_16']:.3g} fp16 ulps of the gold: more than its rounding" in res.message


def test_a_cancelling_fp32_entropy_is_named_cancellation(planted):
    res, ev = precision(
        planted, "entropy", "unshifted", "fp32", {"batch": 2, "vocab": 257}, distributions="large"
    )
    assert "cancellation?" in res.message
    assert ev["input_absmax"] >= CANCELLING * abs(ev["gold"])
    assert "sixteen_bit" not in ev


def test_an_exp_that_flushes_subnormals_is_named_so(planted):
    res, ev = precision(planted, "tail_exp", "flushes-subnormals", "fp32", None)
    assert "below fp32's normal range" in res.message and "flushed subnormals?" in res.message
    assert ev["subnormal_gold"] < torch.finfo(torch.float32).tiny and ev["flushed"] is True


def test_the_honest_exp_of_subnormal_outputs_passes(planted):
    res = run_one(planted, "tail_exp", "torch", "forward_precision", "fp32", None, seeds=[0])
    assert res.status == "pass", res.message


def test_a_long_fp32_sum_gets_the_measured_facts_not_a_guessed_cause(catalog):
    cat = with_candidate(catalog, "naive", "broken_logp:naive_fp32_sum")
    shape = {"batch": 4, "vocab": 151936}
    res = run_small(cat, "naive", ["forward_precision"], shape=shape, seeds=[0], distributions="lm")
    r = res["forward_precision"]
    assert r.status == "fail", r.message
    ev = r.metrics["evidence"]
    facts = f"error {ev['ratio']:.3g}x the honest fp32 reference's, largest at {ev['index']}"
    assert facts in r.message
    assert not any(w in r.message for w in (*WRONG, "cancellation", "rounding", "subnormal"))


def test_an_honest_16_bit_output_gets_the_rounding_hint(catalog):
    cat = with_candidate(catalog, "stores", "broken_logp:stores_bf16")
    r = run_small(cat, "stores", ["forward_precision"], seeds=[0], distributions="normal")
    r = r["forward_precision"]
    ev = r.metrics["evidence"]
    assert r.status == "fail" and "the output's bf16 rounding" in r.message, r.message
    assert ev["sixteen_bit"] == "bf16" and ev["ulps_16"] <= ROUNDING


# --- the pure functions ------------------------------------------------------------------


def test_ulps_16_measures_in_steps_of_the_type_at_the_gold():
    gold = torch.tensor([1.0, 1.0, 1024.0], dtype=torch.float64)
    err = torch.tensor([2.0**-8, 2.0**-10, 1.0], dtype=torch.float64)
    assert ulps_16(err, gold, "bf16") == 0.5  # bf16's step at 1 is 2^-7, at 1024 it is 8
    assert ulps_16(err, gold, "fp16") == 4.0  # fp16's step at 1 is 2^-10


def _evidence(**kw):
    base = dict(
        ratio=37.0,
        index="[3, 5]",
        error=1e-5,
        gold=-1e-3,
        input_absmax=None,
        sixteen_bit=None,
        ulps_16=None,
        subnormal_gold=None,
        flushed=None,
    )
    return Evidence(**{**base, **kw})


def test_without_evidence_of_a_cause_the_hint_states_the_facts_only():
    hint = likely_cause(0, None, _evidence())
    assert hint == "error 37x the honest fp32 reference's, largest at [3, 5] (|gold| 0.001)"


def test_a_large_gold_beside_large_inputs_is_not_called_cancellation():
    ev = _evidence(gold=-5e3, input_absmax=1e4, error=1e-3)
    assert "cancellation" not in likely_cause(0, None, ev)


def test_gather_finds_the_worst_element_and_its_row():
    g = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    c = g.float().clone()
    c[1, 0] += 0.5
    ev = gather(c, g, 9.0, 0.1, lambda row, rest: f"{row}:{rest}", lambda row: 10.0 * row)
    assert (ev.index, ev.error, ev.gold, ev.input_absmax) == ("1:(0,)", 0.5, 3.0, 10.0)
    assert ev.subnormal_gold is None and "flushed" not in ev.metrics()


def test_the_readme_s_earlier_example_is_named_cancellation_with_its_figures(catalog):
    """``x_t - logsumexp(x)`` on rows offset by 1e4 (issue 25.5): two ~1e4 numbers cancel,
    though every sum is fp32; the hint cites the |gold| and the row's inputs."""
    cat = with_candidate(catalog, "whole", "broken_logp:whole_logsumexp")
    r = run_small(cat, "whole", ["forward_precision"], seeds=[0], distributions="large")
    r = r["forward_precision"]
    ev = r.metrics["evidence"]
    assert r.status == "fail" and "cancellation?" in r.message, r.message
    assert f"where the row's inputs reach {ev['input_absmax']:.3g}" in r.message
    assert ev["input_absmax"] > 9e3 and abs(ev["gold"]) < 30
