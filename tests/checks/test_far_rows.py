"""The far-rows lead: 65,537 rows at a real hidden size or vocabulary (2,560), judged at
its first and last rows against the gold of those rows alone. A launch capped at 65,535
blocks of one row leaves the last rows unwritten; every narrower batch passes it."""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.checks.far_rows import (
    FILLERS,
    JUDGED,
    body_rows_differing,
    frozen_calls,
    judged_positions,
    row_order,
)
from kernelcheck.checks.shape_sweep import LONG_ROWS, WIDE_BLOCK_ROWS, far_rows_shape
from tests.conftest import failed_sweep_reproduces, run_one, with_op_candidate
from tests.fixtures.grid_cap_bugs import rows_reached


def test_judged_rows_are_distinct_draws_at_both_ends_and_copies_between():
    rows = LONG_ROWS
    order = row_order(rows)
    assert len(order) == rows
    at = judged_positions(rows).tolist()
    assert at[:JUDGED] == list(range(JUDGED)) and at[-1] == rows - 1
    judged = [order[i] for i in at]
    assert sorted(judged) == list(range(2 * JUDGED))  # each drawn row judged once
    between = set(order[JUDGED : rows - JUDGED])
    assert between == set(range(2 * JUDGED, 2 * JUDGED + FILLERS))  # never a judged row


def test_the_far_rows_lead_passes_one_row_a_block_launches_at_every_op(catalog):
    for name, op in catalog.ops.items():
        label, sizes = far_rows_shape(op)
        widest = max(sizes, key=lambda d: (d not in op.lead, sizes[d]))
        assert sizes[op.lead[0]] == LONG_ROWS > rows_reached(sizes[widest]), name
        assert sizes[widest] == 2560 and label == f"{LONG_ROWS} rows at {widest}=2560"
        # the narrower long lead and the wide batches stay within such a launch
        assert rows_reached(257) > LONG_ROWS
        # at the narrowest dtype: past 65,535 blocks of two rows of 2,560
        label, sizes = far_rows_shape(op, WIDE_BLOCK_ROWS)
        assert sizes[op.lead[0]] == WIDE_BLOCK_ROWS > rows_reached(2560, 8192) > LONG_ROWS


@pytest.mark.parametrize(
    ("op", "bug", "judged"),
    [
        ("logp", "logp", "forward_accuracy"),
        pytest.param("entropy", "entropy", "forward_accuracy", marks=pytest.mark.slow),
        pytest.param("rms_norm", "rms_norm", "forward_accuracy", marks=pytest.mark.slow),
        pytest.param("rms_norm", "rms_norm_backward", "backward_accuracy", marks=pytest.mark.slow),
    ],
)
def test_a_launch_capped_at_65535_blocks_fails_at_its_last_rows(catalog, op, bug, judged):
    cat = with_op_candidate(catalog, op, "bug", f"grid_cap_bugs:{bug}")
    shape = dict(cat.ops[op].grid.shapes[0])
    res = run_one(cat, op, "bug", "shape_sweep", "fp16", shape, seeds=[0])
    assert res.status == "fail", res.message
    assert res.message.startswith(f"at {LONG_ROWS} rows at "), res.message
    assert 2560 in res.metrics["failing_shape"].values()
    assert res.metrics["failing_check"] == judged
    assert "first at row 65535" in res.message and "NaN" in res.message, res.message


def test_a_launch_of_65535_blocks_of_two_rows_fails_in_the_narrowest_dtype(catalog):
    """Two rows of 2,560 a block reach 131,070 rows: the far-rows lead passes it at 65,537
    rows (fp16) and fails it at 131,071 (bf16, the grid's narrowest dtype)."""
    cat = with_op_candidate(catalog, "logp", "bug", "grid_cap_bugs:logp_two_rows_a_block")
    shape = dict(cat.ops["logp"].grid.shapes[0])
    (res,) = api.run(  # isolated: each call within its memory budget, a process's own
        *(cat, "logp"),
        **dict(candidate_names=["bug"], dtype_names="bf16", shape=shape, seeds=[0]),
        **dict(check_names=["shape_sweep"], sweeps=False, isolate=True),
    ).results
    assert res.status == "fail", res.message
    assert res.message.startswith(f"at {WIDE_BLOCK_ROWS} rows at vocab=2560"), res.message
    assert "first at row 131070" in res.message, res.message
    # in process no budget can be set: the lead of 65,537 rows instead, and it says so
    res = run_one(cat, "logp", "bug", "shape_sweep", "bf16", shape, seeds=[0])
    assert res.status == "pass", res.message
    assert [f"{WIDE_BLOCK_ROWS} rows at vocab=2560, with grad"] == [
        part for part, _ in res.metrics["not_judged"] if part.startswith(str(WIDE_BLOCK_ROWS))
    ]


