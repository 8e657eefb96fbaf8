"""``shape_sweep`` goes where tails and index widths break: every residue mod 64, the
sizes next to powers of two, 65,537 rows; a kernel wrong only on some tail fails it, and
the shape it names reruns as an ordinary case."""

from __future__ import annotations

import math
import re

import pytest

from kernelcheck import api
from kernelcheck.cases.mirrored import PAGE_ELEMENTS_16, mirroring_available
from kernelcheck.checks.far_rows import JUDGED
from kernelcheck.checks.shape_sweep import (
    ALIGNED_HOT_SIZE,
    HOT_BACKWARD_CALLS,
    HOT_CALLS,
    LONG_HOT_CALLS,
    LONG_HOT_SIZE,
    LONG_ROW_HOT_SIZES,
    LONG_ROWS,
    MOST_CALLED_SIZES,
    TILED_BASE,
    WIDE_ELEMENTS,
    WIDE_ROWS,
    WideBatch,
    hot_backward_calls,
    hot_calls,
    huge_rows_shape,
    huge_rows_shapes,
    joint_shape,
    narrowest_dtype,
    shape_flag,
    short_rows_shape,
    sweep_shapes,
    sweep_sizes,
    swept_dims,
    wide_batches,
    widest_batches,
)
from tests.conftest import SPECS, run_one, run_small, with_candidate, with_op_candidate


