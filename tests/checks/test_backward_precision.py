"""``backward_precision`` fails a logp backward with one lossy step (tests/fixtures/
backward_bugs.py) and passes every honest one: logp's torch and cpu candidates in every
dtype, and each shipped op's torch candidate on its default grid."""

from __future__ import annotations

import math
import os
from dataclasses import replace

import pytest
import torch

from kernelcheck import api
from kernelcheck.checks.backward_precision import BackwardPrecision, _message
from kernelcheck.checks.metrics import (
    picked_entries,
    row_scale,
    scale_weights,
    scaled_abs_error,
    split_row_sums,
)
from kernelcheck.checks.trial import Trial
from tests.conftest import SMALL, with_candidate

CHECK = "backward_precision"
QWEN3 = {"batch": 8, "vocab": 151936}
# the bug -> the class its worst failure is in (the check reports the part furthest over)
BUGS = {
    "dropped_tiny_terms": "non-target entries",
    "bf16_logsumexp": "target column",  # the others are scaled alike: the target sees it
    "bf16_softmax": "non-target entries",
}


@pytest.fixture(scope="module")
def planted(catalog):
    for name in (*BUGS, "honest_backward"):
        catalog = with_candidate(catalog, name, f"backward_bugs:{name}")
    return catalog


def _results(catalog, op, candidates, dtype, shape=None, checks=(CHECK,), **kw):
    """The results that ran (not skipped): a candidate without an attribute's parameter
    is skipped on the op's attribute sweeps."""
    report = api.run(
        catalog,
        op,
        candidate_names=candidates,
        device="cpu",
        dtype_names=dtype,
        shape=shape,
        check_names=list(checks),
        isolate=False,
        **kw,
    )
    return [r for r in report.results if r.status != "skip"]


@pytest.mark.parametrize("bug", BUGS)
def test_each_planted_bug_fails_on_every_default_logp_shape(planted, bug):
    """fp32, the default grid's 4 shapes (the Qwen3 vocab among them) and 6 distributions."""
    results = _results(planted, "logp", [bug], "fp32", seeds=[0])
    assert len(results) == len(planted.ops["logp"].grid.shapes)
    for r in results:
        assert r.status == "fail", (r.shape, r.message)
        assert r.message.startswith("gradient:logits, ") and "relative L1 error" in r.message
        assert r.metrics["ratio"] > 100 and r.metrics["rel_l1"] > r.tolerance["limit"]
    (qwen,) = [r for r in results if r.shape == QWEN3]
    assert f"gradient:logits, {BUGS[bug]}:" in qwen.message
    assert qwen.message.endswith(f"[seed 0, {qwen.failing_distribution or qwen.distribution}]")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_target_gradient_from_a_16_bit_softmax_fails_on_confident_tokens(planted, dtype):
    """Liger's cross-entropy pattern (``g`` added to the stored 16-bit ``-g p``): exact
    where targets are uniform draws, off where an lm row's target holds 50% to 99.9% of
    the softmax, as a rollout's own sampled token does (uniform targets only: passed)."""
    cat = with_candidate(planted, "liger", "backward_bugs:target_from_stored_softmax")
    (res,) = _results(cat, "logp", ["liger"], dtype, QWEN3, seeds=[0])
    assert res.status == "fail" and "gradient:logits, target column:" in res.message, res.message


# backward_accuracy alone (fp32 atol 1e-5) on the Qwen3 vocab: the dropped terms are at
# most 2^-20 x |upstream| off (max error 2.3e-6), inside it; the bf16 logsumexp and the
# bf16 softmax are caught too, on the rows offset by 1e4 ("large": 6e-2 and 2e-3 off)
ACCURACY_ALONE = {"dropped_tiny_terms": "pass", "bf16_logsumexp": "fail", "bf16_softmax": "fail"}