def _failed_sweep(catalog, op: str, bug: str):
    """``bug``'s fp32 shape_sweep at the op's first grid shape, which must fail."""
    cat = with_op_candidate(catalog, op, "bug", bug)
    res = run_one(
        cat, op, "bug", "shape_sweep", "fp32", dict(cat.ops[op].grid.shapes[0]), seeds=[0]
    )
    assert res.status == "fail", res.message
    return res


def test_a_switch_of_order_past_2_27_logits_fails_by_its_bits_at_the_far_rows(catalog):
    """Accurate, but the rows of a batch past 2^27 elements (65,537 rows at 2,560) get
    other bits than the same rows in a small batch: the far-rows lead compares them."""
    res = _failed_sweep(catalog, "logp", "scale_bugs:switches_order_past_2_27_logits")
    assert res.message.startswith(f"at {LONG_ROWS} rows at vocab=2560"), res.message
    assert "other bits than the same rows in a batch of 192; first at row 0" in res.message
    assert res.metrics["failing_check"] == "forward_invariance"


def test_a_flat_pass_whose_thread_shares_end_in_scalar_tails_fails_between_the_judged_rows(
    catalog,
):
    """swiglu past 2^27 elements as one flat pass over the threads, each share ending in
    a scalar tail with bits of its own; the batch's last share has none, so its first and
    last rows keep their bits (a round-17 red team's plain torch.sigmoid passed): every
    row between is compared with the row it copies."""
    res = _failed_sweep(catalog, "swiglu", "broken_swiglu:flat_pass_scalar_tails_past_2_27")
    assert res.message.startswith(f"at {LONG_ROWS} rows at "), res.message
    assert "rows between the judged ones have other bits than the row each copies" in res.message
    assert res.metrics["failing_check"] == "forward_invariance"


def test_a_dx_only_kernel_whose_tail_is_unwritten_fails_at_the_far_rows_frozen(catalog):
    """rms_norm with a frozen weight (LoRA) and 4,096+ rows takes a dx-only kernel of 4
    rows a program whose last rows % 4 are never written (a round-17 red team's): the
    far-rows lead's 65,537 rows, their backward again with the weight frozen, fail it."""
    res = _failed_sweep(catalog, "rms_norm", "broken_rms_norm:frozen_weight_tail_unwritten")
    assert res.message.startswith(f"at {LONG_ROWS} rows at hidden=2560"), res.message
    assert "gradient:x (weight frozen)" in res.message, res.message
    assert f"first at row {LONG_ROWS - 1}" in res.message, res.message


def test_a_gate_only_backward_past_128_rows_fails_at_the_far_rows_with_up_frozen(
    catalog, monkeypatch
):
    """swiglu with ``up`` frozen and 128+ rows takes a d_gate-only kernel with its
    operands swapped (a round-22 red team's): the grid's frozen calls (64 rows at most)
    pass it; the wide batches' frozen calls fail it first, and without them the far-rows
    lead's backward with each row-wise input alone fails it."""
    from kernelcheck.checks import shape_sweep

    bug = "broken_swiglu:gate_only_backward_swapped_past_128_rows"
    res = _failed_sweep(catalog, "swiglu", bug)
    assert res.message.startswith("at 4096 rows at inter=257"), res.message
    assert "gradient:gate (up frozen)" in res.message, res.message
    wide = shape_sweep.wide_batches  # plain (label, sizes): their frozen calls off
    monkeypatch.setattr(shape_sweep, "wide_batches", lambda *a, **k: [(*s,) for s in wide(*a, **k)])
    res = _failed_sweep(catalog, "swiglu", bug)
    assert res.message.startswith(f"at {LONG_ROWS} rows at "), res.message
    assert "gradient:gate (up frozen)" in res.message, res.message


def test_each_row_wise_grad_input_is_judged_alone_at_the_far_rows():
    assert frozen_calls(["x", "weight"], ["x"]) == [("x",)]
    assert frozen_calls(["gate", "up"], ["gate", "up"]) == [("gate",), ("up",)]
    assert frozen_calls(["a", "b", "w"], ["a", "b"]) == [("a", "b"), ("a",), ("b",)]
    assert frozen_calls(["logits"], ["logits"]) == []


