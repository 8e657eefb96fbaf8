"""contract: an out-of-range rule scoped to some outputs judges their values and the
gradient that flows from them alone; an empty ``gradients`` list judges no gradient."""

from __future__ import annotations

import pytest

from kernelcheck import api
from kernelcheck.checks.contract import (
    MUST_RAISE_HUGE_ELEMENTS,
    MUST_RAISE_ROWS,
    TRAINING_ROWS,
    WIDE_BATCH_ROWS,
)
from tests.conftest import (
    FIXTURES,
    SPECS,
    honest_result,
    run_one,
    run_small,
    with_candidate,
    with_op_candidate,
)

SHAPE = {"batch": 8, "vocab": 257}


def _fused_catalog(tmp_path, text: str | None = None):
    """tests/specs/logp_entropy.toml (``text`` in its place when given), plus the planted
    ``leaky`` candidate of tests/fixtures."""
    spec = SPECS / "logp_entropy.toml"
    if text is not None:
        (tmp_path / "logp_entropy_op.py").write_text((SPECS / "logp_entropy_op.py").read_text())
        spec = tmp_path / "logp_entropy.toml"
        spec.write_text(text)
    return api.load_catalog([spec, FIXTURES / "planted_logp_entropy.toml"])


@pytest.mark.slow  # ~10 s: the quick suite stays under five minutes
def test_a_scoped_rule_judges_the_gradient_of_its_own_outputs_only(tmp_path):
    """The honest fused kernel's entropy gradient is live on ignored rows: judged on the
    gradient of logp alone it passes; a logp whose gradient leaks there fails."""
    cat = _fused_catalog(tmp_path)
    assert cat.op("logp_entropy").candidates["fused"].backward
    honest = run_one(cat, "logp_entropy", "fused", "contract", "fp32", SHAPE)
    assert honest.status == "pass", honest.message
    leaky = run_one(cat, "logp_entropy", "leaky", "contract", "fp32", SHAPE)
    assert leaky.status == "fail"
    assert "gradient:logits (from logp) is not zero on out-of-range rows" in leaky.message


def test_an_unscoped_rule_judges_every_output_and_the_whole_gradient(tmp_path):
    text = (SPECS / "logp_entropy.toml").read_text().replace('outputs = ["logp"]', "")
    res = run_one(
        _fused_catalog(tmp_path, text), "logp_entropy", "fused", "contract", "fp32", SHAPE
    )
    assert res.status == "fail"
    assert "entropy: target=" in res.message
    assert "gradient:logits is not zero on out-of-range rows" in res.message


def test_an_empty_gradients_list_judges_no_gradient(tmp_path):
    text = (SPECS / "logp_entropy.toml").read_text()
    text = text.replace('outputs = ["logp"]', 'outputs = ["logp"]\ngradients = []')
    cat = _fused_catalog(tmp_path, text)
    assert cat.op("logp_entropy").out_of_range.gradients == ()
    res = run_one(cat, "logp_entropy", "leaky", "contract", "fp32", SHAPE)
    assert res.status == "pass", res.message


def test_an_all_true_mask_must_give_the_bits_of_no_mask(catalog):
    """A kernel that sums in another order once given a mask fails the contract where an
    attribute switches the mask on; the honest candidates pass it."""
    cat = with_candidate(catalog, "bug", "broken_logp:mask_switches_the_sum", backward=False)
    kw = dict(seeds=[0], attributes={"with_mask": True})
    res = run_small(cat, "bug", ["contract"], **kw)["contract"]
    assert res.status == "fail" and "all-true mask: output 'logp' differs" in res.message
    honest = run_small(catalog, "torch", ["contract"], **kw)["contract"]
    assert honest.status == "pass", honest.message


