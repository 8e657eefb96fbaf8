"""entropy: its gold, its shipped spec, and a planted bug."""

from __future__ import annotations

import math

import pytest
import torch

from kernelcheck import api
from kernelcheck.ops import entropy
from tests.conftest import FIXTURES, honest_result, run_one, with_op_candidate

SMALL = {"batch": 2, "seq": 16, "vocab": 257}


def test_gold_matches_the_definition_and_masked_entries_add_nothing():
    x = torch.randn(3, 7, dtype=torch.float64)
    p = torch.softmax(x, -1)
    assert torch.allclose(entropy.gold(x), -(p * p.log()).sum(-1), rtol=1e-13, atol=0)
    masked = torch.cat([x, torch.full((3, 2), float("-inf"), dtype=torch.float64)], -1)
    assert torch.allclose(entropy.gold(masked), entropy.gold(x), rtol=1e-13, atol=0)


def test_gold_backward_is_autograd_of_the_gold_where_that_is_exact():
    x = torch.randn(4, 9, 300, dtype=torch.float64).requires_grad_(True)
    g = torch.randn(4, 9, dtype=torch.float64)
    (auto,) = torch.autograd.grad(entropy.gold(x), [x], g)
    analytic = entropy.gold_backward([g], x.detach())["logits"]
    assert torch.allclose(analytic, auto, rtol=1e-12, atol=1e-15)


def test_gold_backward_keeps_a_near_one_hot_rows_argmax_entry():
    """Row (0, -64): dH/dx = (-64, 64) * p1 * p2 exactly, 1e-26. Autograd of the gold adds
    and subtracts 1/s and returns 0 for the argmax: it failed an exact fp32 kernel."""
    x = torch.tensor([[0.0, -64.0]], dtype=torch.float64)
    p2 = math.exp(-64) / (1 + math.exp(-64))
    want = torch.tensor([[-64.0, 64.0]], dtype=torch.float64) * (1 - p2) * p2
    one = torch.ones(1, dtype=torch.float64)
    assert torch.allclose(entropy.gold_backward([one], x)["logits"], want, rtol=1e-12, atol=0)
    (auto,) = torch.autograd.grad(entropy.gold(x.requires_grad_(True)), [x], one)
    assert auto[0, 0] == 0  # what the check compared with before
    scale = entropy.gradient_scale([one], x.detach())["logits"]
    assert scale[0, 0] == pytest.approx(1.0, rel=1e-12)  # the terms |g| * p that cancel
    assert bool((scale >= want.abs()).all())


def test_gradient_scale_is_zero_on_masked_entries_and_never_below_the_gradient():
    x = torch.randn(6, 50, dtype=torch.float64)
    x[:, ::3] = float("-inf")
    g = torch.randn(6, dtype=torch.float64)
    grad = entropy.gold_backward([g], x)["logits"]
    scale = entropy.gradient_scale([g], x)["logits"]
    assert bool(torch.isfinite(scale).all()) and bool((scale[:, ::3] == 0).all())
    assert bool((scale >= grad.abs()).all()) and bool((grad[:, ::3] == 0).all())


# hand-written backwards (tests/fixtures/broken_entropy.py): the honest formulas pass
# backward_precision on the default grid, a lossy step fails it
HAND_WRITTEN = {
    "textbook_backward": "pass",
    "centred_backward": "pass",
    "backward_drops_tiny_terms": "fail",
    "backward_bf16_softmax": "fail",
    "backward_bf16_sum": "fail",
}


@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_backward_precision_on_hand_written_backwards(catalog, name):
    cat = with_op_candidate(catalog, "entropy", name, f"broken_entropy:{name}")
    results = []
    for shape in catalog.ops["entropy"].grid.shapes[:3]:  # the Qwen3 vocab's is slow
        report = api.run(cat, "entropy", candidate_names=[name], dtype_names="fp32",
                         shape=dict(shape), check_names=["backward_precision"], isolate=False,
                         seeds=[0, 1])  # fmt: skip
        results += report.results
    statuses = {r.status for r in results}
    if HAND_WRITTEN[name] == "pass":
        assert statuses == {"pass"}, [r.message for r in results if r.status != "pass"]
    else:
        assert "fail" in statuses
        failed = next(r for r in results if r.status == "fail")
        assert failed.metrics["ratio"] > 10, failed.message


