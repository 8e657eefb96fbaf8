"""ratio_kl: its gold, its shipped spec, and its two contract rules, each shown failing
a planted bug and passing the honest candidate."""

from __future__ import annotations

import math

import pytest
import torch

from kernelcheck import api
from kernelcheck.ops import ratio_kl
from tests.conftest import FIXTURES, honest_result, run_one

SMALL = {"batch": 2, "seq": 16, "vocab": 257}


def test_gold_is_neutral_at_masked_positions_whatever_their_id():
    pol, ref = torch.randn(4, 9, dtype=torch.float64), torch.randn(4, 9, dtype=torch.float64)
    ids = torch.tensor([1, -5, 100, 3])
    mask = torch.tensor([True, False, False, True])
    old = torch.randn(4, dtype=torch.float64)
    ratio, kl = ratio_kl.gold(pol, ref, ids, mask, old)
    assert ratio[1:3].tolist() == [1.0, 1.0] and kl[1:3].tolist() == [0.0, 0.0]
    lp = torch.log_softmax(pol, -1)[0, 1]
    assert torch.isclose(ratio[0], torch.exp(lp - old[0]))


@pytest.mark.slow
@pytest.mark.grid
def test_the_shipped_spec_passes_the_honest_candidate(catalog):
    report = api.run(catalog, "ratio_kl", candidate_names=["torch"], isolate=False)
    assert report.results and report.passed, [
        (r.case_id, r.check, r.message) for r in report.results if r.status != "pass"
    ]


PLANTED_BUGS = [
    ("masked-not-neutral", "ratio: masked position"),
    # exact on every finite padding: NaN only where the padded old logps are not finite
    ("masked-by-multiplying", "ratio with old_logps NaN, -inf, +inf there: masked position"),
    ("clamps-ids", "action_ids=-1 at an active position (attention_mask true) did not raise"),
    ("every-grad-assumed", "unused_outputs: candidate backward raised"),
    ("ignore-index-exempt", "action_ids=-100 at an active position"),
    ("range-checked-in-first-rows", "(the last position) did not raise"),
    # every position active, 64 or more: sequence packing's fast path (a round-19 red team's)
    ("packed-skips-range-check", "in a packed batch of 256 rows did not raise"),
    ("masked-by-indexing", "attention_mask as int64 0/1: output 'ratio'"),
    ("in-reference-dtype", "bf16 ref_logits beside fp32 policy_logits: output 'ratio'"),
    ("reference-cached-while-training", "between calls, rows rolled, weights negated (with grad)"),
    # keyed by a sample of the leading elements: a refill of the last row alone
    ("reference-cached-by-sample", "between calls, the last row's floats alone (with grad)"),
]


@pytest.mark.parametrize("name,fragment", PLANTED_BUGS, ids=[p[0] for p in PLANTED_BUGS])
def test_each_contract_rule_fails_its_planted_bug(name, fragment):
    planted = api.load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    bad = run_one(planted, "ratio_kl", name, "contract", "fp32", SMALL)
    assert bad.status == "fail" and fragment in bad.message, bad.message
    honest = honest_result(planted, "ratio_kl", "contract", "fp32", SMALL)
    assert honest.status == "pass", honest.message


def test_a_16_bit_rounding_flip_is_no_finding(catalog):
    """fp16, seed 1, heavy rows: the composed candidate's target entries equal the exactly
    rounded gold's, but one dominant non-target entry (0.79 of its row) sits 4.8e-7 from
    a rounding midpoint and rounds the other way than the reference's: the row scale moves
    and the target column was 2.9x the reference's error. The allowance for one flip of
    the row's largest entry takes it in; the fp32 rule has none."""
    from tests.conftest import with_op_candidate

    cat = with_op_candidate(catalog, "ratio_kl", "composed", "broken_ratio_kl:composed")
    for dtype in ("fp16", "fp32"):
        report = api.run(cat, "ratio_kl", candidate_names=["composed"], dtype_names=dtype,
                         shape=SMALL, check_names=["backward_precision"], isolate=False,
                         seeds=[1])  # fmt: skip
        assert [r.status for r in report.results] == ["pass"], report.results[0].message