@pytest.mark.parametrize(
    "bug,says",
    [
        ("training_path_checks_only_negative", "logp (with grad): target=256 (out of range)"),
        ("rollout_path_checks_only_negative", "logp under inference_mode: target=256 (out"),
    ],
)
def test_each_call_mode_must_give_the_out_of_range_value(catalog, bug, says):
    """The training path (with grad) and the rollout's (``inference_mode``) may be
    kernels of their own, each with its own range check: each is called on the planted
    out-of-range targets."""
    cat = with_candidate(catalog, "bug", f"broken_logp:{bug}")
    res = run_one(cat, "logp", "bug", "contract", "fp32", {"batch": 8, "vocab": 256})
    assert res.status == "fail" and says in res.message, res.message
    honest = run_one(cat, "logp", "torch", "contract", "fp32", {"batch": 8, "vocab": 256})
    assert honest.status == "pass", honest.message


def test_a_training_path_that_ignores_the_mask_fails(catalog):
    cat = with_candidate(catalog, "bug", "broken_logp:training_path_ignores_mask")
    kw = dict(seeds=[0], attributes={"with_mask": True})
    res = run_small(cat, "bug", ["contract"], **kw)["contract"]
    assert res.status == "fail" and "logp (with grad): masked position" in res.message


def test_the_drawn_trials_meet_a_training_path_that_reads_past_its_row(catalog):
    """Not only the contract's probe: every check's trials hold targets >= vocab, so the
    training call's outputs that backward_accuracy judges show the bug too."""
    cat = with_candidate(catalog, "bug", "broken_logp:training_path_checks_only_negative")
    res = run_one(cat, "logp", "bug", "backward_accuracy", "fp32", {"batch": 64, "vocab": 256})
    assert res.status == "fail" and "output (with grad)" in res.message, res.message


@pytest.mark.parametrize(
    "bug,says",
    [
        # a case without a mask calls the kernel with one too (and the reverse), in its own
        # process: a build compiled without the mask must not serve a masked call
        ("mask_presence_cached", "with_mask=true after a call at with_mask=false: output"),
        # one sequence's shifted labels, ``input_ids[:, 1:]``, are contiguous one element
        # into their storage: a kernel that reads from the storage's start reads every id
        # early (no other layout has a contiguous integer input past its storage's start)
        ("targets_from_storage_start", "contiguous views past their storage's start: output"),
    ],
)
def test_a_contract_layout_or_call_that_the_grid_never_makes_fails(catalog, bug, says):
    cat = with_candidate(catalog, "bug", f"broken_logp:{bug}")
    res = run_small(cat, "bug", ["contract"], seeds=[0])["contract"]
    assert res.status == "fail", res.message
    assert says in res.message, res.message
    honest = run_small(catalog, "torch", ["contract"], seeds=[0])["contract"]
    assert honest.status == "pass", honest.message


@pytest.mark.parametrize(
    ("op", "bug", "says"),
    [
        (
            "logp",
            "broken_logp:rows_walked_by_one_pitch_from_256",
            f"shifted-token view in a training batch of {TRAINING_ROWS} rows: output 'logp' "
            "differs",
        ),
        *[
            (
                "ratio_kl",
                f"broken_ratio_kl:range_check_skipped_from_{rows}_rows",
                "action_ids=-100 at an active position (attention_mask true) in a batch of "
                f"{MUST_RAISE_ROWS} rows did not raise",
            )
            for rows in (512, 8192)
        ],
        (
            "ratio_kl",
            "broken_ratio_kl:range_check_skipped_past_2_26_logits",
            "action_ids=-100 at an active position (attention_mask true) in a batch of "
            f"{MUST_RAISE_HUGE_ELEMENTS // 257 + 1} rows did not raise",
        ),
        (
            "logp",
            "broken_logp:rows_walked_by_one_pitch_past_2_24",
            f"shifted-token view in a wide batch of {WIDE_BATCH_ROWS} rows: output 'logp' differs",
        ),
        (
            "swiglu",
            "broken_swiglu:result_written_over_gate_half_past_2_24",
            f"gate and up halves of one buffer in a wide batch of {WIDE_BATCH_ROWS} rows: the "
            "call changed input 'gate'",
        ),
    ],
)
def test_a_path_taken_past_a_row_count_fails_the_training_batchs_probes(catalog, op, bug, says):
    """Round-22 red teams' kernels, right up to 255 and 511 rows: a logp walking 3-D
    logits by one row pitch (RL's shifted view read early), a ratio_kl skipping its range
    check (a host sync; a round-23 one's from 8,192 rows). The layout probes at 4,096
    rows and the must-raise ones at 65,537 fail them; the honest ones pass, at the grid's
    first shape. Round-23 ones' from 2^24 elements (logp's pitch walk; a swiglu writing
    its result over the gate half of one gate_up buffer) fail the wide batch's views; a
    round-24 one's range check skipped past 2^26 logits, the must-raise huge batch."""
    shape = dict(catalog.ops[op].grid.shapes[0])
    res = run_one(with_op_candidate(catalog, op, "bug", bug), op, "bug", "contract", "fp32", shape)
    assert res.status == "fail", res.message
    assert says in res.message, res.message
    honest = honest_result(catalog, op, "contract", "fp32", shape)
    assert honest.status == "pass", honest.message


