"""Every check fails a candidate with the bug it targets, and the honest torch passes all.

Each broken candidate lives in tests/fixtures/broken_logp.py with one realistic bug.
"""

from __future__ import annotations

import pytest

from kernelcheck.checks import CHECKS
from tests.conftest import run_small, with_candidate

BROKEN = [
    # (broken callable, check that must fail, dtype, distributions, message fragment)
    ("no_max_subtraction", "forward_accuracy", "fp32", "large", "NaN/Inf where gold is finite"),
    ("off_by_small", "forward_accuracy", "fp32", "normal", "outside atol=1e-05"),
    ("bf16_accumulation", "forward_precision", "bf16", "normal", "fp32 reference error"),
    ("wrong_backward", "backward_accuracy", "fp32", "normal", "gradient:logits"),
    ("skips_loss_masked_rows", "backward_accuracy", "fp32", "normal", "NaN/Inf where gold"),
    ("batch_dependent_order", "forward_invariance", "fp32", "normal", "differ in bits"),
    ("alignment_dependent_order", "forward_invariance", "fp32", "normal", "misaligned"),
    ("float2_path_at_8_byte_rows", "forward_invariance", "fp32", "normal", "8 bytes past"),
    ("batch_dependent_backward", "backward_invariance", "fp32", "normal", "differ in bits"),
    ("nondeterministic", "determinism", "fp32", "normal", "runs after the first differ"),
    ("inference_mode_other_path", "determinism", "fp32", "normal", "under inference_mode"),
    ("training_path_other_order", "determinism", "fp32", "normal", "the call with grad"),
    ("torch_sum_in_deterministic_mode", "determinism", "fp32", "normal", "(deterministic mode)"),
    ("negative_zero", "contract", "fp32", "normal", "expected exactly 0.0"),
    (
        "input_dtype_output",
        "contract",
        "bf16",
        "normal",
        "dtype torch.bfloat16 != expected torch.float32",
    ),
    ("ignores_strides", "contract", "fp32", "normal", "differs from the contiguous copy"),
    ("contiguous_upstream_assumed", "contract", "fp32", "normal", "upstream"),
    ("skips_tiny_upstream", "contract", "fp32", "normal", "(a token mean): gradient 'logits'"),
    ("upstream_by_last_stride", "contract", "fp32", "normal", "broadcast over the last dim"),
    ("dense_upstream_read_flat", "contract", "fp32", "normal", "first two dims swapped"),
    ("gradient_scaled_in_place", "contract", "fp32", "normal", "a second backward through one"),
    ("logits_kept_on_ctx", "contract", "fp32", "normal", "inputs edited in place (x2)"),
    ("target_kept_on_ctx", "contract", "fp32", "normal", "(ids + 1, masks negated)"),
    ("decode_step_in_logits_dtype", "forward_invariance", "bf16", "normal", "as lead (2, 1)"),
    ("kernel_cache_without_dtype", "contract", "fp32", "normal", "inputs after a fp32 call"),
    ("workspace_per_shape", "contract", "fp32", "normal", "two threads calling at once"),
    ("squeezes_lead", "contract", "fp32", "normal", "lead (1, 1): output 'logp' shape ()"),
    ("temperature_baked_into_cache", "contract", "fp32", "normal", "after a call at temperature"),
    (
        "backward_temperature_from_last_forward",
        "contract",
        "fp32",
        "normal",
        "the first's gradient 'logits' differs from the one it gets alone",
    ),
    ("backward_built_at_first_temperature", "contract", "fp32", "normal", "the second's gradient"),
    ("rows_by_one_stride", "contract", "fp32", "normal", "shifted-token view: output"),
    ("targets_by_one_stride", "contract", "fp32", "normal", "shifted-token view: output"),
    (
        "rows_by_pitch_when_contiguous",
        "contract",
        "fp32",
        "normal",
        "decode step of sequence-first rows (lead (n, 1)): output",
    ),
    ("backward_rows_by_one_stride", "contract", "fp32", "normal", "shifted-token view: gradient"),
    ("nan_read_as_masked", "contract", "fp32", "normal", "finite where the float64 gold is NaN"),
    (
        "accumulates_in_default_dtype",
        "contract",
        "fp32",
        "normal",
        "under torch.set_default_dtype(torch.bfloat16): output 'logp'",
    ),
    ("writes_its_input", "integrity", "fp32", "normal", "changed input 'logits'"),
    ("returns_input_storage", "integrity", "fp32", "normal", "aliases input 'logits'"),
    ("reuses_its_output_buffer", "integrity", "fp32", "normal", "reused output buffer"),
]