@pytest.mark.parametrize("bug", ["low-var-kl", "reference-shifted-by-policy-max"])
def test_a_kl_bug_of_far_references_fails_on_drifted_rows_only(catalog, bug):
    """Exact on a reference 0.5 nats from the policy (kl ~ 0.1), wrong on `drifted` rows
    (kl 2 to 30, the reference 90 to 120 nats above or below the policy's row): verl's
    low_var_kl clamps the KL at 10; a round-13 red team's fused kernel shifts both rows
    by the policy's max, where exp(ref - policy max) overflows or underflows. The honest
    one passes both."""
    planted = api.load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    for dist, cand, want in (
        ("normal", bug, "pass"),
        ("drifted", bug, "fail"),
        ("drifted", "torch", "pass"),
    ):
        res = run_one(planted, "ratio_kl", cand, "forward_accuracy", "fp32", SMALL,
                      distributions=[dist])  # fmt: skip
        assert res.status == want, (dist, cand, res.message)
        assert want == "pass" or "output:kl" in res.message, res.message


def test_tiles_skipped_far_below_the_max_fail_on_peaked_rows_alone(catalog):
    """Logsumexps skipping each 4,096-column tile 20 nats below the row max: exact on every
    other distribution drawn, off by a converged policy's lost tail on peaked rows (the
    action at the top token: the ratio off by up to 2e-4 of itself) at the Qwen3 vocabulary."""
    planted = api.load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    shape = {"batch": 8, "vocab": 151936}
    others = "normal+large+masked+equal+heavy+lm+drifted"
    for dists, want in ((others, "pass"), ("peaked", "fail")):
        res = run_one(planted, "ratio_kl", "far-tiles-skipped", "forward_accuracy", "fp32",
                      shape, distributions=dists)  # fmt: skip
        assert res.status == want, (dists, res.message)
    honest = honest_result(catalog, "ratio_kl", "forward_accuracy", "fp32", shape,
                           distributions="peaked")  # fmt: skip
    assert honest.status == "pass", honest.message
    # the grid's own draw: with the action at the top, the gradient's other entries are the
    # tail the skip drops (its 6-row cases run each distribution alone)
    grid = {"batch": 2, "seq": 3, "vocab": 32768}
    res = run_one(planted, "ratio_kl", "far-tiles-skipped", "backward_precision", "fp32", grid)
    assert res.status == "fail" and "peaked]" in res.message, res.message


def test_a_reference_sum_skipping_the_policy_masked_columns_fails_on_masked_rows(catalog):
    """A round-16 red team's one-pass kernel skips the policy's -inf columns in the
    reference's logsumexp too. Exact while the reference is masked alike; `masked` rows
    2 and 3 of every 4 hold a reference finite there (no shared logits processor). The
    honest one passes."""
    planted = api.load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    for dist, cand, want in (
        ("normal", "reference-sum-over-policy-columns", "pass"),
        ("masked", "reference-sum-over-policy-columns", "fail"),
        ("masked", "torch", "pass"),
    ):
        res = run_one(planted, "ratio_kl", cand, "forward_accuracy", "fp32", SMALL,
                      distributions=[dist])  # fmt: skip
        assert res.status == want, (dist, cand, res.message)
        assert want == "pass" or "output:kl" in res.message, res.message


def test_masked_references_are_finite_at_the_policy_masked_columns_in_a_row_in_four():
    from kernelcheck.cases.inputs import make_inputs

    op = api.load_catalog().ops["ratio_kl"]
    inputs = make_inputs(op, {"batch": 16, "vocab": 257}, "bf16", 1, "masked")
    policy, ref = inputs["policy_logits"], inputs["ref_logits"]
    masked = torch.isinf(policy).any(-1)
    alike = (torch.isinf(ref) == torch.isinf(policy)).all(-1)
    finite = torch.isfinite(ref).all(-1)
    rows = torch.arange(16) % 4 >= 2
    assert masked.sum() >= 6
    assert (finite[masked & rows]).all() and (alike[masked & ~rows]).all()
    assert (masked & rows).sum() >= 2


def test_drifted_references_sit_above_and_below_the_policy():
    from kernelcheck.cases.inputs import make_inputs

    op = api.load_catalog().ops["ratio_kl"]
    inputs = make_inputs(op, {"batch": 8, "vocab": 257}, "fp32", 0, "normal+drifted")
    shift = (inputs["ref_logits"] - inputs["policy_logits"]).mean(-1)
    assert shift[0::2].abs().max() < 1  # normal rows: within the perturbation
    assert (shift[1::2].abs() > 88.7).all()  # past exp's fp32 range either way
    assert (shift[1::2] > 0).any() and (shift[1::2] < 0).any()