def test_a_token_mean_upstream_fp16_cannot_hold_is_not_judged(catalog):
    """x2^-30 underflows an fp16 upstream to 0: an honest backward then gives an fp32
    weight (a norm kept in fp32 beside fp16 activations) a zero gradient, which the
    gold of the drawn upstream must not judge."""
    from dataclasses import replace

    op = catalog.ops["rms_norm"]
    inputs = tuple(replace(i, dtype="float32") if i.name == "weight" else i for i in op.inputs)
    cat = replace(catalog, ops={**catalog.ops, "rms_norm": replace(op, inputs=inputs)})
    res = run_one(cat, "rms_norm", "torch", "contract", "fp16", {"batch": 8, "hidden": 256})
    assert res.status == "pass", res.message


@pytest.mark.parametrize(
    ("op", "bug", "shape", "says"),
    [
        (
            "entropy",
            "broken_entropy:nan_read_as_masked",
            {"batch": 8, "vocab": 257},
            "a NaN in every other row of logits: output 'entropy': 4 of 4 elements finite",
        ),
        (
            "rms_norm",
            "broken_rms_norm:accumulates_in_default_dtype",
            {"batch": 8, "hidden": 2048},
            "under torch.set_default_dtype(torch.bfloat16): output 'y'",
        ),
    ],
)
def test_a_nan_read_as_masked_or_a_default_dtype_accumulator_fails(catalog, op, bug, shape, says):
    """A round-13 red team's two misses: an entropy whose fmax and -inf guard read a NaN
    logit as masked (finite where the gold is NaN), an rms_norm accumulating in
    ``torch.zeros(rows)`` (bf16 where a script set the default dtype). Honest ones pass."""
    cat = with_op_candidate(catalog, op, "bug", bug)
    res = run_one(cat, op, "bug", "contract", "fp32", shape)
    assert res.status == "fail", res.message
    assert says in res.message, res.message
    honest = honest_result(catalog, op, "contract", "fp32", shape)
    assert honest.status == "pass", honest.message


def test_squares_in_the_autocast_dtype_fail_under_fp16_autocast(catalog):
    """A round-24 red team's rms_norm: under autocast, with x already in its dtype, the
    squares taken in that dtype. bf16 holds them, so the bf16-only autocast probe passed
    it; under fp16 autocast the scaled rows (x64, past 256) zero their outputs."""
    cat = with_op_candidate(catalog, "rms_norm", "bug", "broken_rms_norm:squares_in_autocast_dtype")
    shape = {"batch": 8, "hidden": 2048}
    res = run_one(cat, "rms_norm", "bug", "contract", "fp16", shape)
    assert res.status == "fail", res.message
    assert "under torch.autocast('cpu', float16), x x64: output 'y'" in res.message, res.message
    honest = honest_result(catalog, "rms_norm", "contract", "fp16", shape)
    assert honest.status == "pass", honest.message