@pytest.mark.parametrize("bug", BUGS)
def test_what_backward_accuracy_alone_says(planted, bug):
    (res,) = _results(planted, "logp", [bug], "fp32", QWEN3, ["backward_accuracy"], seeds=[0])
    assert res.status == ACCURACY_ALONE[bug], res.message


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_honest_logp_candidates_pass(planted, dtype):
    """torch, cpu and the bugs' honest formula, on the default grid (with its sweeps)."""
    results = _results(planted, "logp", ["torch", "cpu", "honest_backward"], dtype)
    assert {r.candidate for r in results} == {"torch", "cpu", "honest_backward"}
    bad = [(r.candidate, r.shape, r.message) for r in results if r.status != "pass"]
    assert not bad


@pytest.mark.parametrize(
    "op",
    [
        pytest.param("linear_logp", marks=[pytest.mark.slow, pytest.mark.grid]),  # GEMMs
        "ratio_kl",
        "swiglu",
        pytest.param("rms_norm", marks=pytest.mark.slow),  # 15 s
        "entropy",
    ],
)
def test_every_shipped_ops_torch_candidate_passes(catalog, op):
    """Every dtype and shape of the op's default grid; ratio_kl's rows include ones whose
    scale (exp(d) - 1) cancels: judged with the row's scale taken out, they pass."""
    results = _results(catalog, op, ["torch"], None)
    assert results
    bad = [(r.dtype, r.shape, r.message) for r in results if r.status != "pass"]
    assert not bad
    assert all(r.metrics["rel_l1"] <= r.tolerance["limit"] for r in results)


def test_a_reference_autograd_cannot_follow_is_a_skip_saying_so(catalog):
    op = catalog.ops["swiglu"]
    op = replace(op, reference="tests.fixtures.backward_bugs:detached_swiglu_reference")
    cat = replace(catalog, ops={**catalog.ops, "swiglu": op})
    report = api.run(cat, "swiglu", candidate_names=["torch"], device="cpu", dtype_names="fp32",
                     check_names=[CHECK], isolate=False, seeds=[0])  # fmt: skip
    assert {r.status for r in report.results} == {"skip"}
    assert "fp32 reference is not differentiable" in report.results[0].message


def test_an_op_without_a_reference_is_a_skip(catalog):
    op = replace(catalog.ops["swiglu"], reference=None)
    cat = replace(catalog, ops={**catalog.ops, "swiglu": op})
    report = api.run(cat, "swiglu", candidate_names=["torch"], device="cpu", dtype_names="fp32",
                     check_names=[CHECK], isolate=False, seeds=[0])  # fmt: skip
    assert {r.message for r in report.results} == {"op swiglu declares no fp32 reference"}


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no /dev/shm: nothing shared")
def test_the_reference_gradient_is_computed_once_per_trial_for_every_candidate(
    planted, monkeypatch
):
    """The second candidate reads the reference's summary from the shared store; each
    candidate's own gradient is computed once for backward_accuracy and this check."""
    references, gradients = [], []
    chunks, grads = Trial.reference_grad_chunks, Trial.grads.fget

    def counted_chunks(self):
        references.append(self.key)
        return chunks(self)

    def counted_grads(self):
        if "_grads" not in self.__dict__:
            gradients.append((self.ctx.case.candidate, self.key))
        return grads(self)

    monkeypatch.setattr(Trial, "reference_grad_chunks", counted_chunks)
    monkeypatch.setattr(Trial, "grads", property(counted_grads))
    checks = ["backward_accuracy", CHECK]
    results = _results(planted, "logp", ["torch", "honest_backward"], "fp32", SMALL, checks,
                       seeds=[0])  # fmt: skip
    assert {r.status for r in results} == {"pass"}
    assert sorted(references) == sorted(set(references))  # once per trial, not per candidate
    assert sorted(gradients) == sorted(set(gradients))  # once per candidate and trial
    both = {key for cand, key in gradients if cand == "honest_backward"}
    assert both and both <= set(references)


def _judged(x: torch.Tensor, gold: torch.Tensor, index=None):
    picked = picked_entries(index, gold.shape[1])
    err = scaled_abs_error(x, gold, row_scale(x, *scale_weights(gold, picked)))
    return split_row_sums(err, picked)


