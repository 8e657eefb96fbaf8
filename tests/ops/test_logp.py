"""logp's temperature attribute: honest candidates apply it, native ones without the
parameter run at 1.0 and are skipped elsewhere, and one that ignores it fails; and the
grid's converged-policy (peaked) rows, where a tile-skipping logsumexp errs."""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.errors import UsageError
from kernelcheck.ops import logp
from tests.conftest import FIXTURES, SMALL, honest_result, run_one, with_candidate


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


def test_gold_and_its_gradient_apply_the_mask():
    x = torch.randn(4, 11, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, 50, 3, -100])  # a masked position may hold any id
    mask = torch.tensor([True, False, False, True])
    out = logp.gold(x, t, mask=mask)
    assert torch.isclose(out[0], torch.log_softmax(x, -1)[0, 1])
    assert out[1:].tolist() == [0.0, 0.0, 0.0]
    g = torch.randn(4, dtype=torch.float64)
    (auto,) = torch.autograd.grad(out, x, g)
    analytic = logp.gold_backward([g], x.detach(), t, mask=mask)["logits"]
    assert torch.allclose(auto, analytic, rtol=1e-12, atol=1e-14)
    assert not analytic[1:].any()


def test_masked_on_the_command_line(catalog):
    """--attr with_mask=true draws a mask and passes it; a candidate without a mask
    parameter is skipped there, and at the default nobody is passed one."""
    kw = dict(attributes={"with_mask": True})
    for check in ("forward_accuracy", "backward_accuracy", "contract", "backward_invariance"):
        honest = run_one(catalog, "logp", "torch", check, "fp32", SMALL, **kw)
        assert honest.status == "pass", (check, honest.message)
    assert honest.case_id.endswith("-with_mask=true") and "--attr with_mask=true" in honest.repro
    contract = run_one(catalog, "logp", "torch", "contract", "fp32", SMALL, **kw)
    unmasked = run_one(catalog, "logp", "torch", "contract", "fp32", SMALL)
    # the masked rule, the all-true mask's bits and the int64 mask (refused or right)
    assert contract.metrics["verified"] == unmasked.metrics["verified"] + 3
    native = run_one(catalog, "logp", "cpu", "contract", "fp32", SMALL, **kw)
    assert native.status == "skip" and "does not take mask" in native.message
    assert run_one(catalog, "logp", "cpu", "contract", "fp32", SMALL).status == "pass"


def test_masked_takes_true_or_false(catalog):
    with pytest.raises(UsageError, match="with_mask switches an input on or off: true or false"):
        run_one(
            catalog, "logp", "torch", "contract", "fp32", SMALL, attributes={"with_mask": "yes"}
        )


@pytest.mark.parametrize(
    "bug,checks",
    [
        ("ignores_mask", ("forward_accuracy", "contract")),
        ("masked_gradient_leaks", ("backward_accuracy", "contract")),
    ],
)
def test_a_candidate_that_mishandles_the_mask_fails(catalog, bug, checks):
    cat = with_candidate(catalog, bug, f"broken_logp:{bug}")
    for check in checks:
        plain = run_one(cat, "logp", bug, check, "fp32", SMALL)
        if (bug, check) == ("ignores_mask", "contract"):  # called with a mask there too
            assert "with_mask=true after a call at with_mask=false" in plain.message
        else:
            assert plain.status == "pass", plain.message
        res = run_one(cat, "logp", bug, check, "fp32", SMALL, attributes={"with_mask": True})
        assert res.status == "fail", (check, res.message)
        if check == "contract":
            assert "masked position" in res.message or "gradient:logits" in res.message


def test_the_gradient_scale_is_the_size_of_the_terms_at_a_confident_target():
    """|g| (1 + p_t) at the target (its gradient g (1 - p_t) cancels near p_t = 1),
    |gradient| elsewhere, zero on a row that selects nothing."""
    from kernelcheck.ops import logp

    x = torch.tensor([[9.0, 0.0, -1.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    t, g = torch.tensor([0, -100]), torch.tensor([-2.0, 3.0], dtype=torch.float64)
    p = torch.softmax(x, -1)
    scale = logp.gradient_scale([g], x, t)["logits"]
    grad = logp.gold_backward([g], x, t)["logits"]
    torch.testing.assert_close(scale[0, 0], 2 * (1 + p[0, 0]), rtol=1e-14, atol=0)
    torch.testing.assert_close(scale[0, 1:], grad[0, 1:].abs(), rtol=1e-14, atol=0)
    assert float(scale[1].abs().sum()) == 0.0


def test_the_precision_floor_is_in_ulps_of_one_at_confident_tokens(catalog):
    """At a confident token (an lm row's) logp = -log(s), s near 1: the honest torch
    candidate errs by the sum's rounding (2.0e-7 here, 5 times the reference's, which its
    own summation order happened to make small). The spec's floor_magnitude = 1
    passes it; without it (ulps of max|logp| alone) it fails, a false alarm."""
    from dataclasses import replace

    from kernelcheck.spec.model import CheckConfig

    op = catalog.ops["logp"]
    params = op.checks["forward_precision"].params
    assert params["floor_magnitude"] == 1.0
    # a confident row alone: the part's max|logp| is its own
    shape, kw = {"batch": 1, "vocab": 151936}, dict(seeds=[0], distributions="lm")
    res = run_one(catalog, "logp", "torch", "forward_precision", "fp32", shape, **kw)
    assert res.status == "pass", res.message
    bare = CheckConfig(params={**params, "floor_magnitude": 0.0})
    op = replace(op, checks={**op.checks, "forward_precision": bare})
    cat = replace(catalog, ops={**catalog.ops, "logp": op})
    res = run_one(cat, "logp", "torch", "forward_precision", "fp32", shape, **kw)
    assert res.status == "fail" and "cancellation?" in res.message, res.message


def test_tiles_skipped_far_below_the_max_fail_on_peaked_rows_alone(catalog):
    """A logsumexp skipping each 4,096-column tile 20 nats below the row's max is exact on
    every other distribution the grid draws and loses up to 2e-4 of a converged policy's
    mass (its flat tail) at the Qwen3 vocabulary: peaked rows fail it."""
    planted = api.load_catalog([FIXTURES / "planted.toml"])
    shape = {"batch": 8, "vocab": 151936}
    for dists, want in (("normal+large+masked+equal+heavy+lm", "pass"), ("peaked", "fail")):
        res = run_one(
            planted, "logp", "far-tiles-skipped", "forward_accuracy", "fp32", shape,
            distributions=dists,
        )  # fmt: skip
        assert res.status == want, (dists, res.message)
    honest = honest_result(
        catalog, "logp", "forward_accuracy", "fp32", shape, distributions="peaked"
    )
    assert honest.status == "pass", honest.message
    # the grid's own draw fails it too: the Qwen3 case's mixed trial at seed 0, whose one
    # peaked row (a distribution's first, its target never ignored) selects its top token
    res = run_one(
        planted, "logp", "far-tiles-skipped", "forward_accuracy", "fp32", shape, seeds=[0]
    )
    assert res.status == "fail" and "peaked]" in res.message, res.message
    # and the 2x3x10000 case's peaked trial at seed 0, whose top-token row 4 (where the
    # skip drops 60% of the tail) the loss mask once silenced with a zero upstream
    grid = {"batch": 2, "seq": 3, "vocab": 10000}
    res = run_one(
        planted, "logp", "far-tiles-skipped", "backward_precision", "fp32", grid, seeds=[0]
    )
    assert res.status == "fail" and "peaked]" in res.message, res.message