@pytest.mark.slow  # two CLI runs of the sweep
def test_the_printed_repro_of_a_far_rows_failure_reproduces(tmp_path):
    """From the command line, as a user spec adds the kernel: the report's repro (the
    case's own flags, ``--checks shape_sweep``) fails again at the far rows."""
    failed = failed_sweep_reproduces("planted_grid_cap.toml", "grid-cap", tmp_path)
    assert f"at {WIDE_BLOCK_ROWS} rows at vocab=2560" in failed["message"]  # bf16: narrowest


def test_a_path_past_the_cap_that_forgets_eps_fails_in_the_big_batch_case(catalog):
    """rms_norm whose rows past 65,535 one-row blocks take the default eps (exact at the
    default): in the big-batch case (eps = 1e-5, the first dtype) the far rows fail."""
    cat = with_op_candidate(
        catalog, "rms_norm", "bug", "grid_cap_bugs:rms_norm_default_eps_past_cap", backward=False
    )
    shape = dict(cat.ops["rms_norm"].grid.shapes[0])
    res = run_one(
        cat, "rms_norm", "bug", "shape_sweep", "fp32", shape, seeds=[0], attributes={"eps": 1e-5}
    )
    assert res.status == "fail", res.message
    assert res.message.startswith(f"at {LONG_ROWS} rows at hidden=2560"), res.message
    assert res.metrics["failing_check"] == "forward_accuracy"


def test_an_op_whose_output_sums_over_rows_lists_the_far_rows_as_not_checked(catalog):
    from dataclasses import replace

    from kernelcheck import api
    from kernelcheck.checks.far_rows import far_rows_unjudged

    assert all(far_rows_unjudged(op) is None for op in catalog.ops.values())
    logp = catalog.ops["logp"]
    summed = replace(logp, outputs=(replace(logp.outputs[0], shape=()),))  # a batch's loss
    assert far_rows_unjudged(summed) == "output logp is not row-wise"
    ops = replace(catalog, ops={**catalog.ops, "logp": summed})
    plan = api.plan(ops, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32")
    lead = f"shape_sweep's {LONG_ROWS}-row lead at its widest row"
    assert plan.not_planned.get(lead) == "output logp is not row-wise"
    no_sweep = api.plan(ops, "logp", candidate_names=["torch"], check_names="contract")
    assert lead not in no_sweep.not_planned


def test_the_plan_lists_the_dtypes_the_two_row_block_lead_leaves_out(catalog):
    gap = f"shape_sweep's {WIDE_BLOCK_ROWS}-row lead (65,535 blocks of two rows) at fp32, fp16"
    plan = api.plan(catalog, "logp", candidate_names=["torch"], device="cpu")
    assert plan.not_planned.get(gap, "").startswith("judged at bf16 alone"), plan.not_planned
    bf16 = api.plan(catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="bf16")
    assert not any(str(WIDE_BLOCK_ROWS) in k for k in bf16.not_planned)


@pytest.mark.parametrize("rows", [2 * JUDGED + 1, 2 * JUDGED + 3 * FILLERS + 5])
def test_body_rows_are_compared_with_the_filler_each_copies(rows, monkeypatch):
    """Each row between the judged ones against ``fillers[i % FILLERS]``, by its bits, in
    chunks that end mid-period or hold less than one."""
    from kernelcheck.checks import far_rows
    from kernelcheck.checks.metrics import bits

    monkeypatch.setattr(far_rows, "BODY_CHUNK_ELEMENTS", 3 * 2 * FILLERS)  # 2 periods a chunk
    fillers = torch.randn(FILLERS, 3) + 4  # no zeros: each edit below changes bits
    order = row_order(rows)
    got = torch.randn(rows, 3)
    got[JUDGED : rows - JUDGED] = fillers[[o - 2 * JUDGED for o in order[JUDGED : rows - JUDGED]]]
    assert body_rows_differing(got, bits(fillers)) is None
    last = rows - JUDGED - 1
    got[last, 2] *= 1 + 2**-20  # one ulp or so
    assert body_rows_differing(got, bits(fillers)) == (last - JUDGED, 1)
    got[JUDGED, 0] *= 2
    assert body_rows_differing(got, bits(fillers)) == (0, 1 if last == JUDGED else 2)
