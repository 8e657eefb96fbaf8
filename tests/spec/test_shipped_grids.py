"""The shipped grids reach the paths kernels take only at real, aligned sizes.

The layout probes (``contract``), the frozen-input backwards and the bit checks run at the
grid's shapes; ``shape_sweep`` judges values of contiguous calls elsewhere. A round-19 red
team's four kernels, each wrong or batch-variant only at a width of whole 256s past 4,096
(its proofs at Llama 3's 128,256, a hidden of 8,192, an intermediate of 11,008), passed
every check while the grids' widths were 257, 1,000, 10,000, 151,936 and 4,096 at most;
the grids now have 32,768, 8,192 and 14,336. A round-20 red team's rms_norm took a path
of its own for many rows of a head_dim of 128 or less (QK-norm), a width no grid had; the
rms_norm grid now has 2x16x128.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_one, with_op_candidate

ROW_WISE_OPS = ("logp", "entropy", "ratio_kl", "rms_norm", "swiglu")


@pytest.mark.parametrize("name", ROW_WISE_OPS)
def test_each_op_has_a_3d_grid_shape_of_whole_256s_past_4096(catalog, name):
    op = catalog.ops[name]
    found = []
    for shape in op.grid.shapes:
        lead = [d for d in shape if d in op.lead]
        widest = max(v for d, v in shape.items() if d not in op.lead)
        if len(lead) >= 2 and widest % 256 == 0 and widest > 4096:
            found.append(shape)
    assert found, op.grid.shapes


VOCAB = {"batch": 2, "seq": 3, "vocab": 32768}


@pytest.mark.parametrize(
    ("op", "bug", "check", "shape", "other"),
    [
        (
            "entropy",
            "entropy_splits_few_rows_at_aligned_vocab",
            "forward_invariance",
            VOCAB,
            {"batch": 8, "vocab": 151936},
        ),
        (
            "logp",
            "logp_rows_by_pitch_at_aligned_vocab",
            "contract",
            VOCAB,
            {"batch": 2, "seq": 3, "vocab": 10000},
        ),
        (
            "rms_norm",
            "rms_norm_wide_weight_only_backward",
            "backward_accuracy",
            {"batch": 2, "seq": 3, "hidden": 8192},
            {"batch": 4, "hidden": 4096},
        ),
        (
            "rms_norm",
            "rms_norm_packs_many_short_rows",
            "forward_invariance",
            {"batch": 2, "seq": 16, "hidden": 128},
            {"batch": 2, "seq": 16, "hidden": 256},
        ),
        (
            "swiglu",
            "swiglu_wide_halves_staged_in_place",
            "contract",
            {"batch": 2, "seq": 3, "inter": 14336},
            {"batch": 64, "inter": 1000},
        ),
    ],
)
def test_a_path_taken_only_at_real_aligned_sizes_fails_at_its_grid_shape(
    catalog, op, bug, check, shape, other
):
    grid = [dict(s) for s in catalog.ops[op].grid.shapes]
    assert shape in grid and other in grid
    cat = with_op_candidate(catalog, op, "bug", f"aligned_path_bugs:{bug}")
    res = run_one(cat, op, "bug", check, "fp32", shape)
    assert res.status == "fail", res.message
    # the grid's other shapes pass it: the aligned shape is what shows it
    assert run_one(cat, op, "bug", check, "fp32", other).status == "pass"