def test_an_honest_library_passes_after_its_siblings_refill_the_shared_logits(catalog):
    """A logp whose module has an honest entropy too: the contract calls the entropy on
    the very logits, refills them with the next batch's (rows rolled), and judges the
    logp against the gold of what its inputs then hold (the ids rolled too; rolling the
    logits alone, against a gold of both rolled, failed every honest library)."""
    shape = dict(catalog.ops["logp"].grid.shapes[0])
    lib = with_candidate(catalog, "library", "honest_library:logp")
    with_siblings = run_one(lib, "logp", "library", "contract", "fp32", shape, seeds=[0])
    assert with_siblings.status == "pass", with_siblings.message
    alone = run_one(catalog, "logp", "torch", "contract", "fp32", shape, seeds=[0])
    assert alone.status == "pass", alone.message
    # the siblings' probes ran: the same function alone verifies fewer rules
    assert with_siblings.metrics["verified"] > alone.metrics["verified"]


def test_nan_in_both_calls_agrees_and_nan_in_one_does_not():
    """Two calls of the candidate compared (under autocast and without): an honest
    kernel's NaN past half range is its NaN in both, and agrees; a NaN in one call only,
    or a value where the other has NaN, is a problem."""
    import torch

    from kernelcheck.checks.contract import Contract
    from kernelcheck.spec.model import Tolerance

    contract = Contract.__new__(Contract)  # _close reads and writes only ``problems``
    contract.problems = []
    tol, nan = Tolerance(atol=1e-6, rtol=0.0), float("nan")
    same = torch.tensor([1.0, nan, -2.0])
    contract._close("both", "the call's without", tol, same, same.clone(), scale=2.0)
    assert contract.problems == []
    one = torch.tensor([1.0, 1.0, -2.0])
    contract._close("got", "the call's without", tol, same, one, scale=2.0)
    contract._close("want", "the call's without", tol, one, same, scale=2.0)
    assert [p.split(":")[0] for p in contract.problems] == ["got", "want"], contract.problems


@pytest.mark.parametrize(
    ("op_name", "bug", "dim"),
    [
        ("rms_norm", "broken_rms_norm:staged_in_one_fp32_buffer_past_2_22", "hidden"),
        ("swiglu", "broken_swiglu:staged_in_one_fp32_workspace_past_2_25", "inter"),
    ],
)
def test_a_buffer_shared_by_threads_past_a_size_fails_two_threads_at_a_big_batch(
    catalog, op_name, bug, dim
):
    """Red teams' kernels staged 16-bit inputs in one fp32 buffer shared by every caller
    past a size: a round-26 rms_norm from 2^22 elements (the probe's calls of 2^18 took
    the honest path), a round-27 swiglu from 2^24 (the big batch then stopped at 65,537
    rows, 2^24 elements at inter 256; this one stages from 2^25). Two threads at once run
    again at CONCURRENT_ELEMENTS (2^26) in the big-batch probes' cases (bf16's too), up
    to 2^20 rows; the honest ones pass."""
    from kernelcheck.checks.contract import CONCURRENT_ELEMENTS

    cat = with_op_candidate(catalog, op_name, "bug", bug)
    shape = dict(catalog.ops[op_name].grid.shapes[0])
    rows = CONCURRENT_ELEMENTS // shape[dim]
    res = run_one(cat, op_name, "bug", "contract", "bf16", shape)
    assert res.status == "fail", res.message
    assert f"two threads calling at once ({rows} rows, forward" in res.message, res.message
    honest = honest_result(catalog, op_name, "contract", "bf16", shape)
    assert honest.status == "pass", honest.message


def test_a_16_bit_path_walking_a_big_strided_input_fails_the_wide_views_in_bf16(catalog):
    """A round-27 red team's rms_norm walked a 16-bit x of 2^24+ elements whose lead dims
    do not collapse by one pitch, with no copy: the wide batch's views (65,537 rows at
    hidden 256) ran in the first dtype only. They run in every dtype; the honest passes."""
    bug = "broken_rms_norm:rows_walked_by_one_pitch_past_2_24_in_16_bits"
    cat = with_op_candidate(catalog, "rms_norm", "bug", bug)
    shape = dict(catalog.ops["rms_norm"].grid.shapes[0])
    res = run_one(cat, "rms_norm", "bug", "contract", "bf16", shape)
    assert res.status == "fail", res.message
    assert "view in a wide batch of 65537 rows" in res.message, res.message
    honest = honest_result(catalog, "rms_norm", "contract", "bf16", shape)
    assert honest.status == "pass", honest.message