def test_the_sizes_cover_every_residue_and_every_power_of_two_edge():
    sizes = sweep_sizes()
    big = [s for s in sizes if s > 64]
    assert {s % 64 for s in big} == set(range(64))
    # and again past several tiles of every power-of-two size up to 8,192
    tiled = [s for s in sizes if TILED_BASE <= s < TILED_BASE + 64]
    assert {s % 64 for s in tiled} == set(range(64))
    assert all(s // 8192 == 3 for s in tiled)
    for k in range(1, 18):
        assert {2**k - 1, 2**k, 2**k + 1} <= set(sizes)
    assert not {32000, 262208} & set(sizes)  # real vocabularies: a vocab dim's alone
    assert {3840, 11008, 29568} <= set(sizes)  # real hidden and MLP widths: the others'
    assert not {3840, 11008} & set(sweep_sizes("vocab"))
    assert {32000, 128256, 262144, 262208} <= set(sweep_sizes("vocab"))
    assert 65537 in sizes  # just past 16-bit indices
    assert set(range(1, 17)) <= set(sizes)


@pytest.mark.parametrize("largest", [None, 16385])
def test_a_last_partial_tile_holds_every_count_of_sub_tiles(largest):
    """In rows of more than two tiles, the last partial tile of each power-of-two size from
    128 to 4,096 holds every count of power-of-two sub-tiles from 64 up: a kernel that
    streams a tile's sub-tiles through a ring of buffers and drains what is left after
    its loop errs at some counts only (odd ones of three and more, for two buffers:
    ``broken_rms_norm:odd_sub_tiles_drained_twice``); also below a ``sweep_max``
    (linear_logp's hidden)."""
    sizes = sweep_sizes(largest=largest)
    for tile in (1 << k for k in range(7, 13)):
        for sub in (1 << k for k in range(6, tile.bit_length() - 1)):
            counts = {-(-(s % tile) // sub) for s in sizes if s > 2 * tile and s % tile}
            assert set(range(1, tile // sub + 1)) <= counts, (tile, sub)


def test_a_sweep_max_caps_a_dim_and_keeps_its_tiled_residues_below_it(catalog):
    """linear_logp's hidden stops at 16,385 (no model is wider; past it an honest fp32
    dot product nears the 1e-5 contract): every size at most that, the powers' edges up
    to 2^14 + 1, every residue mod 64 past 12,288 = 3 x 4,096 instead of 24,576."""
    op = catalog.ops["linear_logp"]
    assert op.dims["hidden"].sweep_max == 16385
    hidden = [
        sizes["hidden"] for label, sizes in sweep_shapes(op, 3) if label.startswith("hidden=")
    ]
    assert max(hidden) == 16385 and {16383, 16384, 8193} <= set(hidden)
    tiled = [h for h in hidden if 12288 <= h < 12288 + 64]
    assert {h % 64 for h in tiled} == set(range(64))
    vocab = [sizes["vocab"] for label, sizes in sweep_shapes(op, 3) if label.startswith("vocab=")]
    assert max(vocab) == 262208  # the vocab keeps the whole sweep


def test_every_op_gets_its_reduced_dims_swept_and_a_long_lead(catalog):
    for name, op in catalog.ops.items():
        shapes = sweep_shapes(op, 3)
        labels = [label for label, _ in shapes]
        assert labels[-1] == f"{LONG_ROWS} rows", name
        assert shapes[-1][1][op.lead[0]] == LONG_ROWS
    linear = [label.split("=")[0] for label, _ in sweep_shapes(catalog.ops["linear_logp"], 3)]
    assert {"hidden", "vocab"} <= set(linear)


def test_every_inner_dim_gets_wide_batches_of_many_rows(catalog):
    """Width and rows together: 2^8 + 1, 2^11 + 1, 2^14 + 1 and the widest swept size,
    each with 2^26 elements' worth of rows, 64 to 4,096 (a training micro-batch's
    tokens): past 2,048 rows at 16,385 columns, whose last block of 2,048 (or 1,024) is
    partial."""
    for name, op in catalog.ops.items():
        inner = {d: op.dims[d].default for d in swept_dims(op)}
        wide = wide_batches(op, inner)
        for dim in swept_dims(op):
            at = {s[dim]: s for label, s in wide if label.split(" at ")[1].startswith(dim + "=")}
            widest = sweep_sizes(dim, op.dims[dim].sweep_max)[-1]
            assert {257, 2049, 16385, widest} <= set(at), (name, dim)
            for size, sizes in at.items():
                rows = sizes[op.lead[0]]
                assert WIDE_ROWS[0] <= rows <= WIDE_ROWS[1]
                assert rows == WIDE_ROWS[0] or rows * size <= WIDE_ELEMENTS or rows == WIDE_ROWS[1]
        # the sweep's wide batches, and only they, marked as such (judged frozen too)
        assert [s for _, s in wide] == [
            shape.sizes for shape in sweep_shapes(op, 3) if isinstance(shape, WideBatch)
        ]
        assert [s for label, s in sweep_shapes(op, 3) if " rows at " in label] == [
            s for _, s in wide
        ]
        assert any(s[op.lead[0]] >= 2048 and 16385 in s.values() for _, s in wide), name


def test_the_widest_batches_pass_2_27_elements(catalog):
    """Each dim's widest wide batch again with 2^27 to 2^31 elements (4,096 rows at most:
    linear_logp's hidden of 16,385 has 2^26), at the grid's attributes in every dtype:
    an RL micro-batch at a real vocabulary, where a chunked path with 32-bit offsets may
    run; the ordinary wide batches stay at 2^26, or their 64 rows."""
    for name, op in catalog.ops.items():
        narrow = widest_batches(op)
        assert len(narrow) == (len(swept_dims(op)) if op.lead else 0), name
        for label, _ in narrow:  # "1023 rows at vocab=262208": rows x the swept dim
            rows, size = (int(v) for v in re.findall(r"\d+", label))
            assert min(1 << 27, WIDE_ROWS[1] * size) <= rows * size < 1 << 31, (name, label)
        inner = {d: op.dims[d].default for d in swept_dims(op)}
        for label, _ in wide_batches(op, inner):
            rows, size = (int(v) for v in re.findall(r"\d+", label))
            assert rows * size <= WIDE_ELEMENTS or rows == WIDE_ROWS[0], (name, label)


@pytest.mark.slow  # ~1 min: rms_norm's fp32 sweep, its training batches forward and backward
def test_a_training_batchs_backward_dropping_a_partial_block_fails_the_sweep(catalog):
    """A round-21 red team's rms_norm: a backward for 2,048 rows or more past 4,096
    columns leaves a row's last partial block of 2,048 out of its projection term; the
    wide batches' 1,024 rows never took it."""
    bug = "broken_rms_norm:training_batch_drops_tail_block"
    cat = with_op_candidate(catalog, "rms_norm", "bug", bug)
    shape = dict(catalog.ops["rms_norm"].grid.shapes[0])
    res = run_one(cat, "rms_norm", "bug", "shape_sweep", "fp32", shape, seeds=[0])
    assert res.status == "fail", res.message
    assert "at 4095 rows at hidden=16385" in res.message, res.message
    assert "backward_accuracy" in res.message, res.message


@pytest.mark.slow  # ~35 s: rms_norm's four wide batches, twice
def test_a_weight_only_backward_dropping_tail_rows_fails_at_a_wide_batch(catalog, monkeypatch):
    """A round-23 red team's rms_norm: with x frozen and 1,024 rows or more, the weight
    gradient is summed in 64 blocks of rows // 64, the rest dropped. The wide batches
    judge the backward with each grad input alone too: 4,095 rows at 16,385 drop 63; the
    honest one passes them."""
    from kernelcheck.checks import shape_sweep

    swept = shape_sweep.sweep_shapes
    batch = shape_sweep.WideBatch
    wide = lambda *a, **k: [s for s in swept(*a, **k) if isinstance(s, batch)]  # noqa: E731
    monkeypatch.setattr(shape_sweep, "sweep_shapes", wide)
    monkeypatch.setattr(shape_sweep.ShapeSweep, "_far_rows_here", lambda self, full: False)
    monkeypatch.setattr(shape_sweep, "widest_batches", lambda op: [])
    bug = "broken_rms_norm:weight_only_backward_drops_tail_rows_past_1024"
    cat = with_op_candidate(catalog, "rms_norm", "bug", bug)
    shape = dict(catalog.ops["rms_norm"].grid.shapes[0])
    res = run_one(cat, "rms_norm", "bug", "shape_sweep", "fp32", shape, seeds=[0])
    assert res.status == "fail", res.message
    assert res.message.startswith("at 4095 rows at hidden=16385"), res.message
    assert "gradient:weight (x frozen)" in res.message, res.message
    honest = run_one(catalog, "rms_norm", "torch", "shape_sweep", "fp32", shape, seeds=[0])
    assert honest.status == "pass", honest.message


@pytest.mark.slow  # ~1 min each: 2^28 logits, with grad, twice
@pytest.mark.parametrize(
    ("op_name", "bug", "attributes", "dtype"),
    [
        ("entropy", "broken_entropy:chunk_partials_in_16_bits", None, "bf16"),
        ("logp", "broken_logp:chunked_backward_untempered", {"temperature": 0.7}, "bf16"),
        ("entropy", "broken_entropy:exp_written_into_fp32_logits", None, "fp32"),
    ],
)
def test_a_chunked_path_for_2_27_to_2_31_logits_fails_at_the_widest_batch(
    catalog, monkeypatch, op_name, bug, attributes, dtype
):
    """Round-21 red teams' entropy and logp: 16-bit logits of 65,536 columns or more
    and 2^27 to 2^31 elements take a chunked path, whose partial sums are kept in 16 bits
    (entropy) or whose backward leaves T out (logp); only the widest wide batch reaches
    it, in the narrowest dtype's attribute sweep's case too (its first and last rows
    judged, each call alone within its memory budget). A round-22 one's entropy writes
    exp(x - max) into fp32 logits there (its backward reads them): the widest batch runs
    at every dtype."""
    from kernelcheck.checks import huge_rows

    _huge_lead_alone(monkeypatch, lead="widest")
    # an 8 GiB budget whatever else runs (the calls take 2 to 4): judged, never left out
    monkeypatch.setattr(huge_rows, "available_memory_bytes", lambda: 16 << 30)
    op = catalog.ops[op_name]
    shape = dict(op.grid.shapes[0])
    kw = {"attributes": attributes} if attributes else {}
    cat = with_op_candidate(catalog, op_name, "bug", bug)
    res = run_one(cat, op_name, "bug", "shape_sweep", dtype, shape, **kw)
    assert res.status == "fail", res.message
    assert res.message.startswith("at 1023 rows at vocab=262208"), res.message
    honest = run_one(catalog, op_name, "torch", "shape_sweep", dtype, shape, **kw)
    assert honest.status == "pass", honest.message
    assert honest.metrics["shapes"] == 2 and "not_judged" not in honest.metrics, honest.metrics


@pytest.mark.slow  # ~1-2 min each: two 2^28-element batches with grad, twice
@pytest.mark.parametrize(
    ("op_name", "bug"),
    [
        ("logp", "broken_logp:backward_rows_walked_by_one_pitch_past_2_25"),
        ("rms_norm", "broken_rms_norm:rows_walked_by_one_pitch_past_2_25_in_16_bits"),
    ],
)
def test_rows_walked_by_one_pitch_past_2_25_fail_at_the_shifted_widest_batch(
    catalog, monkeypatch, op_name, bug
):
    """Round-27 red teams' logp (backward) and 16-bit rms_norm walk the rows of a big
    input whose lead dims do not collapse (``logits[:, :-1]``) by one pitch, with no
    copy, from 2^24 elements: the contract's views stop at 2^23 (2^26 forward, first
    dtype). The widest batch runs again as two shifted sequences; the honest one passes."""
    from kernelcheck.checks import huge_rows

    _huge_lead_alone(monkeypatch, lead="widest")
    monkeypatch.setattr(huge_rows, "available_memory_bytes", lambda: 16 << 30)
    shape = dict(catalog.ops[op_name].grid.shapes[0])
    cat = with_op_candidate(catalog, op_name, "bug", bug)
    res = run_one(cat, op_name, "bug", "shape_sweep", "bf16", shape)
    assert res.status == "fail", res.message
    assert "as 2 shifted sequences of" in res.message.split(":")[0], res.message
    honest = run_one(catalog, op_name, "torch", "shape_sweep", "bf16", shape)
    assert honest.status == "pass", honest.message
    assert honest.metrics["shapes"] == 2 and "not_judged" not in honest.metrics, honest.metrics


@pytest.mark.parametrize(
    ("bug", "where"),
    [
        ("vector_tail_of_one", "vocab="),
        ("stale_rows_past_65535", f"{LONG_ROWS} rows"),
        ("fixed_tile_table", "vocab=262208"),  # Gemma 3's: 64 columns past 2^18
        ("streaming_rows_skip_rescale", "255 rows at vocab=262208"),  # a training batch's path
    ],
)
def test_a_kernel_wrong_only_on_a_tail_fails_and_its_shape_reruns(catalog, bug, where):
    cat = with_candidate(catalog, "bug", f"scale_bugs:{bug}")
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail", res.message
    assert f"at {where}" in res.message
    # the named shape, as an ordinary case on the same seed and distributions, fails too
    shape = res.metrics["failing_shape"]
    again = run_one(
        cat,
        "logp",
        "bug",
        "forward_accuracy",
        "fp32",
        shape,
        seeds=[0],
        distributions=res.distribution,
    )
    assert again.status == "fail", again.message


def test_a_sweep_failure_reruns_from_its_repros_mixed_distribution(catalog):
    """The repro passes the case's distributions as one mixed name (``--distributions
    normal+large+...``): the sweep judges the same rows from it and fails again (its
    accuracy judges once took the mixed name for a distribution of no row: they judged
    none, and the repro passed)."""
    cat = with_candidate(catalog, "bug", "scale_bugs:vector_tail_of_one")
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail" and res.metrics["failing_check"] == "forward_accuracy"
    again = run_small(cat, "bug", ["shape_sweep"], seeds=[0], distributions=[res.distribution])[
        "shape_sweep"
    ]
    assert again.status == "fail", again.message
    assert again.message == res.message


def test_a_shape_unrolled_by_128_after_48_calls_fails_on_its_hot_call(catalog):
    """A hot kernel whose tail breaks at lengths 64..127 mod 128 after 48 calls: past the
    33 calls and the residues mod 64 (256..319) the hot shapes had, it passed every check
    (round 17); the hot shapes now span every residue mod 128, up to 257 calls."""
    from kernelcheck.spec.imports import resolve
    from tests.conftest import FIXTURES

    cat = with_candidate(catalog, "bug", "scale_bugs:hot_shape_unrolled_by_128")
    calls = resolve("scale_bugs:hot_shape_unrolled_by_128", FIXTURES).__globals__["_CALLS"]
    calls.clear()
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail" and "at vocab=" in res.message, res.message
    # the forward with grad that the backward's judge made was its 2nd call
    assert re.search(r"vocab=3[2-7]\d, forward call 48 of (65|129|257) ", res.message), res.message
    calls.clear()  # the same shape's first call, as an ordinary case: exact
    first = run_one(cat, "logp", "bug", "forward_accuracy", "fp32", res.metrics["failing_shape"])
    assert first.status == "pass", first.message


def _calls_of(name: str) -> dict:
    """A hot-call fixture's call counts, cleared (its first call of every shape again)."""
    from kernelcheck.spec.imports import resolve
    from tests.conftest import FIXTURES

    assert callable(resolve(f"scale_bugs:{name}", FIXTURES))
    calls = resolve("scale_bugs:_CALLS", FIXTURES)
    calls.clear()
    return calls


@pytest.mark.parametrize(
    ("bug", "long_hot", "past"),
    [
        ("hot_shape_tiles_floored_after_1000", LONG_HOT_SIZE, 1000),
        ("aligned_hot_shape_tiles_floored_after_1000", ALIGNED_HOT_SIZE, 1000),
        ("long_row_hot_shape_tiles_floored_after_128", LONG_ROW_HOT_SIZES[0], 128),
    ],
)
def test_a_path_for_shapes_called_many_times_fails_on_its_first_call_there(
    catalog, bug, long_hot, past
):
    """Round 18's logp: a path for a shape's calls past the 1,000th, its 4,096-column tiles
    counted with a floor, passed every check (the hot shapes had 257 calls at most); round
    24's took it at 128-aligned vocabularies only, which 8,191 is not; round 37's past the
    128th call of rows past 16,384 columns only."""
    cat = with_candidate(catalog, "bug", f"scale_bugs:{bug}")
    calls = _calls_of(bug)
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail", res.message
    # its call past ``past`` of the shape: the backward's judge made one with grad
    at = f"at vocab={long_hot}, forward call {past} of {LONG_HOT_CALLS + 1} "
    assert at in res.message, res.message
    calls.clear()  # the same shape's first call, as an ordinary case: exact
    first = run_one(cat, "logp", "bug", "forward_accuracy", "fp32", res.metrics["failing_shape"])
    assert first.status == "pass", first.message


def test_an_autotuners_broken_trial_configuration_fails_on_its_one_call(catalog):
    """Every repeated call whose bits differ from the first's is judged, not only the
    last: an autotuner's 3rd call of each shape, with a configuration it then drops."""
    cat = with_candidate(catalog, "bug", "scale_bugs:autotuner_tries_a_broken_config")
    _calls_of("autotuner_tries_a_broken_config")
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail", res.message
    assert re.search(r"at vocab=257, forward call 2 of \d+ ", res.message), res.message


def test_a_backward_autotuners_broken_trial_configuration_fails_on_its_one_call(catalog):
    """A shape's repeated backward calls are judged like its forwards: a backward kernel's
    autotuner tries configurations on the 2nd to 5th backward calls of each shape."""
    cat = with_candidate(catalog, "bug", "scale_bugs:backward_autotuner_tries_a_broken_config")
    _calls_of("backward_autotuner_tries_a_broken_config")
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail", res.message
    assert re.search(r"at vocab=257, backward call 3 of \d+ ", res.message), res.message


def test_each_hot_call_count_meets_every_residue_class_mod_16_and_the_upper_half_mod_128():
    hot = {size: hot_calls(f"vocab={size}") for size in sweep_sizes("vocab")}
    assert {LONG_HOT_SIZE, ALIGNED_HOT_SIZE, *LONG_ROW_HOT_SIZES} == set(MOST_CALLED_SIZES)
    assert {s for s, n in hot.items() if n} == {*range(256, 384), *MOST_CALLED_SIZES}
    for calls in HOT_CALLS:
        sizes = [s for s, n in hot.items() if n == calls]
        assert sizes and max(sizes) < 384, calls
        assert {s % 16 for s in sizes} == set(range(16)), calls
        assert any(s % 128 >= 64 for s in sizes), calls
    assert hot_calls("3 rows at vocab=300") == 0 and hot_calls("vocab=255") == 0
    assert hot_calls(f"vocab={LONG_HOT_SIZE}") == LONG_HOT_CALLS
    # the backward's: all of them at the long row, at most HOT_BACKWARD_CALLS elsewhere
    assert hot_backward_calls(f"vocab={LONG_HOT_SIZE}") == LONG_HOT_CALLS
    assert hot_calls(f"vocab={ALIGNED_HOT_SIZE}") == LONG_HOT_CALLS
    assert {hot_backward_calls(f"vocab={s}") for s in hot if s != LONG_HOT_SIZE} == {
        0,
        min(HOT_CALLS),
    }
    assert min(HOT_CALLS) == HOT_BACKWARD_CALLS


def test_a_shape_specialised_after_16_calls_fails_on_its_hot_call(catalog):
    """A kernel cache that swaps in a specialised kernel with a broken tail after 16 calls
    of a shape: each shape's first call is exact, its 65th is judged too (257: 64 more)."""
    from kernelcheck.spec.imports import resolve
    from tests.conftest import FIXTURES

    cat = with_candidate(catalog, "bug", "scale_bugs:hot_shape_drops_tail")
    calls = resolve("scale_bugs:hot_shape_drops_tail", FIXTURES).__globals__["_CALLS"]
    calls.clear()
    res = run_small(cat, "bug", ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "fail" and "at vocab=257, forward call 16 of 65 " in res.message
    calls.clear()  # the same shape's first call, as an ordinary case: exact
    first = run_one(cat, "logp", "bug", "forward_accuracy", "fp32", res.metrics["failing_shape"])
    assert first.status == "pass", first.message


@pytest.mark.parametrize(
    ("bug", "dtype", "where", "judge"),
    [
        # a tiled path's own tail: every one-tile length is right
        ("multi_tile_tail", "fp32", f"vocab={TILED_BASE + 2}", "forward_accuracy"),
        # a tile's first column never selected: found at an edge target (inputs.edge_columns)
        ("tile_start_target", "fp32", "vocab=", "forward_accuracy"),
        # a tile-edge bug of one 16-bit path
        ("tile_start_target_16_bit", "bf16", "vocab=", "forward_accuracy"),
        # a wide path's last partial tile dropped where the width is whole 512-blocks
        ("partial_tile_dropped_past_2_16", "fp32", "vocab=98816", "forward_accuracy"),
    ],
)
def test_a_tiled_kernel_wrong_at_a_tile_edge_fails(catalog, bug, dtype, where, judge):
    cat = with_candidate(catalog, "bug", f"tile_bugs:{bug}")
    res = run_small(cat, "bug", ["shape_sweep"], dtype=dtype, seeds=[0])["shape_sweep"]
    assert res.status == "fail", res.message
    assert f"at {where}" in res.message and f"{judge}:" in res.message, res.message
    assert res.metrics["failing_check"] == judge


def test_tiles_of_1024_with_a_remainder_loop_for_256_fail_at_a_width_of_whole_256s(catalog):
    """swiglu from 8,192 columns on: whole 1,024-column tiles, then a remainder loop for
    fewer than 256 columns, leaving the last width % 1,024 unwritten at Llama 2's 11,008
    (a round-18 red team's): every width the sweep had past 8,192 was a multiple of 1,024
    or of no 256; 24,576 + 256 is neither, nor is Qwen2.5-1.5B's 8,960, where it fails
    first now."""
    cat = with_op_candidate(catalog, "swiglu", "bug", "broken_swiglu:tiles_of_1024_past_8192")
    shape = dict(cat.ops["swiglu"].grid.shapes[0])
    res = run_one(cat, "swiglu", "bug", "shape_sweep", "fp32", shape, seeds=[0])
    assert res.status == "fail" and res.message.startswith("at inter=8960"), res.message
    inter = cat.ops["swiglu"].dims["inter"]
    assert 24832 in sweep_sizes("inter", inter.sweep_max)  # 24,576 + 256 on the way too


@pytest.mark.slow  # two whole sweeps
def test_the_planted_tile_bugs_honest_control_passes(catalog):
    cat = with_candidate(catalog, "control", "tile_bugs:honest")
    for dtype in ("fp32", "bf16"):
        res = run_small(cat, "control", ["shape_sweep"], dtype=dtype, seeds=[0])["shape_sweep"]
        assert res.status == "pass", res.message


@pytest.mark.parametrize("candidate", ["torch", "cpu"])
def test_honest_candidates_pass_the_sweep(catalog, candidate):
    res = run_small(catalog, candidate, ["shape_sweep"], seeds=[0])["shape_sweep"]
    assert res.status == "pass", res.message
    op = catalog.ops["logp"]
    wide = wide_batches(op, {"vocab": op.dims["vocab"].default})
    assert res.metrics["shapes"] == len(sweep_sizes("vocab")) + len(wide) + 2  # logp: vocab


def test_the_sweep_runs_once_per_candidate_dtype_and_attributes(catalog):
    plan = api.plan(catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32")
    with_sweep = [c for c in plan.cases if "shape_sweep" in c.checks]
    assert [c.shape for c in with_sweep] == [tuple(catalog.ops["logp"].grid.shapes[0].items())]
    assert not with_sweep[0].attrs or not with_sweep[0].shown


@pytest.mark.slow  # five sweeps
def test_an_attribute_sweep_takes_the_size_edges_where_a_wide_path_forgets_it(catalog):
    """rms_norm with eps hard-coded at its default past hidden 4,096 (no grid shape is
    wider): the defaults pass; the eps = 1e-5 sweep's shape_sweep, at the first dtype
    and without the residues mod 64 or the long lead, fails at hidden 4,097."""
    from tests.conftest import with_op_candidate

    cat = with_op_candidate(catalog, "rms_norm", "bug", "broken_rms_norm:eps_fixed_past_4096")
    plan = api.plan(cat, "rms_norm", candidate_names=["bug"], device="cpu", sweeps=True)
    planned = {(c.dtype, c.attributes["eps"]) for c in plan.cases if "shape_sweep" in c.checks}
    assert planned == {(d, e) for d in ("fp32", "bf16", "fp16") for e in (1e-6, 1e-5, 1e-3)}
    report = api.run(
        cat,
        "rms_norm",
        candidate_names=["bug"],
        device="cpu",
        dtype_names="fp32",
        check_names=["shape_sweep"],
        seeds=[0],
        isolate=False,
        sweeps=True,
    )
    by_eps = {r.attributes.get("eps", 1e-6): r for r in report.results}
    assert by_eps[1e-6].status == "pass", by_eps[1e-6].message
    op = cat.ops["rms_norm"]
    wide = wide_batches(op, {"hidden": op.dims["hidden"].default})
    assert by_eps[1e-6].metrics["shapes"] == len(sweep_sizes("hidden")) + len(wide) + 2
    for eps in (1e-5, 1e-3):
        assert by_eps[eps].status == "fail" and "at hidden=4097" in by_eps[eps].message
    assert by_eps[1e-5].metrics["shapes"] < len(sweep_sizes("hidden", residues=False))


def test_a_16_bit_attribute_sweep_takes_the_edges_wider_than_the_sweeps_shapes(catalog):
    """rms_norm whose 16-bit path alone hard-codes eps past hidden 4,096: at eps = 1e-3
    (a sweep value, pinned; not the big-batch case's 1e-5, which adds the far rows) fp32
    passes every edge; bf16 fails at hidden 8,193, its first edge past the sweeps' own
    shapes (hidden 256 and 8,192, whose case judges it there), which it skips."""
    from tests.conftest import with_op_candidate

    bug = "broken_rms_norm:eps_fixed_past_4096_in_16_bits"
    cat = with_op_candidate(catalog, "rms_norm", "bug", bug)
    # the default run sweeps eps in every dtype
    plan = api.plan(cat, "rms_norm", candidate_names=["bug"], device="cpu", sweeps=True)
    planned = {(c.dtype, c.attributes["eps"]) for c in plan.cases if "shape_sweep" in c.checks}
    assert {("bf16", 1e-5), ("fp16", 1e-5), ("bf16", 1e-3)} <= planned
    by = {}
    for dtype in ("fp32", "bf16"):
        report = api.run(
            cat, "rms_norm", candidate_names=["bug"], device="cpu", dtype_names=dtype,
            check_names=["shape_sweep"], seeds=[0], isolate=False, attributes={"eps": 1e-3},
            shape={"batch": 2, "seq": 16, "hidden": 256},
        )  # fmt: skip
        (by[dtype],) = report.results
    assert by["fp32"].status == "pass", by["fp32"].message
    edges = len(sweep_sizes("hidden", residues=False))
    assert by["fp32"].metrics["shapes"] == edges
    assert by["bf16"].status == "fail", by["bf16"].message
    assert by["bf16"].message.startswith("at hidden=8193 ")
    assert by["bf16"].metrics["shapes"] == 1  # 8,193: the first one past 8,192


@pytest.mark.slow  # 2^24 logits
def test_a_chunked_weight_gradient_that_overwrites_fails_past_one_chunk(catalog):
    """linear_logp's backward chunked over 2^24 logits, storing dW with = instead of +=:
    exact with one chunk (every grid shape), wrong past it (4,095 tokens at vocab 16,385;
    65,537 tokens)."""
    from tests.conftest import with_op_candidate

    cat = with_op_candidate(
        catalog, "linear_logp", "bug", "scale_bugs:linear_logp_chunk_overwrites_dw"
    )
    report = api.run(
        cat,
        "linear_logp",
        candidate_names=["bug"],
        device="cpu",
        dtype_names="fp32",
        check_names=["backward_accuracy", "shape_sweep"],
        seeds=[0],
        isolate=False,
        sweeps=False,
    )
    by = {(r.case_id, r.check): r for r in report.results}
    assert all(r.status == "pass" for (_, c), r in by.items() if c == "backward_accuracy")
    (sweep,) = [r for (_, c), r in by.items() if c == "shape_sweep"]
    # past one chunk: the first wide batch past 2^24 logits (4,095 tokens at 16,385)
    assert sweep.status == "fail" and "at 4095 rows at vocab=16385" in sweep.message, sweep.message
    assert "gradient:weight" in sweep.message
    # the table shows the failing shape's error and the weight gradient's own limit
    from kernelcheck.report.terminal import headline

    worst, limit = headline(sweep)
    assert worst == f"{sweep.metrics['max_abs']:.2e}" and sweep.metrics["max_abs"] > 1e-4, worst
    assert limit == "0.0001 + 1e-05|g|", limit


@pytest.mark.parametrize(
    ("op", "bug", "dim", "wrong_at", "judge"),
    [
        # exp terms of a long row's tail rounded to bf16: ~900x an honest error (the
        # softmax its backward takes from them too)
        ("logp", "tile_bugs:tail_exp_in_16_bits", "vocab", lambda v: v > 16384 and v % 8, "fb"),
        # a tail left out of the sum of squares: 2-3x an honest error
        (
            "rms_norm",
            "broken_rms_norm:tail_squares_dropped_in_16_bits",
            "hidden",
            lambda h: h > 4096 and h % 8,
            "f",
        ),
        # the row's entropy read in bf16 by the backward: 6-13x an honest gradient's error
        (
            "entropy",
            "broken_entropy:backward_entropy_in_16_bits",
            "vocab",
            lambda v: v > 16384 and v % 64,
            "b",
        ),
    ],
)
def test_a_16_bit_tail_path_inside_the_contract_fails_the_sweeps_precision(
    catalog, op, bug, dim, wrong_at, judge
):
    """A 16-bit path of the widths the grid never has, wrong by a few times to 900 times
    an honest kernel's error and within the contract: the sweep's precision judges (its
    edges row holding the mass in the tail) fail it there, after its accuracy passed."""
    from tests.conftest import with_op_candidate

    cat = with_op_candidate(catalog, op, "bug", bug)
    report = api.run(
        cat, op, candidate_names=["bug"], device="cpu", dtype_names="bf16",
        check_names=["shape_sweep"], seeds=[0], isolate=False, sweeps=False,
    )  # fmt: skip
    (res,) = report.results
    assert res.status == "fail", res.message
    judges = {"f": "forward_precision", "b": "backward_precision"}
    assert res.metrics["failing_check"] in {judges[j] for j in judge}, res.message
    assert wrong_at(res.metrics["failing_shape"][dim]), res.message


def test_the_accuracy_judges_leave_the_edges_row_to_the_precision_rules():
    """A user op whose fp32 contract (1e-5) an honest gradient cannot meet on the edges
    row (its mass at one entry, ``g - p sum(g)`` over 16,385 entries: 4.6e-5 off): the
    sweep judges that row against the honest reference, not the contract. The spec turns
    ``forward_precision`` off: the sweep does not judge by it either."""
    cat = api.load_catalog([SPECS / "log_softmax.toml"])
    shape = dict(cat.ops["log_softmax"].grid.shapes[0])
    res = run_one(cat, "log_softmax", "torch", "shape_sweep", "fp32", shape, seeds=[0])
    assert res.status == "pass", res.message
    assert res.metrics["backward_precision_margin"] < 1, res.metrics
    assert "forward_precision_margin" not in res.metrics, res.metrics


def _unmeetable_contract(cat):
    """The log_softmax user op with a contract no fp32 implementation meets (1e-9 in
    fp32), forward_precision on, and its sweep up to 17 columns (4,096 rows there)."""
    from dataclasses import replace

    from kernelcheck.spec.model import Tolerance

    op = cat.ops["log_softmax"]
    tight = {j: {**t, "fp32": Tolerance(1e-9, 1e-9)} for j, t in op.tolerances.items()}
    dims = {**op.dims, "hidden": replace(op.dims["hidden"], sweep_max=17)}
    checks = {k: v for k, v in op.checks.items() if k != "forward_precision"}
    op = replace(op, tolerances=tight, dims=dims, checks=checks)
    return replace(cat, ops={**cat.ops, "log_softmax": op})


def test_where_the_honest_reference_misses_the_contract_the_precision_rule_judges(
    monkeypatch,
):
    """A swept shape whose contract the honest fp32 reference misses too (a gradient's
    error tail over 2^26 elements; here a 1e-9 contract) is judged by the precision rule
    of the same direction on every row, and listed as not checked by the contract: the
    honest candidate passes, one 1e-3 off fails by forward_precision."""
    from kernelcheck.checks import shape_sweep

    monkeypatch.setattr(shape_sweep.ShapeSweep, "_far_rows_here", lambda self, full: False)
    cat = _unmeetable_contract(api.load_catalog([SPECS / "log_softmax.toml"]))
    shape = dict(cat.ops["log_softmax"].grid.shapes[0])
    honest = run_one(cat, "log_softmax", "torch", "shape_sweep", "fp32", shape, seeds=[0])
    assert honest.status == "pass", honest.message
    unmet = {part for part, why in honest.metrics["not_judged"] if "reference misses" in why}
    assert "forward_accuracy tolerance at 4096 rows at hidden=17" in unmet, unmet
    assert "backward_accuracy tolerance at 4096 rows at hidden=17" in unmet, unmet
    # the contract's unmet error is no verdict: never shown as the worst of a passing run
    for judge in ("forward_accuracy", "backward_accuracy"):  # 1e-9 + 1e-9 x |gold| at most
        assert honest.metrics.get(f"{judge}_max_abs", 0) < 1e-7, honest.metrics
    # the wide batch alone (hidden=1's exact reference meets the contract: failed by it)
    swept = shape_sweep.sweep_shapes
    batch = shape_sweep.WideBatch
    wide = lambda *a, **k: [s for s in swept(*a, **k) if isinstance(s, batch)]  # noqa: E731
    monkeypatch.setattr(shape_sweep, "sweep_shapes", wide)
    lossy = run_one(cat, "log_softmax", "lossy", "shape_sweep", "fp32", shape, seeds=[0])
    assert lossy.status == "fail", lossy.message
    assert lossy.metrics["failing_check"] == "forward_precision", lossy.message
    assert lossy.message.startswith("at 4096 rows at hidden=17"), lossy.message


def _huge_lead_alone(monkeypatch, own_process: bool = True, lead: str = "huge") -> None:
    """The sweep down to its huge leads (``lead`` "short": to the short-row one alone;
    "widest": to the widest batches instead): no swept shapes, no far rows (each has its
    tests); in process, its calls as in a case process of its own (``own_process``), as an
    isolated worker makes them."""
    from kernelcheck.checks import huge_rows, shape_sweep

    monkeypatch.setattr(shape_sweep, "sweep_shapes", lambda *a, **k: [])
    monkeypatch.setattr(shape_sweep.ShapeSweep, "_far_rows_here", lambda self, full: False)
    if lead == "huge":
        monkeypatch.setattr(shape_sweep, "widest_batches", lambda op: [])
        monkeypatch.setattr(shape_sweep, "short_rows_shape", lambda op: None)
    elif lead == "short":
        monkeypatch.setattr(shape_sweep, "widest_batches", lambda op: [])
        monkeypatch.setattr(shape_sweep, "huge_rows_shapes", lambda op: [])
        # an idle 24 GiB machine's budget, whatever runs beside the test: a with-grad call
        # past a loaded machine's budget would be judged forward only (and pass its bug)
        monkeypatch.setattr(huge_rows, "available_memory_bytes", lambda: 20 << 30)
    else:
        monkeypatch.setattr(shape_sweep.ShapeSweep, "_judge_huge_rows", lambda self, s, d: None)
    if own_process:
        guard = huge_rows.call_alone_within_budget
        monkeypatch.setattr(shape_sweep, "call_alone_within_budget", lambda d, own: guard(d, True))


def test_the_huge_leads_pass_2_31_elements_in_the_grids_narrowest_dtype(catalog):
    for name, op in catalog.ops.items():
        shapes = huge_rows_shapes(op)
        assert len(shapes) == 2 and shapes[0] == huge_rows_shape(op), name
        for _, sizes in shapes:
            widest = max((n for n in sizes if n not in op.lead), key=sizes.get)
            assert sizes[widest] % PAGE_ELEMENTS_16 == 0 and narrowest_dtype(op) == "bf16"
        (wide, wide_sizes), (narrow, narrow_sizes) = shapes
        widest = max((n for n in wide_sizes if n not in op.lead), key=wide_sizes.get)
        rows = math.prod(wide_sizes[d] for d in op.lead if d in wide_sizes)
        assert (rows - JUDGED) * wide_sizes[widest] >= 1 << 31, name
        assert wide.endswith("(past 2^31 elements)"), name
        rows = math.prod(narrow_sizes[d] for d in op.lead if d in narrow_sizes)
        assert narrow_sizes[widest] == 2048 and rows - JUDGED > 65_535 * 8, name
        assert narrow.endswith("(past 65,535 blocks of 16,384 elements)"), name


def _huge_leads_on(catalog, monkeypatch, callable_: str, lead: str = "huge"):
    """(catalog, result): logp's bf16 sweep of its huge leads alone (``lead`` "short": its
    short-row one alone), of a forward-only candidate ``callable_``, its calls as in a
    case process of its own."""
    from tests.conftest import with_op_candidate

    _huge_lead_alone(monkeypatch, lead=lead)
    cat = with_op_candidate(catalog, "logp", "bug", callable_, backward=False)
    shape = dict(cat.ops["logp"].grid.shapes[0])
    return cat, run_one(cat, "logp", "bug", "shape_sweep", "bf16", shape, seeds=[0])


@pytest.mark.skipif(mirroring_available() is not None, reason="mirrored batches: Linux only")
def test_a_launch_of_65535_blocks_of_16384_elements_fails_at_the_narrow_huge_lead(
    catalog, monkeypatch
):
    """Eight rows of 2,048 a block reach 524,280 rows (four of 2,560: 262,140, past the
    131,071-row lead): the narrow huge lead of 524,352 rows at 2,048 fails it at its
    last rows."""
    cat, res = _huge_leads_on(
        catalog, monkeypatch, "grid_cap_bugs:logp_rows_in_16384_element_blocks"
    )
    assert res.status == "fail", res.message
    label, _ = huge_rows_shapes(cat.ops["logp"])[1]
    assert res.message.startswith(f"at {label} (its first and last {JUDGED} rows"), res.message
    assert "first at row 524288: " in res.message, res.message  # the last 64 rows judged


def test_the_short_row_lead_passes_65535_blocks_of_4096_elements_and_2_17_rows(catalog):
    for name, op in catalog.ops.items():
        label, sizes = short_rows_shape(op)
        widest = max((n for n in sizes if n not in op.lead), key=sizes.get)
        rows = math.prod(sizes[d] for d in op.lead if d in sizes)
        assert sizes[widest] == 128 and rows - JUDGED >= 65_536 * 32 > 1 << 17, name
        assert label.endswith("(past 65,535 blocks of 4,096 elements at short rows)"), name


@pytest.mark.parametrize(
    "bug,fragment",
    [
        # block 65,535 of 32 rows never runs: its rows, between the judged ones, unwritten
        ("logp_short_rows_block_65535_skipped", "first at row 2097120 "),
        # another order past 2^17 rows of 128: other bits, within the tolerance
        ("logp_short_rows_summed_in_halves_past_2_17", "rows have other bits"),
    ],
)
def test_a_path_for_many_short_rows_fails_at_the_short_row_lead(
    catalog, monkeypatch, bug, fragment
):
    """Round 25's rms_norms packed short rows 32 to a block and lost block 65,535, or
    summed them another way past 2^17 rows: every lead of 65,537+ rows was at 2,048 or
    wider, so both passed. The short-row lead (2^21 + 64 rows of 128) fails them, in its
    judged rows or by the bits of the rows between."""
    cat, res = _huge_leads_on(catalog, monkeypatch, f"grid_cap_bugs:{bug}", lead="short")
    assert res.status == "fail", res.message
    label, sizes = short_rows_shape(cat.ops["logp"])
    assert res.message.startswith(f"at {label} ({shape_flag(sizes)}"), res.message
    assert fragment in res.message, res.message
    honest = "kernelcheck.candidates.torch_logp:logp"
    cat, res = _huge_leads_on(catalog, monkeypatch, honest, lead="short")
    assert res.status == "pass" and res.metrics["shapes"] == 1, res.message


@pytest.mark.parametrize(
    "dtype,lead", [("bf16", "short"), pytest.param("fp16", "far", marks=pytest.mark.slow)]
)
def test_a_backward_writing_its_inputs_past_2_26_16_bit_elements_fails_at_the_big_leads(
    catalog, monkeypatch, dtype, lead
):
    """A round-25 red team's swiglu wrote d_gate and d_up into the saved gate and up past
    2^26 16-bit elements: integrity's wide second call runs in the first dtype (fp32) at
    65,537 rows of 256. The big leads' inputs must still hold the rows they copy after
    each call: the short-row lead's with-grad call fails it in bf16's case, the far-rows
    lead's (65,537 rows of 2,560) in every dtype's; the honest one passes."""
    from kernelcheck.checks import shape_sweep

    if lead == "short":
        _huge_lead_alone(monkeypatch, lead="short")
    else:  # the far rows alone
        _huge_lead_alone(monkeypatch, lead="widest")
        monkeypatch.setattr(shape_sweep.ShapeSweep, "_far_rows_here", lambda self, full: full)
        monkeypatch.setattr(shape_sweep, "widest_batches", lambda op: [])
    bug = "broken_swiglu:grads_written_into_saved_inputs_past_2_26_in_16_bits"
    cat = with_op_candidate(catalog, "swiglu", "bug", bug)
    shape = dict(cat.ops["swiglu"].grid.shapes[0])
    res = run_one(cat, "swiglu", "bug", "shape_sweep", dtype, shape, seeds=[0])
    assert res.status == "fail", res.message
    assert res.metrics["failing_check"] == "integrity", res.message
    assert "integrity: the backward changed input 'gate' in " in (res.message), res.message
    honest = run_one(catalog, "swiglu", "torch", "shape_sweep", dtype, shape, seeds=[0])
    assert honest.status == "pass", honest.message


@pytest.mark.skipif(mirroring_available() is not None, reason="mirrored batches: Linux only")
def test_a_32_bit_flat_offset_fails_past_2_31_elements(catalog, monkeypatch):
    """A logp reading its selected logit at ``row * V + t`` in int32: exact below 2^31
    elements, another logit past it (tests/fixtures/offset_bugs.py)."""
    cat, res = _huge_leads_on(catalog, monkeypatch, "offset_bugs:logp_int32_flat_offsets")
    assert res.status == "fail", res.message
    shape = dict(cat.ops["logp"].grid.shapes[0])
    label, sizes = huge_rows_shape(cat.ops["logp"])
    assert res.message.startswith(f"at {label} (its first and last {JUDGED} rows; the repro")
    assert res.metrics["failing_check"] == "forward_accuracy"
    first_past = -(-(1 << 31) // sizes["vocab"])  # the first row whose offset wraps
    assert f"first at row {first_past}: " in res.message, res.message
    # in the grid's other dtypes the sweep leaves it to bf16's case
    assert run_one(cat, "logp", "bug", "shape_sweep", "fp32", shape, seeds=[0]).status == "pass"


@pytest.mark.skipif(mirroring_available() is not None, reason="mirrored batches: Linux only")
def test_a_call_past_its_memory_budget_leaves_the_huge_lead_unjudged_and_says_so(
    catalog, monkeypatch
):
    """The honest ``torch`` logp with a 1 GiB budget: its with-grad call (a 4 GiB bf16
    gradient) runs out, so the huge lead is judged forward only, and the run's list of
    what was not checked names the part it could not judge."""
    from kernelcheck.checks import huge_rows

    _huge_lead_alone(monkeypatch)
    budget = huge_rows.CALL_BUDGET_SHARE << 30  # 1 GiB for the call
    monkeypatch.setattr(huge_rows, "available_memory_bytes", lambda: budget)
    report = api.run(
        catalog, "logp", candidate_names=["torch"], dtype_names="bf16", check_names=["shape_sweep"],
        shape=dict(catalog.ops["logp"].grid.shapes[0]), seeds=[0], isolate=False, sweeps=False,
    )  # fmt: skip
    (res,) = report.results
    assert res.status == "pass", res.message
    label, _ = huge_rows_shape(catalog.ops["logp"])
    (gap,) = [n for n in report.not_checked() if label in n.what]
    assert gap.what == f"shape_sweep's {label}, with grad for torch at bf16"
    assert gap.reason.startswith("past its memory budget: out of memory"), gap.reason


@pytest.mark.skipif(mirroring_available() is not None, reason="mirrored batches: Linux only")
@pytest.mark.parametrize("candidate", ["cpu", pytest.param("torch", marks=pytest.mark.slow)])
def test_honest_candidates_pass_the_huge_lead_with_grad(catalog, candidate, monkeypatch):
    _huge_lead_alone(monkeypatch)
    shape = dict(catalog.ops["logp"].grid.shapes[0])
    res = run_one(catalog, "logp", candidate, "shape_sweep", "bf16", shape, seeds=[0])
    assert res.status == "pass", res.message
    assert res.metrics["shapes"] == 2 and "not_judged" not in res.metrics


@pytest.mark.slow  # two CLI runs of the bf16 sweep
@pytest.mark.skipif(mirroring_available() is not None, reason="mirrored batches: Linux only")
def test_the_printed_repro_of_a_huge_lead_failure_reproduces(tmp_path):
    """From the command line, as a user spec adds the kernel: the default sweep at bf16
    fails at the rows past 2^31 elements, and the report's repro fails there again."""
    from tests.conftest import failed_sweep_reproduces

    failed = failed_sweep_reproduces("planted_offsets.toml", "int32-offsets", tmp_path)
    assert "(past 2^31 elements)" in failed["message"], failed["message"]


def test_in_process_the_huge_lead_is_left_unjudged_and_listed(catalog, monkeypatch):
    """Its memory budget is an address-space limit of the whole process: never set in a
    process that runs anything else (``isolate=False``, the pytest plugin)."""
    _huge_lead_alone(monkeypatch, own_process=False)
    report = api.run(
        catalog, "logp", candidate_names=["cpu"], dtype_names="bf16", check_names=["shape_sweep"],
        shape=dict(catalog.ops["logp"].grid.shapes[0]), seeds=[0], isolate=False, sweeps=False,
    )  # fmt: skip
    (res,) = report.results
    assert res.status == "pass" and res.metrics["shapes"] == 0, res.message
    label, _ = huge_rows_shape(catalog.ops["logp"])
    (gap,) = [n for n in report.not_checked() if label in n.what]
    assert gap.reason.startswith("in process: its memory budget would limit the whole process")


def test_only_ops_of_two_inner_dims_get_the_joint_shape(catalog):
    for name, op in catalog.ops.items():
        joint = joint_shape(op, 3)
        assert bool(joint) == (len(swept_dims(op)) >= 2), name
    ((label, sizes),) = joint_shape(catalog.ops["linear_logp"], 3)
    assert sizes == {"tokens": 3, "hidden": 1024, "vocab": 32000}
    assert (label, sizes) in sweep_shapes(catalog.ops["linear_logp"], 3)
    assert not hot_calls(label)


def _joint_shape_alone(monkeypatch) -> None:
    """The sweep down to its joint shape (the others have their tests)."""
    from kernelcheck.checks import shape_sweep

    monkeypatch.setattr(
        shape_sweep, "sweep_shapes", lambda op, rows, *a, **k: shape_sweep.joint_shape(op, rows)
    )
    monkeypatch.setattr(shape_sweep.ShapeSweep, "_far_rows_here", lambda self, full: False)
    monkeypatch.setattr(shape_sweep.ShapeSweep, "_judge_huge_rows", lambda self, *a: None)


@pytest.mark.parametrize(
    "candidate",
    [
        "bug",
        pytest.param("torch", marks=pytest.mark.slow),
    ],
)
def test_a_path_taken_for_a_real_lm_head_alone_fails_at_the_joint_shape(
    catalog, monkeypatch, candidate
):
    """linear_logp rounding fp32 operands to TF32 once hidden >= 256 and vocab >= 8,192
    (tests/fixtures/lm_head_bugs.py): no grid or swept shape had both; the honest
    ``torch`` candidate passes there."""
    from tests.conftest import with_op_candidate

    _joint_shape_alone(monkeypatch)
    cat = with_op_candidate(
        catalog, "linear_logp", "bug", "lm_head_bugs:linear_logp_tf32_for_a_real_lm_head"
    )
    shape = dict(cat.ops["linear_logp"].grid.shapes[0])
    res = run_one(cat, "linear_logp", candidate, "shape_sweep", "fp32", shape, seeds=[0])
    if candidate == "torch":
        assert res.status == "pass", res.message
        return
    assert res.status == "fail", res.message
    assert res.message.startswith("at every inner dim at once: hidden=1024, vocab=32000")
    assert res.metrics["failing_check"] == "forward_accuracy"