@pytest.mark.parametrize(
    "fn,check,dtype,dist,fragment", BROKEN, ids=[f"{b[1]}-{b[0]}" for b in BROKEN]
)
def test_broken_candidate_fails_its_check(catalog, fn, check, dtype, dist, fragment):
    cat = with_candidate(catalog, "broken", f"broken_logp:{fn}")
    result = run_small(cat, "broken", [check], dtype=dtype, seeds=[0], distributions=dist)[check]
    assert result.status == "fail", (result.status, result.message)
    assert fragment in result.message
    assert "kernelcheck run --op logp" in result.repro and f"--checks {check}" in result.repro


def test_bf16_accumulation_passes_the_contract_tolerance_but_not_precision(catalog):
    """The case forward_precision exists for: inside 6e-2, yet not an fp32 accumulation."""
    cat = with_candidate(catalog, "broken", "broken_logp:bf16_accumulation")
    res = run_small(
        cat,
        "broken",
        ["forward_accuracy", "forward_precision"],
        dtype="bf16",
        seeds=[0],
        distributions="normal",
    )
    assert res["forward_accuracy"].status == "pass"
    assert res["forward_precision"].status == "fail"
    assert res["forward_precision"].metrics["ratio"] > 10


def test_off_by_small_passes_bf16_tolerance(catalog):
    cat = with_candidate(catalog, "broken", "broken_logp:off_by_small")
    res = run_small(
        cat, "broken", ["forward_accuracy"], dtype="bf16", seeds=[0], distributions="normal"
    )
    assert res["forward_accuracy"].status == "pass"


@pytest.mark.parametrize(
    "dtype",
    [
        "fp32",
        pytest.param("bf16", marks=pytest.mark.slow),
        pytest.param("fp16", marks=pytest.mark.slow),
    ],
)  # 11 s each: the 16-bit ones in the slow suite
def test_torch_candidate_passes_every_check(catalog, dtype):
    res = run_small(catalog, "torch", None, dtype=dtype, seeds=[0, 1])
    assert set(res) == set(CHECKS)
    bad = {k: (r.status, r.message) for k, r in res.items() if r.status != "pass"}
    assert not bad


@pytest.mark.slow
def test_torch_candidate_passes_on_multi_tile_vocab(catalog):
    res = run_small(
        catalog, "torch", None, dtype="bf16", shape={"batch": 3, "vocab": 10000}, seeds=[0]
    )
    assert {r.status for r in res.values()} == {"pass"}, {k: r.message for k, r in res.items()}


@pytest.mark.slow
def test_plain_torch_sum_is_not_batch_invariant_on_long_rows(catalog):
    """A real-world negative control: torch's CPU sum splits a long row over threads when
    rows are few, so the row's bits depend on the batch size. Needs 2+ threads."""
    import torch

    if torch.get_num_threads() < 2:
        pytest.skip("needs at least 2 torch threads to split a row")
    cat = with_candidate(catalog, "plain", "plain_torch:logp")
    res = run_small(
        cat,
        "plain",
        ["backward_invariance"],
        shape={"batch": 2, "vocab": 151936},
        seeds=[0],
        distributions="masked",
    )
    assert res["backward_invariance"].status == "fail", res["backward_invariance"].message


def test_a_sparse_loss_mask_reaches_a_compacted_backward(catalog):
    """Odd seeds drop 15 rows in 16 from the loss (long prompts): a backward path taken
    only then, which forgets the temperature, fails there and passes seed 0."""
    cat = with_candidate(catalog, "broken", "broken_logp:sparse_upstream_forgets_temperature")
    kw = dict(distributions="normal", attributes={"temperature": 0.7})
    kw["shape"] = {"batch": 4, "seq": 16, "vocab": 257}  # 64 rows: 4 or so keep a loss
    check = "backward_accuracy"
    dense = run_small(cat, "broken", [check], seeds=[0], **kw)[check]
    assert dense.status == "pass", dense.message
    sparse = run_small(cat, "broken", [check], seeds=[1], **kw)[check]
    assert sparse.status == "fail" and "gradient:logits" in sparse.message, sparse.message


def test_a_scratch_buffer_used_at_a_temperature_alone_fails_in_its_sweep_case(catalog):
    """Two threads calling at once run in an attribute sweep's case too: a kernel that
    stages x / T in a buffer kept per shape stages nothing at T = 1."""
    cat = with_candidate(catalog, "broken", "broken_logp:workspace_when_tempered")
    for temperature, status in ((1.0, "pass"), (0.7, "fail")):
        kw = dict(distributions="normal", attributes={"temperature": temperature})
        res = run_small(cat, "broken", ["contract"], seeds=[0], **kw)["contract"]
        assert res.status == status, res.message
    assert "two threads calling at once" in res.message, res.message
