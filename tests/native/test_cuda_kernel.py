"""The CUDA native library against a float64 reference; needs a CUDA GPU (skipped elsewhere).

The CUDA library is looked up like any other (KERNELCHECK_NATIVE_DIR, installed package,
sys.path, <repo>/build/**); the skip reason is the candidate's probe string.
"""

from __future__ import annotations

import native_ref as R
import pytest
import torch

from kernelcheck.candidates.native import cuda

_REASON = cuda.probe("cuda")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

DEV = "cuda"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _logits(rows, vocab, dtype, seed=0, scale=3.0, offset=0.0):
    x = torch.randn(rows, vocab, generator=_gen(seed), dtype=torch.float64) * scale + offset
    return x.to(dtype).to(DEV)


def test_probe():
    assert cuda.probe("cpu") == "needs device cuda"
    assert cuda.probe("cuda") is None


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", (1, 127, 257, 4097, 10000, 151936))
def test_forward_matches_float64(dtype, vocab):
    rows = 4 if vocab > 20000 else 9
    x = _logits(rows, vocab, dtype, seed=vocab)
    t = R.make_targets(rows, vocab, _gen(1)).to(DEV)
    out = cuda.logp(x, t)
    assert out.dtype == torch.float32 and out.device.type == "cuda"
    torch.testing.assert_close(out.double(), R.ref_logp(x, t), rtol=1e-5, atol=3e-5)
    assert R.bits(out)[1].item() == 0 and R.bits(out)[3].item() == 0


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
def test_masked_and_large_offsets(dtype):
    offset = 65000.0 if dtype == torch.float16 else 1e4
    x = _logits(6, 4097, dtype, seed=2, scale=4.0, offset=offset)
    mask = torch.rand(6, 4097, generator=_gen(3)).to(DEV) < 0.5
    mask[:, 0] = False
    x = x.masked_fill(mask, float("-inf"))
    t = torch.zeros(6, dtype=torch.int64, device=DEV)
    t[1] = 4097
    out = cuda.logp(x, t)
    torch.testing.assert_close(out.double(), R.ref_logp(x, t), rtol=1e-5, atol=3e-5)
    assert torch.isfinite(out).all()


def test_zero_rows():
    x = torch.zeros(0, 33, device=DEV, requires_grad=True)
    out = cuda.logp(x, torch.zeros(0, dtype=torch.int64, device=DEV))
    assert out.shape == (0,)
    out.sum().backward()
    assert x.grad.shape == (0, 33)


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", (1, 257, 10000))
def test_backward_matches_float64(dtype, vocab):
    x = _logits(6, vocab, dtype, seed=vocab + 1).requires_grad_(True)
    t = R.make_targets(6, vocab, _gen(7)).to(DEV)
    g = torch.randn(6, generator=_gen(8)).to(DEV)
    (grad,) = torch.autograd.grad(cuda.logp(x, t), x, g)
    assert grad.dtype == dtype
    eps = R.ulp_tol(dtype)
    torch.testing.assert_close(grad.double(), R.ref_grad(x, t, g), rtol=2 * eps, atol=1e-7)
    assert torch.count_nonzero(R.bits(grad)[[1, 3]]).item() == 0


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", (257, 4097, 151936))
def test_bitwise_invariance(dtype, vocab):
    rows = 64
    x = _logits(rows, vocab, dtype, seed=11)
    t = R.make_targets(rows, vocab, _gen(12)).to(DEV)
    base = cuda.logp(x, t)
    for i in (0, 17, rows - 1):
        assert torch.equal(R.bits(cuda.logp(x[i : i + 1], t[i : i + 1])), R.bits(base[i : i + 1]))
    for a, b in ((3, 40), (1, rows)):
        assert torch.equal(R.bits(cuda.logp(x[a:b], t[a:b])), R.bits(base[a:b]))
    big = torch.cat([x] * 4)
    assert torch.equal(R.bits(cuda.logp(big, torch.cat([t] * 4))), R.bits(base.repeat(4)))
    for off in (1, 2, 3, 5, 8):  # misaligned row starts: scalar-load path, same bits
        assert torch.equal(R.bits(cuda.logp(R.misaligned_copy(x, off), t)), R.bits(base))
    strided = torch.empty(rows, vocab + 9, dtype=dtype, device=DEV)[:, 3 : 3 + vocab]
    strided.copy_(x)
    assert torch.equal(R.bits(cuda.logp(strided, t)), R.bits(base))
    for _ in range(3):  # run-to-run
        assert torch.equal(R.bits(cuda.logp(x, t)), R.bits(base))


def test_rows_beyond_grid_cap():
    # More rows than the 65535-block grid: rows are strided over blocks, same bits.
    x = _logits(64, 257, torch.bfloat16, seed=21)
    t = R.make_targets(64, 257, _gen(22)).to(DEV)
    base = cuda.logp(x, t)
    reps = 65535 // 64 + 20
    out = cuda.logp(x.repeat(reps, 1), t.repeat(reps))
    assert torch.equal(R.bits(out), R.bits(base.repeat(reps)))


def test_rejects_cpu_tensors():
    with pytest.raises(ValueError):
        cuda.logp(torch.randn(2, 5), torch.zeros(2, dtype=torch.int64))