def test_a_row_scaled_as_a_whole_is_no_error_and_a_changed_entry_is():
    gold = torch.tensor([[0.5, -0.25, 0.125, 0.125], [1.0, 2.0, -3.0, 4.0]], dtype=torch.float64)
    selected, rest = _judged(gold * torch.tensor([[1.001], [0.5]]), gold)
    assert rest.abs().max() < 1e-15 and not selected.any()
    wrong = gold.clone()
    wrong[0, 3] = 0.0  # a dropped term: no scale of the row makes it right
    _, rest = _judged(wrong, gold)
    assert rest[0] > 0.1 and rest[1] == 0


def test_the_target_entry_is_judged_against_the_other_entries_scale():
    gold = torch.tensor([[0.9, -0.5, -0.3, -0.1]], dtype=torch.float64)
    x = gold.clone()
    x[0, 1:] *= 1.01  # every other entry 1% off: their scale, so the target is 1% off
    selected, rest = _judged(x, gold, torch.tensor([0]))
    assert selected[0] == pytest.approx(0.009) and rest[0] < 1e-15
    selected, rest = _judged(x, gold, torch.tensor([-100]))  # ignored: no target entry
    assert selected[0] == 0 and rest[0] > 0


def test_the_error_with_the_scale_out_is_at_most_twice_the_plain_error():
    gen = torch.Generator().manual_seed(0)
    gold = torch.randn(64, 50, generator=gen, dtype=torch.float64)
    x = gold * (1 + 1e-3 * torch.randn(64, 50, generator=gen, dtype=torch.float64))
    _, scaled = _judged(x, gold)
    plain = (x - gold).abs().sum(1)
    assert bool((scaled <= 2 * plain * (1 + 1e-12)).all())


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_bf16_logsumexp_fails_in_16_bits_despite_the_flip_allowance(planted, dtype):
    """The 16-bit index column's limit allows one rounding flip (in the row where it weighs
    most), not one in every row: a logsumexp kept in bf16 still fails far over it."""
    shape = {"batch": 2, "seq": 16, "vocab": 257}
    (res,) = _results(planted, "logp", ["bf16_logsumexp"], dtype, shape, seeds=[0])
    assert res.status == "fail" and res.metrics["ratio"] > 10, res.message
    assert 0 < res.tolerance.get("flip_allowance", 0) < res.tolerance["limit"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_shared_inputs_gradient_is_judged_at_a_training_batch_too(dtype):
    """rms_norm's weight gradient with its 64 partial sums kept in x's dtype: each holds
    one row at the grid's 64 rows at most (as precise as the honest one there), and
    rounds each sum again at the training batch's 4,096 rows."""
    from kernelcheck.spec.model import CheckConfig
    from tests.conftest import FIXTURES, run_one

    planted = api.load_catalog([FIXTURES / "planted_rms_norm.toml"])
    bug, shape = "weight-grad-partials-in-x-dtype", {"batch": 64, "hidden": 1000}
    res = run_one(planted, "rms_norm", bug, "backward_precision", dtype, shape)
    assert res.status == "fail", res.message
    assert "gradient:weight, all entries, at a training batch of 4096 rows" in res.message
    honest = run_one(planted, "rms_norm", "torch", "backward_precision", dtype, shape)
    assert honest.status == "pass", honest.message
    op = planted.ops["rms_norm"]
    grid_rows_only = CheckConfig(params={"big_rows": 0})
    op = replace(op, checks={**op.checks, "backward_precision": grid_rows_only})
    cat = replace(planted, ops={**planted.ops, "rms_norm": op})
    res = run_one(cat, "rms_norm", bug, "backward_precision", dtype, shape)
    assert res.status == "pass", res.message


def test_every_shipped_linear_logp_shape_trains_its_weight_at_4096_tokens(catalog):
    """A training batch is thousands of tokens at every hidden size the grid draws: at the
    grid's 8 x 1024 x 1000 a budget of 2^28 row products gave 256, short of where a GEMM
    dispatches a training batch to tensor cores (TF32 from 2,048 tokens); the spec raises
    the budget for its 8 x 1024 x 2500."""
    from kernelcheck.checks.backward_precision import BackwardPrecision

    op = catalog.ops["linear_logp"]
    params = {**BackwardPrecision.PARAMS, **op.checks["backward_precision"].params}
    for sizes in op.grid.shapes:
        row_work = math.prod(n for d, n in dict(sizes).items() if d not in op.lead)
        assert min(params["big_rows"], params["big_work"] // row_work) == 4096, sizes


@pytest.mark.slow  # two candidates' backward at 4,096 tokens x 1024 x 1000: ~15 s
def test_a_weight_gradient_in_tf32_from_2048_tokens_fails_at_the_grids_real_hidden_size():
    from tests.conftest import FIXTURES, run_one

    planted = api.load_catalog([FIXTURES / "planted_linear_logp.toml"])
    shape = {"tokens": 8, "hidden": 1024, "vocab": 1000}
    bug = "weight-grad-tf32-for-training-batches"
    res = run_one(planted, "linear_logp", bug, "backward_precision", "fp32", shape)
    assert res.status == "fail", res.message
    assert "gradient:weight, all entries, at a training batch of 4096 rows" in res.message
    honest = run_one(planted, "linear_logp", "torch", "backward_precision", "fp32", shape)
    assert honest.status == "pass", honest.message


def test_the_big_batch_cases_training_batch_is_odd_past_2_26_elements_and_bounded(catalog):
    """An odd count past 2^26 row-wise elements at the shipped big-batch shapes; at most
    262,145 rows (past 2^18 an honest GEMM's long sum drifts from the chunked
    reference's), twice 2^26 elements at long rows, 2^33 products of a row's dims."""
    from kernelcheck.cases.grid import Case
    from kernelcheck.checks.backward_precision import BackwardPrecision
    from kernelcheck.checks.context import CaseContext

    def rows(op: str, shape: dict) -> int:
        case = Case(op, "torch", "cpu", "fp32", tuple(shape.items()), (0,), ())
        ctx = CaseContext(catalog.ops[op], case, None, None, None, torch.device("cpu"), True)
        return BackwardPrecision(ctx)._huge_rows()

    assert rows("rms_norm", {"batch": 2, "seq": 16, "hidden": 256}) == 262145  # 2^26 + 256
    assert rows("linear_logp", {"tokens": 64, "hidden": 64, "vocab": 1000}) == 134217  # 2^33
    assert rows("linear_logp", {"tokens": 4, "hidden": 8, "vocab": 64}) == 262145
    assert rows("rms_norm", {"batch": 2, "hidden": 8192}) == 16385  # 2^27 elements


def test_the_limit_is_never_below_twice_an_exactly_rounded_gradients_error():
    """A 16-bit row whose mass sits in one entry may round it the other way than the fp32
    reference did: ratio_kl's honest fp16 gradient at V = 358 (a sweep shape) was 4.7e-5
    off, exactly as the gold rounded once, the reference 1.3e-5, against 2 x 1.3e-5 +
    floor. No kernel does better than the exactly rounded gradient."""
    from types import SimpleNamespace

    check = BackwardPrecision(SimpleNamespace(lead=(1,), op=SimpleNamespace(grad_inputs=[])))
    trial = SimpleNamespace(seed=0, distribution="heavy")
    gold = torch.tensor([1.0], dtype=torch.float64)
    sums = {"cand": 4.677e-5, "ref": 1.3e-5, "exact": 4.677e-5}
    picked = {"gold": gold, **{k: torch.tensor([v], dtype=torch.float64) for k, v in sums.items()}}
    check._judge(trial, "policy_logits", "non-target entries", "heavy", picked, False, "")
    assert check.failed is None and check.closest.bound > 2 * 4.677e-5
    worse = {**picked, "gold": gold, "cand": torch.tensor([3 * 4.677e-5], dtype=torch.float64)}
    check._judge(trial, "policy_logits", "non-target entries", "heavy", worse, False, "")
    assert check.failed is not None
    assert "2 x an exactly rounded gradient's 4.677e-05" in _message(check.failed, check.params)
