"""The Ascend C kernel on a real NPU, through kernelcheck: the original port's checks.

Skipped, with the reason, wherever the ``ascend`` candidate cannot run (no torch_npu, no
CANN, no NPU, or the extension not built). Nothing here runs the kernel anywhere else.
"""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.candidates import probe
from kernelcheck.spec import load_catalog

CATALOG = load_catalog()
ASCEND = CATALOG.op("logp").candidates["ascend"]
REASON = probe(ASCEND, "npu")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"ascend candidate cannot run: {REASON}")


def run(checks, dtype, shape, **kw):
    report = api.run(
        CATALOG, "logp", candidate_names=["ascend"], device="npu", dtype_names=dtype,
        shape=shape, check_names=checks, **kw,
    )  # fmt: skip
    results = {r.check: r for r in report.results}
    bad = {k: r.message for k, r in results.items() if r.status != "pass"}
    assert not bad, bad
    assert all(r.implementation.startswith("ascend-c:") for r in results.values())
    return results


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_forward_at_the_contract_tolerance(dtype):
    run(["forward_accuracy", "forward_precision"], dtype, {"batch": 3, "seq": 5, "vocab": 257})


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_out_of_range_fp32_output_empty_input_and_strided_views(dtype):
    run(["contract", "integrity"], dtype, {"batch": 3, "seq": 5, "vocab": 32})


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_backward_against_the_gold(dtype):
    run(["backward_accuracy"], dtype, {"batch": 3, "seq": 5, "vocab": 257})


def test_no_cross_row_gradient_leak():
    from kernelcheck.candidates.ascend import logp

    logits = torch.randn(4, 257, generator=torch.Generator().manual_seed(0)).to("npu")
    logits[1] = logits[0]
    target = torch.tensor([5, 5, 7, 9]).to("npu")
    logits.requires_grad_(True)
    g = torch.tensor([1.0, 1.0, 0.5, -2.0]).to("npu")
    (grad,) = torch.autograd.grad(logp(logits, target), logits, g)
    assert torch.equal(grad[0], grad[1])
    assert not torch.equal(grad[2], grad[3])


def test_bitwise_batch_invariance_1_vs_2_4_16_300_positions_and_striding():
    # 300 rows > 128 blocks: rows are strided over blocks
    run(["forward_invariance", "backward_invariance"], "bf16", {"batch": 2, "vocab": 257})
    run(["forward_invariance"], "fp16", {"batch": 8, "vocab": 257})


def test_multi_tile_vocab_10000():
    run(
        ["forward_accuracy", "forward_invariance", "determinism"],
        "fp32",
        {"batch": 4, "vocab": 10000},
    )


def test_repeated_runs_are_bitwise_identical():
    run(["determinism"], "bf16", {"batch": 300, "vocab": 257})


def test_qwen3_vocab():
    run(["forward_accuracy", "forward_invariance"], "bf16", {"batch": 8, "vocab": 151936})
