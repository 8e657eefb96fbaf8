"""logp's temperature attribute: honest candidates apply it, native ones without the
parameter run at 1.0 and are skipped elsewhere, and one that ignores it fails."""

from __future__ import annotations

import torch

from kernelcheck.ops import logp
from tests.conftest import SMALL, run_one, with_candidate


def test_gold_and_its_analytic_gradient_apply_the_temperature():
    x = torch.randn(3, 11, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, -100, 10])
    want = torch.log_softmax(x / 0.7, -1)[0, 1]
    out = logp.gold(x, t, temperature=0.7)
    assert torch.isclose(out[0], want) and out[1] == 0
    g = torch.randn(3, dtype=torch.float64)
    (auto,) = torch.autograd.grad(out, x, g)
    analytic = logp.gold_backward([g], x.detach(), t, temperature=0.7)["logits"]
    assert torch.allclose(auto, analytic, rtol=1e-12, atol=1e-14)


def test_temperature_on_the_command_line(catalog):
    kw = dict(attributes={"temperature": 0.7})
    honest = run_one(catalog, "logp", "torch", "forward_accuracy", "fp32", SMALL, **kw)
    assert honest.status == "pass" and honest.case_id.endswith("-temperature=0.7")
    assert "--attr temperature=0.7" in honest.repro
    native = run_one(catalog, "logp", "cpu", "forward_accuracy", "fp32", SMALL, **kw)
    assert native.status == "skip" and "does not take temperature=0.7" in native.message
    at_one = run_one(catalog, "logp", "cpu", "forward_accuracy", "fp32", SMALL)
    assert at_one.status == "pass" and at_one.case_id == "cpu-fp32-2x4x257"


def test_a_candidate_that_ignores_the_temperature_fails(catalog):
    cat = with_candidate(catalog, "lazy", "broken_logp:ignores_temperature")
    assert run_one(cat, "logp", "lazy", "forward_accuracy", "fp32", SMALL).status == "pass"
    res = run_one(
        cat, "logp", "lazy", "forward_accuracy", "fp32", SMALL, attributes={"temperature": 0.7}
    )
    assert res.status == "fail"
