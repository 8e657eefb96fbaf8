"""The invariance layouts reach where strategies switch: a batch of 98,304 rows, odd batch
sizes, another thread count, the case's own batch (planted bugs in
tests/fixtures/scale_bugs.py), and the honest candidates pass them all."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.checks.invariance import (
    ODD_SIZES,
    OTHER_VALUE_BATCH,
    REMAINDER_BATCH,
    REMAINDER_THREADS,
    WIDE_ROWS,
    WIDE_THREADS,
    thread_counts,
)
from tests.conftest import run_fp32, run_one, run_small, with_candidate, with_grid_shapes

# off the grid's first shape: a candidate that takes no swept attribute (the fixtures,
# the native cpu kernel) has its big-batch case there (CaseContext.is_big_batch_case)
SHAPE = {"batch": 2, "seq": 16, "vocab": 263}
CHECKS = ["forward_invariance", "backward_invariance"]


def _run(catalog, bug: str, checks=CHECKS, **kw):
    cat = with_candidate(catalog, "bug", f"scale_bugs:{bug}")
    return run_small(cat, "bug", checks, shape=SHAPE, seeds=[0], **kw)


@pytest.mark.parametrize(
    "bug,layout",
    [
        ("switches_order_past_many_rows", "one batch of 98304"),
        ("switches_order_past_4096_rows", "one batch of 98304"),
        ("second_launch_past_65535_rows", "one batch of 98304"),
        ("differs_in_batches_of_3", "batches of 2/3/4/5/7/16"),
        ("follows_thread_count", "thread"),
        ("differs_at_the_case_shape", "own batch of 32"),
    ],
)
@pytest.mark.parametrize("threads", [None, 1], ids=["all-cores", "case-at-1-thread"])
def test_each_layout_catches_its_bug(catalog, bug, layout, threads):
    """Also with the case at 1 thread, as it runs beside another case on 2 cores."""
    res = _run(catalog, bug, ["forward_invariance"], threads=threads)["forward_invariance"]
    assert res.status == "fail", res.message
    assert layout in res.message
    assert any(layout in k for k in res.metrics["mismatched_by_layout"])


def test_a_row_split_only_past_8_threads_fails_at_the_wide_thread_count(catalog):
    """A few rows alone run again at WIDE_THREADS (32 first): a kernel that splits a row
    only where there are more than 8 threads (a server's cores) passes every other layout."""
    assert min(WIDE_THREADS) > 8 and WIDE_ROWS
    res = _run(catalog, "splits_rows_past_8_threads", ["forward_invariance"])
    res = res["forward_invariance"]
    assert res.status == "fail", res.message
    assert f"rows alone at {min(WIDE_THREADS)} threads" in res.message, res.message


def test_a_row_split_only_on_a_dual_socket_server_fails_at_128_threads(catalog):
    """The rows alone run again at each of WIDE_THREADS: a round-20 red team's split-K,
    on at 64 threads or more for calls of at most threads / 8 rows, passed at 32."""
    assert max(WIDE_THREADS) >= 128
    res = _run(catalog, "splits_rows_past_64_threads", ["forward_invariance"])
    res = res["forward_invariance"]
    assert res.status == "fail", res.message
    assert "rows alone at 128 threads" in res.message, res.message


def test_a_remainder_past_a_tail_tile_fails_at_many_threads(catalog):
    """A round-26 red team's swiglu split rows over min(threads, rows) workers and gave
    the remainder to a tail tile of 16: rows past it unwritten at 48 threads. Rows alone
    at 32 and 128 threads leave no remainder; one batch of REMAINDER_BATCH rows at
    REMAINDER_THREADS leaves 63. The honest candidate passes."""
    assert REMAINDER_BATCH % REMAINDER_THREADS > 32 and REMAINDER_THREADS > 16
    cat = with_candidate(catalog, "bug", "broken_logp:rows_split_over_threads_tail_tile_of_16")
    res = run_small(cat, "bug", ["forward_invariance"], shape=SHAPE, seeds=[0])
    res = res["forward_invariance"]
    assert res.status == "fail", res.message
    label = f"one batch of {REMAINDER_BATCH} at {REMAINDER_THREADS} threads"
    assert label in res.message, res.message
    honest = run_small(catalog, "torch", CHECKS, shape=SHAPE, seeds=[0])
    assert all(r.status == "pass" for r in honest.values()), honest


def test_a_split_k_for_batches_of_one_on_8_threads_fails_on_2_cores(catalog):
    """Rows alone run at all cores but at least 8 threads: a kernel that splits a row only
    when rows * 8 <= threads passes at 2 threads (this machine's cores), and fails
    here."""
    assert thread_counts()[0] >= 8
    for check in CHECKS:
        res = _run(catalog, "splits_small_batches_over_idle_threads", [check])[check]
        assert res.status == "fail", (check, res.message)


@pytest.mark.parametrize("threads", [None, 1], ids=["all-cores", "case-at-1-thread"])
def test_a_row_split_over_threads_when_alone_fails(catalog, threads):
    """PyTorch's CPU sum(-1) splits a long row over threads when rows are fewer than
    threads: only a row alone at 2+ threads shows it. Alone runs at all cores (at least 2)
    whatever the case's own count: at the case's 1 thread this bug passed."""
    bug = "splits_when_rows_fewer_than_threads"
    for check in CHECKS:
        res = _run(catalog, bug, [check], threads=threads)[check]
        assert res.status == "fail", (check, res.message)


def test_a_switch_past_many_rows_fails_backward_too(catalog):
    res = _run(catalog, "switches_order_past_many_rows", ["backward_invariance"])
    assert res["backward_invariance"].status == "fail"
    assert "one batch of 98304" in res["backward_invariance"].message


@pytest.mark.parametrize("candidate", ["torch", "cpu"])
def test_honest_candidates_pass_every_layout(catalog, candidate):
    res = run_small(catalog, candidate, CHECKS, shape=SHAPE, seeds=[0])
    for r in res.values():
        assert r.status == "pass", r.message
        layouts = [label for label, _ in r.plots["invariance"].items()]
        assert any(label.startswith("one batch of 98304") for label in layouts), layouts
        assert any(label.startswith("own batch of 32") for label in layouts), layouts
        assert any(all(f"/{n}" in label for n in ODD_SIZES) for label in layouts), layouts
        # 300 rows in small batches, a few alone at each of WIDE_THREADS, 98,304 placements
        # of them in one batch, 32 of the case's; the torch candidate's 97 at T = 0.7 and
        # 1.3 too
        others = 2 * OTHER_VALUE_BATCH if candidate == "torch" else 0
        wide = len(WIDE_THREADS) * WIDE_ROWS + REMAINDER_BATCH  # and one batch at 64 threads
        assert r.metrics["comparisons"] == 300 + wide + 98304 + 32 + others


def test_alone_runs_at_two_threads_or_more_and_half_the_batches_at_one():
    many, few = thread_counts()
    assert many >= 2 and few == 1


@pytest.mark.parametrize(("dtype", "itemsize"), [("fp32", 4), ("bf16", 2)])
def test_the_big_batch_stays_within_its_byte_budget(catalog, dtype, itemsize):
    """At the Qwen3 vocab 98,304 rows would be 60 GB in fp32: the batch holds 80M
    elements, past 256 MiB of fp32 (a common switch point); at a small vocab it holds
    98,304 (an RL micro-batch of up to 96k tokens, 32,768 rows past a grid dimension's 65,535)."""
    from kernelcheck.cases.grid import Case
    from kernelcheck.checks.context import CaseContext
    from kernelcheck.checks.invariance import ForwardInvariance

    def rows_at(vocab: int, attrs=()) -> int:
        shape = (("batch", 8), ("vocab", vocab))
        case = Case("logp", "torch", "cpu", dtype, shape, (0,), (), attrs=attrs)
        ctx = CaseContext(catalog.ops["logp"], case, None, None, None, torch.device("cpu"), True)
        check = ForwardInvariance(ctx)
        return check.big_rows(check.pool_rows())

    big = rows_at(151936)
    assert big == 553 and 256 << 20 < big * 151936 * 4
    assert rows_at(257) == 98304
    assert 8000 < rows_at(10000) < 8400  # as many as hold 80M elements
    # both swept attributes off the grid: 80M elements at every row length
    both = (("temperature", 0.7), ("with_mask", True))
    assert rows_at(257, both) == (5 << 24) // 257 and rows_at(257, both[:1]) == 98304
    assert rows_at(151936, both) == 553


def test_an_attribute_forgotten_past_2_25_logits_fails_in_the_widest_sweep(catalog):
    """The grid's long-row shapes reach 80M elements at the default attributes only: the
    sweep that sets both swept attributes off the grid takes 80M elements at short rows
    as well (318,958 rows at V = 263), where a streaming path that drops the temperature
    shows; a single attribute's sweep keeps 98,304 rows, and the honest candidate passes."""
    both = {"temperature": 0.7, "with_mask": True}
    bug = _run(catalog, "streaming_path_drops_temperature", ["forward_invariance"], attributes=both)
    res = bug["forward_invariance"]
    assert res.status == "fail" and f"one batch of {(5 << 24) // 263}" in res.message, res.message
    one = {"temperature": 0.7}
    res = _run(catalog, "streaming_path_drops_temperature", ["forward_invariance"], attributes=one)
    assert res["forward_invariance"].status == "pass"
    assert any(
        k.startswith("one batch of 98304 (3-D) at ")
        for k in res["forward_invariance"].plots["invariance"]
    )
    honest = run_small(catalog, "torch", CHECKS, shape=SHAPE, seeds=[0], attributes=both)
    for r in honest.values():
        assert r.status == "pass", r.message
        assert any(
            k.startswith(f"one batch of {(5 << 24) // 263} (3-D) at ")
            for k in r.plots["invariance"]
        )


@pytest.mark.slow  # linear_logp's one batch at hidden 1,024
def test_a_split_k_for_few_tokens_at_a_real_hidden_size_fails(catalog):
    """linear_logp splitting K for fewer than 8 tokens at hidden >= 1,024: the grid's
    8 x 1024 x 2500 shape compares those bits (alone: split) with batches of 16 and
    more; at hidden 128 the bug never splits. The one batch there holds 2^31
    multiply-adds (838 tokens), not 16,384 tokens."""
    from tests.conftest import with_op_candidate

    bug = "scale_bugs:linear_logp_split_k_for_few_tokens"
    cat = with_op_candidate(catalog, "linear_logp", "bug", bug)
    shapes = [{"tokens": 8, "hidden": h, "vocab": 2500} for h in (1024, 128)]
    assert shapes[0] in catalog.ops["linear_logp"].grid.shapes
    for shape, status in zip(shapes, ("fail", "pass")):
        res = run_one(cat, "linear_logp", "bug", "forward_invariance", "fp32", shape, seeds=[0])
        assert res.status == status, (shape, res.message)
        if status == "fail":
            assert "batches of" in res.message
            wide = len(WIDE_THREADS) * WIDE_ROWS + REMAINDER_BATCH
            assert res.metrics["comparisons"] == 300 + wide + 838 + 8


def test_a_second_shape_of_the_same_rows_judges_its_own_batch_only(catalog):
    """2x16x257 and 32x257 draw the very same pool (same rows, same calls): the second case
    compares its own batch only, names the case that judged the pool, and a kernel tuned
    for its shape (32 rows) still fails there."""
    cat = with_candidate(catalog, "bug", "scale_bugs:differs_at_the_case_shape")
    shapes = ({"batch": 2, "seq": 3, "vocab": 257}, {"batch": 32, "vocab": 257})
    cat = with_grid_shapes(cat, "logp", shapes)
    report = run_fp32(cat, ["bug", "torch"], ["forward_invariance"], seeds=[0], isolate=False)
    by_case = {r.case_id: r for r in report.results}
    first, second = by_case["bug-fp32-2x3x257"], by_case["bug-fp32-32x257"]
    # 6 rows, fewer than the grid's distributions: a trial (a pool of 300 rows) each
    trials = len(catalog.op("logp").grid.distributions)
    assert first.status == "pass" and first.metrics["compared_rows"] == 300 * trials
    assert "pool_judged_in" not in first.metrics
    assert second.status == "fail" and "own batch of 32" in second.message
    assert second.metrics["pool_judged_in"] == "bug-fp32-2x3x257"
    assert second.metrics["comparisons"] == 32  # the pool's 4,396 placements not again
    honest = by_case["torch-fp32-32x257"]
    assert honest.status == "pass" and honest.metrics["pool_judged_in"] == "torch-fp32-2x3x257"


def test_only_the_lead_shape_may_differ_for_a_pool_to_be_shared(catalog):
    from kernelcheck.cases.grid import Case, share_invariance_pools

    op = catalog.ops["logp"]

    def case(cand="torch", dtype="fp32", vocab=257, batch=2, attrs=()):
        shape = (("batch", batch), ("vocab", vocab))
        return Case("logp", cand, "cpu", dtype, shape, (0,), ("normal",), attrs=attrs)

    cases = [
        case(),
        case(batch=64),  # shares
        case(vocab=258, batch=64),
        case(dtype="bf16", batch=64),
        case(cand="cpu", batch=64),
        case(batch=64, attrs=(("temperature", 0.7),)),
    ]
    marked = [c.pool_judged_in for c in share_invariance_pools(op, cases)]
    assert marked == [None, "torch-fp32-2x257", None, None, None, None]


def test_a_misaligned_placement_has_nan_before_its_rows():
    """kernelcheck's own allocations are not junk-filled (only a candidate's are), so the
    one element before misaligned rows is set to NaN: a kernel reading before its row
    start reads NaN there, as it did when every allocation was filled."""
    from kernelcheck.checks.rows import placed_rows

    pool = torch.arange(12, dtype=torch.float32).view(4, 3)
    for offset in (1, 2, 3):
        got = placed_rows(pool, [2, 0], (2,), "cpu", offset)
        assert torch.equal(got, pool[[2, 0]]) and got.storage_offset() == offset
        before = torch.as_strided(got, (offset,), (1,), 0)
        assert bool(before.isnan().all())


def test_misaligned_batches_start_at_every_offset_within_64_bytes():
    """A kernel may pick its vector width from a row's address (float4 at 16 bytes, float2
    at 8): a one-element shift meets only the odd offsets."""
    from kernelcheck.checks.invariance import misaligned_by

    assert misaligned_by(0, 4) == 0
    assert [misaligned_by(k, 4) for k in range(1, 17)] == [*range(1, 16), 1]
    assert {misaligned_by(k, 2) for k in range(1, 32)} == set(range(1, 32))


def test_a_path_for_few_live_rows_shows_in_the_own_batch_of_a_sparse_seed(catalog):
    """Odd seeds mask 15 rows in 16: the own batch is compared at every seed, so a kernel
    that compacts the few live rows into another order fails there (seed 0 alone: the
    pool's and the own batch's rows are dense, and it passes)."""
    cat = with_candidate(catalog, "bug", "broken_logp:sparse_rows_compacted", backward=False)
    # 512 rows: some 32 live at the sparse seed, all of them in the sampled own rows
    kw = dict(shape={"batch": 16, "seq": 32, "vocab": 257}, attributes={"with_mask": True})
    check = "forward_invariance"
    dense = run_small(cat, "bug", [check], seeds=[0], **kw)[check]
    assert dense.status == "pass", dense.message
    sparse = run_small(cat, "bug", [check], seeds=[0, 1], **kw)[check]
    assert sparse.status == "fail" and "own batch of 512" in sparse.message, sparse.message
    assert "seed 1" in sparse.message


@pytest.mark.parametrize("check", ["forward_invariance", "backward_invariance"])
def test_a_split_for_few_rows_only_off_the_default_temperature_fails_at_long_rows(catalog, check):
    """A logsumexp split over the vocab for fewer than 16 rows, past V = 16,384, at a
    temperature other than 1 only: the sweeps' cases judge T = 0.7 at V = 257 and
    10,000, so the grid case at the long rows calls the other values too, rows alone
    and in a batch of 97."""
    from dataclasses import replace

    from kernelcheck.spec.model import CheckConfig

    cat = with_candidate(catalog, "bug", "scale_bugs:tempered_split_for_few_rows_past_16384")
    op = cat.ops["logp"]
    small = {"rows": 48, "batch_sizes": [1, 2, 48], "big_rows": 48, "big_elements": 1}
    small |= {"big_rows_floor": 48}  # the other layouts at their least: not what is judged
    op = replace(op, checks={**op.checks, check: CheckConfig(params=small)})
    cat = replace(cat, ops={**cat.ops, "logp": op})
    shape = {"batch": 4, "vocab": 16400}
    res = run_one(cat, "logp", "bug", check, "fp32", shape, seeds=[0])
    assert res.status == "fail", res.message
    assert "at temperature=0.7: one batch of 97" in res.message
    honest = run_one(cat, "logp", "torch", check, "fp32", shape, seeds=[0])
    assert honest.status == "pass", honest.message
    # the case's own temperature (1.0) is the split's bypass: the bug is exact there
    assert "temperature=1.0" not in res.message
