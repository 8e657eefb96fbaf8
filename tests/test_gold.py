"""The float64 gold: exact on the rounded inputs, and bounded in memory by row chunks."""

from __future__ import annotations

import pytest
import torch

from kernelcheck import gold
from kernelcheck.cases.inputs import make_inputs
from kernelcheck.ops.logp import gold as logp_gold
from kernelcheck.ops.logp import gold_backward


def test_chunked_gold_equals_one_shot(catalog):
    op = catalog.op("logp")
    x = make_inputs(op, {"batch": 5, "seq": 3, "vocab": 257}, "bf16", 0, "masked")
    whole = gold.forward(op, logp_gold, x, (5, 3))[0]
    tiny = gold.forward(op, logp_gold, x, (5, 3), chunk_bytes=1)[0]  # one row per chunk
    assert whole.dtype == torch.float64 and whole.shape == (5, 3)
    assert torch.equal(whole, tiny)
    direct = logp_gold(x["logits"].double(), x["target"])
    assert torch.equal(whole, direct)


def test_gold_upcasts_the_same_rounded_values(catalog):
    op = catalog.op("logp")
    x = make_inputs(op, {"batch": 2, "vocab": 33}, "bf16", 0, "normal")
    got = gold.forward(op, logp_gold, x, (2,))[0]
    ref = torch.log_softmax(x["logits"].double(), -1).gather(-1, x["target"].clamp(0).unsqueeze(-1))
    valid = x["target"] >= 0
    assert torch.allclose(got[valid], ref.squeeze(-1)[valid], rtol=0, atol=1e-15)


def test_gold_backward_is_onehot_minus_softmax_and_zero_out_of_range(catalog):
    op = catalog.op("logp")
    x = make_inputs(op, {"batch": 4, "vocab": 17}, "fp32", 0, "normal")
    x["target"][1] = -100
    g = torch.randn(4, dtype=torch.float64)
    chunks = list(gold.backward_chunks(op, logp_gold, x, [g], (4,), chunk_bytes=1))
    assert len(chunks) == 4  # one row each
    grad = torch.cat([c["logits"] for _, c in chunks])
    p = torch.softmax(x["logits"].double(), -1)
    onehot = torch.nn.functional.one_hot(x["target"].clamp(0, 16), 17).double()
    want = g[:, None] * (onehot - p)
    want[(x["target"] < 0) | (x["target"] >= 17)] = 0  # row 1, and any ignored row drawn
    assert torch.allclose(grad, want, atol=1e-15)
    assert torch.equal(grad[1], torch.zeros(17, dtype=torch.float64))


def test_analytic_gold_backward_equals_autograd_of_the_gold(catalog):

    op = catalog.op("logp")
    for dist in ("normal", "large", "masked", "lm"):
        x = make_inputs(op, {"batch": 6, "vocab": 300}, "bf16", 1, dist)
        x["target"][:3] = torch.tensor([-100, 300, 5])
        g = [torch.randn(6, dtype=torch.float64)]
        auto = list(gold.backward_chunks(op, logp_gold, x, g, (6,)))
        fast = list(gold.backward_chunks(op, logp_gold, x, g, (6,), gold_backward))
        a = torch.cat([c["logits"] for _, c in auto])
        f = torch.cat([c["logits"] for _, c in fast])
        assert torch.allclose(a, f, rtol=1e-12, atol=1e-12), (dist, float((a - f).abs().max()))
        assert torch.equal(f[0], torch.zeros(300, dtype=torch.float64))


def test_gold_device_is_a_parameter(catalog):
    """One code path: the device the float64 arithmetic runs on is an argument. The CPU
    runs it here; the CUDA path is the same code with device='cuda' (GPU hosts only)."""
    op = catalog.op("logp")
    x = make_inputs(op, {"batch": 3, "vocab": 40}, "fp32", 0, "normal")
    here = gold.forward(op, logp_gold, x, (3,), device="cpu")[0]
    assert here.device.type == "cpu" and here.dtype == torch.float64
    assert gold.gold_device("cpu").type == "cpu"
    assert gold.gold_device("npu").type == "cpu"  # no usable float64 on the NPU
    if not torch.cuda.is_available():
        pytest.skip("CUDA gold path needs a GPU: torch.cuda.is_available() is False here")
    on_gpu = gold.forward(op, logp_gold, x, (3,), device="cuda")[0]
    assert on_gpu.device.type == "cpu" and torch.equal(on_gpu, here)
