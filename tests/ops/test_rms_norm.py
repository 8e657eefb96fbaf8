"""rms_norm: its gold, its shipped spec, its attribute, and a planted bug per check."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kernelcheck import api
from kernelcheck.errors import UsageError
from kernelcheck.ops import rms_norm
from tests.conftest import FIXTURES, HANG_S, honest_result, run_one

PLANTED = FIXTURES / "planted_rms_norm.toml"
SMALL = {"batch": 2, "seq": 16, "hidden": 256}


@pytest.fixture(scope="module")
def planted():
    return api.load_catalog([PLANTED])


def one(catalog, candidate: str, check: str, dtype: str = "fp32", **kw):
    """The one result of one check of one candidate on the small shape, in process."""
    return run_one(catalog, "rms_norm", candidate, check, dtype, SMALL, **kw)


def test_gold_matches_the_definition():
    x = torch.randn(3, 5, dtype=torch.float64)
    w = torch.randn(5, dtype=torch.float64)
    want = x / torch.sqrt((x**2).sum(-1, keepdim=True) / 5 + 1e-6) * w
    assert torch.allclose(rms_norm.gold(x, w, 1e-6), want, rtol=1e-14, atol=0)


@pytest.mark.slow
@pytest.mark.grid
def test_the_shipped_spec_passes_the_honest_candidate(catalog):
    report = api.run(catalog, "rms_norm", candidate_names=["torch"], isolate=False)
    assert report.results and report.passed, [
        (r.case_id, r.check, r.message) for r in report.results if r.status != "pass"
    ]
    # the weight gradient has its own tolerance, the x gradient the op-wide one
    back = next(r for r in report.results if r.check == "backward_accuracy")
    assert back.tolerance["per_name"]["weight"]["atol"] > back.tolerance["atol"]


PLANTED_BUGS = [
    # (candidate, check, dtype, what the message says)
    ("no-eps", "forward_accuracy", "fp32", "NaN/Inf where gold is finite"),
    ("bf16-mean", "forward_precision", "fp32", "x the honest fp32 reference's"),
    ("batch-dependent-split", "forward_invariance", "bf16", "differ in bits"),
    ("in-place", "integrity", "fp32", "changed input 'x'"),
    ("unit-column-stride", "contract", "fp32", "column-strided view"),
    ("frozen-weight-dx", "backward_accuracy", "fp32", "gradient:x (weight frozen)"),
    # the weight's zero entry: a pruned or zero-initialised channel
    ("xhat-from-output", "backward_accuracy", "fp32", "NaN/Inf where gold is finite"),
    # an fp32 weight beside bf16 activations (apex's mixed fused norm)
    ("weight-read-as-x-dtype", "contract", "bf16", "fp32 weight in a bf16 case"),
    ("weight-read-as-x-dtype-in-backward", "contract", "bf16", "case: gradient 'x'"),
    # bf16 norm weights beside an fp32 residual stream
    ("output-type-as-weight", "contract", "fp32", "bf16 weight in an fp32 case"),
    # a norm at another eps in the same process (a vision tower's beside the LM's)
    ("eps-compiled-into-cache", "contract", "fp32", "eps=1e-05 after a call at eps=1e-06"),
    # atomics past 1,024 rows: the grid's rows never get there
    ("weight-grad-in-finish-order", "determinism", "fp32", "(at 4096 rows, 8 threads)"),
    # one partial per thread (per SM): the same bits at one thread count, not at another
    ("weight-grad-one-partial-per-thread", "determinism", "fp32", "(at 4096 rows, 3 threads)"),
    # 16-bit dW partials, one per 64-row group: one row each at the grid's rows
    ("weight-grad-partials-in-x-dtype", "backward_precision", "bf16", "training batch of 4096"),
    # whole 2,048-wide tiles only, at multiples of 256: 2^k and 2^k +- 1 never show it
    pytest.param(
        "tile-count-floored", "shape_sweep", "fp32", "at hidden=2304", marks=pytest.mark.slow
    ),
    # a ring of two sub-tile buffers drained after the loop: a last chunk of an odd count
    # (Gemma 3 12B's 3,840; the sweep's multiples of 64 past 24,576 hold each count too)
    pytest.param(
        "odd-sub-tiles-drained-twice",
        "shape_sweep",
        "fp32",
        "at hidden=3840",
        marks=pytest.mark.slow,
    ),
    ("output-truncated-to-bf16", "forward_precision", "bf16", "rounded toward zero"),
    # a third micro-batch in flight overwrites the first's rstd
    ("ring-of-two-workspaces", "contract", "fp32", "9 calls in flight"),
    # one workspace per pipeline stage: a ninth micro-batch in flight overwrites the first's
    ("ring-of-eight-workspaces", "contract", "fp32", "call 1's gradient"),
    # 17 or 33 micro-batches in flight (a round-24 red team's swiglu kept a ring of 16)
    ("ring-of-sixteen-workspaces", "contract", "fp32", "33 calls of 2 rows in flight"),
    ("ring-of-thirty-two-workspaces", "contract", "fp32", "call 1's gradient"),
    # [s, b, h] activations seen as [b, s, h]: dense, not contiguous
    ("dense-memory-order", "contract", "fp32", "lead dims permuted"),
    # .backward() over two micro-batches, as a training loop accumulates
    ("weight-grad-accumulated-twice", "contract", "fp32", "accumulated into .grad"),
    # the mixed-dtype calls' backwards: a dispatch on the weight's dtype, dW in x's
    ("backward-in-weight-dtype", "contract", "fp32", "gradient 'x' (fp32)"),
    ("weight-grad-in-x-dtype", "contract", "bf16", "gradient 'weight' (fp32)"),
    # an MoE expert that got no tokens
    ("empty-rows-weight-grad-unwritten", "contract", "fp32", "empty input: gradient"),
]


@pytest.mark.parametrize(
    "name,check,dtype,fragment",
    PLANTED_BUGS,
    ids=[getattr(p, "values", p)[0] for p in PLANTED_BUGS],
)
def test_each_planted_bug_fails_its_check(planted, name, check, dtype, fragment):
    bad = one(planted, name, check, dtype)
    assert bad.status == "fail" and fragment in bad.message, bad.message
    honest = honest_result(planted, "rms_norm", check, dtype, SMALL)
    assert honest.status == "pass", honest.message


def test_no_eps_is_caught_on_zero_rows_whatever_else_the_grid_draws(planted):
    """The real failure of a missing eps (NaN on an all-zero padding row) needs the
    zero_rows distribution: normal data alone passes the buggy kernel."""
    kw = dict(candidate_names=["no-eps"], dtype_names="fp32", shape=SMALL, isolate=False)
    normal = api.run(
        planted, "rms_norm", check_names=["forward_accuracy"], distributions="normal", **kw
    )
    zero = api.run(
        planted, "rms_norm", check_names=["forward_accuracy"], distributions="zero_rows", **kw
    )
    assert normal.results[0].status == "pass" and zero.results[0].status == "fail"


@pytest.mark.slow
def test_an_attribute_set_on_the_command_line_is_in_the_id_and_the_repro(catalog, tmp_path):
    res = one(catalog, "torch", "forward_accuracy", attributes={"eps": 1e-2})
    assert res.status == "pass" and res.case_id == "torch-fp32-2x16x256-eps=0.01"
    assert "--attr eps=0.01" in res.repro
    argv = [sys.executable, "-m", *res.repro.split()]  # "kernelcheck" with this interpreter
    out = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0 and "eps=0.01" in out.stdout, out.stdout + out.stderr


def test_the_gold_sees_the_attribute(planted):
    """At a large eps the no-eps kernel is plainly wrong even without zero rows."""
    res = one(
        planted, "no-eps", "forward_accuracy", distributions="normal", attributes={"eps": 1.0}
    )
    assert res.status == "fail"


def test_unknown_attribute_is_a_usage_error(catalog):
    with pytest.raises(UsageError, match="unknown attribute 'epsilon'.*valid: eps"):
        api.plan(catalog, "rms_norm", attributes={"epsilon": 1e-5})


def test_the_cli_refuses_a_malformed_attr():
    out = subprocess.run(
        [sys.executable, "-m", "kernelcheck", "run", "--op", "rms_norm", "--attr", "eps"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert out.returncode == 2 and "--attr: expected NAME=VALUE" in out.stderr


def test_a_candidate_without_the_attribute_runs_at_the_default_and_is_skipped_elsewhere(
    catalog,
):
    """An op can gain an attribute without breaking existing candidates."""
    from tests.conftest import with_op_candidate

    cat = with_op_candidate(catalog, "rms_norm", "no-eps-param", "broken_rms_norm:fixed_eps")
    assert one(cat, "no-eps-param", "forward_accuracy").status == "pass"
    res = one(cat, "no-eps-param", "forward_accuracy", attributes={"eps": 1e-3})
    assert res.status == "skip" and "does not take eps=0.001" in res.message


@pytest.mark.parametrize("past", ["4096", "2-17"])
def test_atomics_past_a_4096_row_training_batch_fail_in_the_ops_big_batch_case(planted, past):
    """determinism's training batch is 4,096 rows in every case, and 262,144 (within its
    work and memory bounds: 2^28 bytes of rows at 256 fp32) in the op's one big-batch
    case: eps at its first sweep value on the grid's first dtype and shape. A kernel whose
    weight gradient takes atomics past 4,096 rows (a training batch of 8k tokens) or past
    131,072 (a round-17 red team's) fails there."""
    name = f"weight-grad-in-finish-order-past-{past}"
    big = {"attributes": {"eps": 1e-5}}
    bad = run_one(planted, "rms_norm", name, "determinism", "fp32", SMALL, **big)
    assert bad.status == "fail" and "(at 262144 rows, 8 threads) gradient:weight" in bad.message
    assert one(planted, name, "determinism").status == "pass"  # 4,096 rows: one order
    honest = run_one(planted, "rms_norm", "torch", "determinism", "fp32", SMALL, **big)
    assert honest.status == "pass", honest.message


@pytest.mark.slow  # two candidates' backward at 262,145 rows x 256: ~10 s
def test_weight_grad_blocks_that_floor_a_huge_batch_fail_in_the_ops_big_batch_case(planted):
    """backward_precision's training batch is 4,096 rows in every case (2^24 elements at
    hidden 4,096); in the op's big-batch case it passes 2^26 elements with an odd count
    (262,145 rows at hidden 256), where a kernel summing the weight gradient over a fixed
    grid of blocks that floors the rows per block loses the rest."""
    name = "weight-grad-blocks-floored-past-2-24"
    big = {"attributes": {"eps": 1e-5}}
    bad = run_one(planted, "rms_norm", name, "backward_precision", "fp32", SMALL, **big)
    assert bad.status == "fail", bad.message
    assert "gradient:weight, all entries, at a training batch of 262145 rows" in bad.message
    assert one(planted, name, "backward_precision").status == "pass"  # 4,096 rows: exact
    honest = run_one(planted, "rms_norm", "torch", "backward_precision", "fp32", SMALL, **big)
    assert honest.status == "pass", honest.message