def test_a_log_ratio_clamped_at_20_fails_on_stale_old_logps(catalog):
    """verl clamps the log-ratio at +-20. The old logps hold one row in 8 20 to 40 nats
    deep (stale data): every trial has a log-ratio past 20, where the clamp is off by
    orders of magnitude. Drawn N(0, 1), as they were, no log-ratio got there."""
    from kernelcheck.cases.inputs import make_inputs

    op = catalog.ops["ratio_kl"]
    inputs = make_inputs(op, SMALL, "fp32", 0, "normal")
    wide = (t.double() if t.is_floating_point() else t for t in inputs.values())
    assert float(ratio_kl.gold(*wide)[0].max()) > math.exp(20)
    planted = api.load_catalog([FIXTURES / "planted_ratio_kl.toml"])
    for cand, want in (("ratio-clamped-at-20", "fail"), ("torch", "pass")):
        res = run_one(planted, "ratio_kl", cand, "forward_accuracy", "fp32", SMALL)
        assert res.status == want, (cand, res.message)
        assert want == "pass" or "ratio" in res.message, res.message


def test_drifted_rows_put_most_kl_past_10():
    """The draw itself: a reference 2 to 8 nats per entry from the policy."""
    from kernelcheck.cases.inputs import make_inputs

    op = api.load_catalog().ops["ratio_kl"]
    sizes = {"batch": 64, "vocab": 257}

    def kl_of(dist):
        inputs = make_inputs(op, sizes, "fp32", 0, dist)
        wide = (t.double() if t.is_floating_point() else t for t in inputs.values())
        return ratio_kl.gold(*wide)[1][inputs["attention_mask"]]

    assert 0.3 < float((kl_of("drifted") > 10).double().mean()) < 1.0
    assert float(kl_of("normal").max()) < 10


def test_the_spec_turns_the_inputs_x64_probe_off_where_exp_d_overflows(catalog):
    """At x64 (seed 3, 16 x 3000) d passes 88.7: exp(d) overflows fp32 in any kernel while
    the float64 gold gradient stays finite; the honest candidate gave NaN there."""
    assert catalog.ops["ratio_kl"].checks["contract"].params["scale_up"] == 0.0
    res = run_one(catalog, "ratio_kl", "torch", "contract", "fp32", {"batch": 16, "vocab": 3000},
                  seeds=[3])  # fmt: skip
    assert res.status == "pass", res.message


def test_the_gradient_scale_is_the_size_of_the_terms():
    """|c| (onehot + p): |gradient| off the target, |c| (1 + p_t) on it, 0 where masked."""
    from kernelcheck.ops import ratio_kl

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64).requires_grad_(True)
    ref = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    ids, mask = torch.tensor([2, 5, 0]), torch.tensor([True, True, False])
    old = torch.randn(3, generator=gen, dtype=torch.float64)
    ups = [torch.randn(3, generator=gen, dtype=torch.float64) for _ in range(2)]
    ratio, kl = ratio_kl.gold(x, ref, ids, mask, old)
    (grad,) = torch.autograd.grad([ratio, kl], [x], ups)
    scale = ratio_kl.gradient_scale(ups, x.detach(), ref, ids, mask, old)["policy_logits"]
    off = torch.ones_like(grad, dtype=torch.bool)
    off[torch.arange(3), ids] = False
    torch.testing.assert_close(scale[off], grad[off].abs(), rtol=1e-12, atol=0)
    p = torch.softmax(x.detach(), -1)[torch.arange(2), ids[:2]]
    c = grad[torch.arange(2), ids[:2]].abs() / (1 - p)
    torch.testing.assert_close(scale[torch.arange(2), ids[:2]], c * (1 + p), rtol=1e-12, atol=0)
    assert float(scale[2].sum()) == 0.0


@pytest.mark.parametrize("dist", [None, "peaked", "lm"])
def test_a_kernel_that_caps_the_old_logps_at_zero_passes(catalog, dist):
    """Drawn old logps are never above 0. A near-certain token's logp (a peaked or lm
    row's top token: -10^-2 to -10^-7, -0.7 to -10^-3) stepped by N(0, 0.2^2) went above
    0 in about half the rows whose token the draw set, where a kernel that caps a
    log-probability at 0 (honest on every real input) failed forward_accuracy."""
    from tests.conftest import with_op_candidate

    capped = with_op_candidate(
        catalog, "ratio_kl", "capped", "honest_ratio_kl:old_logps_capped_at_zero"
    )
    kw = {"distributions": [dist]} if dist else {}
    res = run_one(capped, "ratio_kl", "capped", "forward_accuracy", "fp32", SMALL, **kw)
    assert res.status == "pass", res.message