@pytest.mark.slow
@pytest.mark.grid
def test_the_shipped_spec_passes_the_honest_candidate(catalog):
    report = api.run(catalog, "entropy", candidate_names=["torch"], isolate=False)
    assert report.results and report.passed, [
        (r.case_id, r.check, r.message) for r in report.results if r.status != "pass"
    ]


def test_tiles_skipped_far_below_the_max_fail_on_peaked_rows_alone():
    """A round-32 red team's fp32 entropy skipped each 4,096-column tile 20 nats below the
    row's max: exact on every other distribution the grid draws (lm's tails reach within
    20 nats of the max), off on a converged policy's rows, at the Qwen3 vocabulary."""
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    others = "normal+large+masked+equal+heavy+lm"
    shape = {"batch": 8, "vocab": 151936}
    for dists, want in ((others, "pass"), ("peaked", "fail")):
        for check in ("forward_accuracy", "forward_precision"):
            res = run_one(
                planted, "entropy", "far-tiles-skipped", check, "fp32", shape, distributions=dists
            )
            assert res.status == want, (dists, check, res.message)


def test_an_unshifted_formula_fails_on_large_rows():
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    bad = run_one(planted, "entropy", "unshifted", "forward_accuracy", "fp32", SMALL)
    assert bad.status == "fail" and "large" in bad.message, bad.message
    honest = honest_result(planted, "entropy", "forward_accuracy", "fp32", SMALL)
    assert honest.status == "pass", honest.message


def test_an_online_merge_that_only_skips_minus_inf_fails_on_lowest_value_masks(catalog):
    """Half the masked rows hold the dtype's lowest finite value (HF's masked_fill): an
    online merge that skips -inf only returns NaN where a block is all finfo.min. With
    -inf masks alone it passed every check."""
    cat = with_op_candidate(
        catalog, "entropy", "online", "broken_entropy:online_merge_of_lowest_blocks", False
    )
    res = run_one(cat, "entropy", "online", "forward_accuracy", "fp32", SMALL, seeds=[0])
    assert res.status == "fail" and "NaN/Inf where gold is finite" in res.message, res.message
    assert "masked" in res.message
    for dist in ("normal", "large", "heavy"):  # exact where nothing is masked
        ok = run_one(
            cat, "entropy", "online", "forward_accuracy", "fp32", SMALL, distributions=dist
        )
        assert ok.status == "pass", (dist, ok.message)


@pytest.mark.slow  # ~10 s: the quick suite stays under five minutes
def test_a_result_cached_by_tensor_and_version_fails_on_a_refilled_buffer(catalog):
    cat = with_op_candidate(catalog, "entropy", "cached", "broken_entropy:result_cached_by_version")
    res = run_one(cat, "entropy", "cached", "contract", "fp32", SMALL)
    assert res.status == "fail" and "logits updated in place between calls" in res.message
    assert run_one(catalog, "entropy", "torch", "contract", "fp32", SMALL).status == "pass"


def test_an_output_buffer_kept_under_inference_mode_fails_integrity():
    """A rollout's calls run under ``torch.inference_mode``: a buffer reused there alone
    (a fresh one under ``no_grad``) is overwritten by the next call."""
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    bad = run_one(planted, "entropy", "output-buffer-in-inference-mode", "integrity", "fp32", SMALL)
    assert bad.status == "fail", bad.message
    assert "forward (inference_mode) result 0 of one call shares memory" in bad.message
    assert run_one(planted, "entropy", "torch", "integrity", "fp32", SMALL).status == "pass"


def test_an_output_buffer_kept_past_2_22_logits_fails_integritys_wide_second_call(catalog):
    """A round-23 red team's: the buffer kept under inference_mode from 2^22 logits on
    only; the trial's 64 rows never reach it. The second call again at a wide batch, in
    the grid's first shape's case, overwrites the first's result; the honest one passes.
    A result kept by the inputs' address from 2^22 logits on fails contract's refill at
    that wide batch."""
    bug = "broken_entropy:output_buffer_in_inference_mode_past_2_22"
    cat = with_op_candidate(catalog, "entropy", "bug", bug)
    shape = dict(catalog.ops["entropy"].grid.shapes[0])
    bad = run_one(cat, "entropy", "bug", "integrity", "fp32", shape)
    assert bad.status == "fail", bad.message
    assert "forward (inference_mode) result 0 of 65537 rows of one call shares memory" in (
        bad.message
    ), bad.message
    assert run_one(catalog, "entropy", "torch", "integrity", "fp32", shape).status == "pass"
    bug = "broken_entropy:result_kept_by_address_past_2_22"  # refilled in place at the batch
    cat = with_op_candidate(catalog, "entropy", "bug", bug)
    bad = run_one(cat, "entropy", "bug", "contract", "fp32", shape)
    assert bad.status == "fail", bad.message
    assert "rows rolled, weights negated, in a wide batch of 65537 rows: output" in bad.message
    assert run_one(catalog, "entropy", "torch", "contract", "fp32", shape).status == "pass"


@pytest.mark.slow  # ~10 s: the quick suite stays under five minutes
def test_a_backward_reading_an_output_edited_in_place_fails_the_contract():
    """The textbook backward reading H from ``ctx.h``: ``h.add_(1)`` between forward and
    backward shifts its gradient; the shipped candidate keeps its bits."""
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    bad = run_one(planted, "entropy", "output-kept-on-ctx", "contract", "fp32", SMALL)
    assert bad.status == "fail", bad.message
    assert "outputs edited in place (+1) before backward" in bad.message, bad.message
    honest = honest_result(planted, "entropy", "contract", "fp32", SMALL)
    assert honest.status == "pass", honest.message


def test_a_backward_reading_a_per_shape_workspace_fails_with_two_calls_in_flight():
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    bad = run_one(planted, "entropy", "workspace-per-shape", "contract", "fp32", SMALL)
    assert bad.status == "fail" and "calls in flight" in bad.message, bad.message
    assert "call 1's gradient" in bad.message, bad.message


@pytest.mark.slow
def test_an_out_of_range_rule_scoped_to_one_output(tmp_path):
    """A fused logp + entropy kernel: ignored rows give logp exactly 0 and their real
    entropy. Scoped to logp the honest kernel passes contract; unscoped, it would not."""
    from tests.conftest import SPECS

    text = (SPECS / "logp_entropy.toml").read_text()
    for scoped, want in ((True, "pass"), (False, "fail")):
        spec = tmp_path / ("scoped.toml" if scoped else "unscoped.toml")
        body = text if scoped else text.replace('outputs = ["logp"]', "")
        spec.write_text(body)
        (tmp_path / "logp_entropy_op.py").write_text((SPECS / "logp_entropy_op.py").read_text())
        cat = api.load_catalog([spec])
        res = run_one(cat, "logp_entropy", "fused", "contract", "fp32", {"batch": 8, "vocab": 257})
        assert res.status == want, res.message
        if want == "fail":
            assert res.message.startswith("entropy: target=") or "entropy: target=" in res.message
    report = api.run(api.load_catalog([SPECS / "logp_entropy.toml"]), "logp_entropy", isolate=False)
    assert report.passed, [(r.check, r.message) for r in report.results if r.status != "pass"]
    acc = next(r for r in report.results if r.check == "forward_accuracy")
    assert acc.tolerance["per_name"]["entropy"]["atol"] == 3e-5


@pytest.mark.slow  # 12 s: the training-path one below stays in the quick suite
def test_an_entropy_reusing_its_librarys_logp_row_statistics_fails_the_contract():
    """shared_row_stats: logp keeps each row's logsumexp for the entropy of the same
    tensor, keyed by its address and version (not the temperature). Judged alone, each op
    is honest; the contract calls the module's logp first (its sibling for the catalog's
    logp op), at each of logp's temperatures, then on the refilled tensor."""
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    name = "row-stats-from-logp"
    bad = run_one(planted, "entropy", name, "contract", "fp32", SMALL, seeds=[0])
    assert bad.status == "fail", bad.message
    assert bad.message.startswith("after logp on the same logits: output 'entropy'")
    for check in ("forward_accuracy", "determinism"):  # alone, it is honest
        assert run_one(planted, "entropy", name, check, "fp32", SMALL, seeds=[0]).status == "pass"
    honest = run_one(planted, "entropy", "torch", "contract", "fp32", SMALL, seeds=[0])
    assert honest.status == "pass", honest.message


def test_an_entropy_reusing_logp_row_statistics_on_the_training_path_fails_the_contract():
    """The same state kept and read by the forwards with grad only: the contract calls
    the module's logp with grad too, then the candidate's forward and backward."""
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    name = "row-stats-from-logp-in-training"
    bad = run_one(planted, "entropy", name, "contract", "fp32", SMALL, seeds=[0])
    assert bad.status == "fail", bad.message
    assert "after logp at temperature=0.7 on the same logits (with grad): output" in bad.message
    assert "on the same logits: output" not in bad.message  # its no-grad path is honest
