"""The CPU native library (via kernelcheck.candidates.native.cpu) against a float64 reference."""

from __future__ import annotations

import ctypes
import math
import platform
from pathlib import Path

import native_ref as R
import pytest
import torch
from native_build import cmake_build

from kernelcheck.candidates.native import cpu, library

pytestmark = pytest.mark.usefixtures("cpu_library_dir")

VOCABS = (1, 257, 4097, 10000)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _logits(rows, vocab, dtype, seed=0, scale=3.0, offset=0.0):
    x = torch.randn(rows, vocab, generator=_gen(seed), dtype=torch.float64) * scale + offset
    return x.to(dtype)


def _assert_close_fwd(out, ref):
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=2e-5)


@pytest.fixture(autouse=True)
def _restore_threads():
    yield
    cpu.set_num_threads(0)
    cpu.set_isa(None)


X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
# vocab sizes that leave every remainder of a lane group, of 8 and of a 2048-column chunk
# (1, 3, 7, 15 ... 65: partial groups; 2047-2049: chunk edges), and the Qwen3 vocab
ODD_VOCABS = (1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 1000, 2047, 2048, 2049, 4097, 151936)


def _builds_here() -> list[str]:
    """The builds of the library that can run on this CPU, portable first."""
    return [name for name in cpu.ISAS if cpu.why_not(name) is None]


def _special_logits(rows: int, vocab: int, dtype, seed: int) -> torch.Tensor:
    """Random rows plus the values where two instruction sequences could part: -inf runs, a
    NaN, an all -inf row, the dtype's largest value, rows offset far from zero, equal rows,
    and subnormal-producing gaps."""
    x = _logits(rows, vocab, dtype, seed=seed, scale=5.0)
    big = torch.finfo(dtype).max
    x[1, ::7] = float("-inf")
    x[2, vocab // 2] = float("nan")
    if vocab > 2037:  # NaNs of both signs in lane 5, one in the first chunk's last group
        x[2, 5] = float("nan")  # (columns 2032-2047): which one the row max keeps is max's
        x[2, 2037] = -x[2, 5]  # operand order; every NaN result is the canonical NaN
    x[3] = float("-inf")
    x[4, 0] = big
    x[5] += 6e4 if dtype == torch.float16 else 1e4
    x[6] = 1.0
    x[7, 1:] = -90.0  # exp(-90) is under fp32's smallest normal
    return x


def _bits_per_view(vocab: int, dtype) -> dict:
    """Output and gradient bits of the build in use, for the special logits of ``vocab`` as
    contiguous, misaligned and strided rows."""
    rows = 11 if vocab > 20000 else 37
    if vocab > 8:
        x = _special_logits(rows, vocab, dtype, seed=vocab)
    else:
        x = _logits(rows, vocab, dtype)
    t = R.make_targets(rows, vocab, _gen(vocab))
    g = torch.randn(rows, generator=_gen(2))
    strided = torch.empty(rows, vocab + 5, dtype=dtype)[:, 2 : 2 + vocab]
    strided.copy_(x)
    views = {"contiguous": x, "misaligned": R.misaligned_copy(x, 3), "strided": strided}
    got = {}
    for name, v in views.items():
        xr = v.detach().requires_grad_(True)  # same storage: the misalignment stays
        out = cpu.logp(xr, t)
        (grad,) = torch.autograd.grad(out, xr, g)
        got[name] = (R.bits(out), R.bits(grad))
    return got


def _assert_same_bits(want: dict, got: dict, what) -> None:
    for name in want:
        assert torch.equal(want[name][0], got[name][0]), (*what, name, "forward")
        assert torch.equal(want[name][1], got[name][1]), (*what, name, "backward")


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
def test_every_build_gives_the_portable_bits(dtype):
    """The AVX2 and AVX-512 builds (where this CPU runs them) are the portable one with 8 or 16
    lanes per instruction: every output and gradient bit the same, for every vocab remainder
    (partial lane groups and chunks), the Qwen3 vocab, special values (NaN, -inf, the dtype's
    max, subnormal gaps), strided and misaligned rows. This is what lets the CPU pick the build,
    and what an ARM machine (portable only) gives."""
    builds = _builds_here()
    assert builds[0] == "portable"
    if len(builds) == 1:
        pytest.skip("only the portable build runs here: nothing to compare it with")
    for vocab in ODD_VOCABS:
        cpu.set_isa("portable")
        want = _bits_per_view(vocab, dtype)
        for isa in builds[1:]:
            cpu.set_isa(isa)
            assert cpu.isa() == isa
            _assert_same_bits(want, _bits_per_view(vocab, dtype), (isa, vocab))


def _tie_patterns() -> torch.Tensor:
    """fp32 values with every upper half of the bits and low halves at the rounding edges of
    bf16 (bit 15 and below) and fp16 (bit 12 and below: ties, one off either side)."""
    upper = torch.arange(1 << 16, dtype=torch.int64) << 16
    lower = torch.tensor([0, 1, 0x0FFF, 0x1000, 0x1001, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
    bits = (upper[:, None] | lower[None, :]).flatten()
    return (bits - (bits >> 31 << 32)).to(torch.int32).view(torch.float32)  # as signed int32


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
def test_every_build_converts_16_bit_floats_alike(dtype):
    """Rounding to bf16/fp16 and decoding them, the same in every build: rows [0, 0] have p =
    1/2 exactly, so the gradient is +-g/2 exactly and the kernel's own rounding of g/2 is what
    comes out, for g/2 at every tie, overflow, subnormal and NaN pattern; rows [h, 0] decode
    every 16-bit pattern h (NaN and inf included; 8 columns: the x86 builds' vector decode)
    into the output, which must be the fp32 kernel's on torch's decoding of h."""
    builds = _builds_here()
    half_g = _tie_patterns()
    x = torch.zeros(half_g.numel(), 2, dtype=dtype)
    t = torch.zeros(half_g.numel(), dtype=torch.int64)
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    xh = torch.zeros(every.numel(), 8, dtype=dtype)
    xh[:, 0] = every
    got = {}
    for isa in builds:
        cpu.set_isa(isa)
        xr = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(cpu.logp(xr, t), xr, half_g * 2)
        th = t[: xh.shape[0]]
        got[isa] = (R.bits(grad), R.bits(cpu.logp(xh, th)))
        assert torch.equal(got[isa][1], R.bits(cpu.logp(xh.float(), th))), (isa, "decoding")
    for isa in builds[1:]:
        assert torch.equal(got["portable"][0], got[isa][0]), (isa, "rounding")
        assert torch.equal(got["portable"][1], got[isa][1]), (isa, "decoding")
    # where 2g does not overflow, the rounding is torch's (round to nearest even)
    finite = (half_g.abs() < 1e38) & ~half_g.isnan()
    want = half_g[finite].to(dtype)
    assert torch.equal(R.bits(got["portable"][0][finite, 0]), R.bits(want))


def test_isa_choice(monkeypatch):
    """The fastest build this CPU runs is the default; an unknown name is refused; the portable
    build always runs; one the CPU or the build lacks is refused, saying which."""
    monkeypatch.delenv(cpu.ISA_ENV, raising=False)
    monkeypatch.setattr(cpu, "_env_applied", False)
    cpu.set_isa(None)
    default = cpu.isa()
    assert default == _builds_here()[-1]
    for name in ("portable", default):
        cpu.set_isa(name)
        assert cpu.isa() == name
    cpu.set_isa(None)
    assert cpu.isa() == default
    with pytest.raises(ValueError):
        cpu.set_isa("sse2")
    for name in set(cpu.ISAS) - set(_builds_here()):
        with pytest.raises(RuntimeError, match=f"^{name} not available: this (CPU|library)"):
            cpu.set_isa(name)
        assert cpu.isa() == default


def test_isa_from_the_environment(monkeypatch):
    """KERNELCHECK_CPU_ISA picks the build at the first call; a bad value makes the
    candidate unavailable with the reason, at every probe, instead of failing its calls;
    an explicit set_isa wins over it."""
    monkeypatch.setattr(cpu, "_env_applied", False)
    monkeypatch.setenv(cpu.ISA_ENV, "portable")
    assert cpu.probe("cpu") is None and cpu.isa() == "portable"
    assert cpu.IMPLEMENTATION == "native:cpu-portable"
    assert cpu.isa_note() == "KERNELCHECK_CPU_ISA=portable"
    monkeypatch.setattr(cpu, "_env_applied", False)
    monkeypatch.setenv(cpu.ISA_ENV, "sse2")
    for _ in range(2):  # not only the first time
        reason = cpu.probe("cpu")
        assert reason.startswith("KERNELCHECK_CPU_ISA: unknown instruction set 'sse2'")
    assert cpu.IMPLEMENTATION == "native:cpu"  # no exception where the loader reads it
    lacking = [name for name in cpu.ISAS if name not in _builds_here()]
    if lacking:  # a build this CPU (or this library) cannot run: one line that says why
        monkeypatch.setattr(cpu, "_env_applied", False)
        name = lacking[0]
        monkeypatch.setenv(cpu.ISA_ENV, name)
        reason = cpu.probe("cpu")
        assert reason == f"KERNELCHECK_CPU_ISA: {name} not available: {cpu.why_not(name)}"
    cpu.set_isa("portable")  # an explicit choice
    assert cpu.probe("cpu") is None and cpu.isa() == "portable"


def test_the_build_is_chosen_by_asking_the_cpu(monkeypatch):
    """Which build runs, and whether the library can run at all, comes from the CPU itself
    (cpuid, in the library), never from /proc/cpuinfo: a /proc/cpuinfo that lists no AVX2
    (as a container may show another machine's) changes nothing."""
    import pathlib

    real = pathlib.Path.read_text

    def fake(path, *args, **kwargs):
        if str(path) == "/proc/cpuinfo":
            return "processor\t: 0\nflags\t\t: fpu sse sse2\n"
        return real(path, *args, **kwargs)

    cpu.set_isa(None)
    best = cpu.isa()
    monkeypatch.setattr(pathlib.Path, "read_text", fake)
    st = library.library_status("cpu")
    assert st["status"] == "available", st["reason"]
    cpu.set_isa(None)
    assert cpu.isa() == best
    if X86:
        lib = library.load("cpu")
        assert (cpu.why_not("avx2") is None) == (lib.kc_cpu_isa_support(1) == 0)


@pytest.fixture(scope="module")
def portable_only_dir(tmp_path_factory) -> Path:
    """libkc_logp_cpu built as ARM gets it: the portable build only (KC_CPU_X86_BUILDS=OFF)."""
    build = tmp_path_factory.mktemp("kc_cpu_portable_only")
    cmake_build(build, "kc_logp_cpu", "-DKC_BUILD_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release",
                "-DKC_CPU_X86_BUILDS=OFF")  # fmt: skip
    return build


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="x86 only: elsewhere every build is the portable one")
def test_the_portable_only_library_gives_the_native_bits(portable_only_dir, monkeypatch):
    """The library as an ARM machine builds it (no ISA flags anywhere, no x86 build inside)
    gives the bits of this machine's fastest build, in every dtype, forward and backward, at
    odd vocab sizes and the Qwen3 vocab; it says why it has no AVX2 build."""
    cpu.set_isa(None)
    native = cpu.isa()
    vocabs = (1, 17, 2049, 151936)
    want = {(v, d): _bits_per_view(v, d) for v in vocabs for d in R.DTYPES}
    monkeypatch.setenv(library.ENV_DIR, str(portable_only_dir))
    monkeypatch.delenv(cpu.ISA_ENV, raising=False)
    assert Path(library.library_status("cpu")["path"]).parent == portable_only_dir
    assert cpu.isa() == "portable" and cpu.isa_note().startswith("avx2: this library has no")
    with pytest.raises(RuntimeError, match="avx2 not available: this library has no avx2 build"):
        cpu.set_isa("avx2")
    for (vocab, dtype), bits in want.items():
        _assert_same_bits(bits, _bits_per_view(vocab, dtype), (native, vocab, dtype))


def test_probe_and_status():
    assert cpu.probe("cpu") is None
    assert cpu.probe("cuda") == "needs device cpu"
    st = library.library_status("cpu")
    assert st["status"] == "available" and st["path"].endswith(library.library_filename("cpu"))


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", VOCABS)
def test_forward_matches_float64(dtype, vocab):
    x = _logits(9, vocab, dtype, seed=vocab)
    t = R.make_targets(9, vocab, _gen(1))
    out = cpu.logp(x, t)
    _assert_close_fwd(out, R.ref_logp(x, t))
    # Out-of-range targets give exactly +0.0.
    assert R.bits(out)[1].item() == 0 and R.bits(out)[3].item() == 0


def test_a_converged_rows_tail_after_the_lane_max_counts():
    """One entry 17 nats above a flat tail (p = 1 - 7e-4, a converged policy's row): each
    tail term is below half an ulp of a lane's sum of ~1, and a lane that added them after
    its max dropped them all (4.3e-6 off; every build). Kept by compensated addition,
    the error is the fp32 rounding of the result."""
    vocab = 16385
    x = torch.randn(2, vocab, generator=_gen(3)).mul_(0.05)
    x[:, 5 * 16 + 3] = 17.0  # lane 3 of the first chunk: ~120 of its terms follow the max
    t = torch.tensor([5 * 16 + 3, 7])
    err = (cpu.logp(x, t).double() - R.ref_logp(x, t)).abs()
    assert err.max().item() < 1e-6, err


def test_out_of_range_targets_are_positive_zero():
    x = _logits(6, 100, torch.float32)
    t = torch.tensor([-100, -1, 100, 101, 2**40, -(2**40)])
    out = cpu.logp(x, t)
    assert torch.equal(R.bits(out), torch.zeros(6, dtype=torch.int32))


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
def test_zero_rows(dtype):
    for shape in ((0, 17), (2, 0, 17)):
        x = torch.zeros(shape, dtype=dtype, requires_grad=True)
        t = torch.zeros(shape[:-1], dtype=torch.int64)
        out = cpu.logp(x, t)
        assert out.shape == shape[:-1] and out.dtype == torch.float32
        out.sum().backward()
        assert x.grad.shape == shape


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", (257, 4097))
def test_masked_minus_inf(dtype, vocab):
    x = _logits(5, vocab, dtype, seed=3)
    mask = torch.rand(5, vocab, generator=_gen(4)) < 0.6
    mask[:, 0] = False  # never a fully masked row
    mask[2, 1:] = True  # a row with a single live entry
    x = x.masked_fill(mask, float("-inf"))
    t = torch.tensor([0, 0, 0, 1, 5])
    t[4] = int(torch.nonzero(mask[4])[0])  # a masked target -> -inf
    out = cpu.logp(x, t)
    ref = R.ref_logp(x, t)
    assert out[4].item() == float("-inf")
    assert out[2].item() == 0.0
    _assert_close_fwd(out[:4], ref[:4])


@pytest.mark.parametrize(
    "dtype,offset",
    [
        (torch.float32, 1e4),
        (torch.float32, -1e4),
        (torch.bfloat16, 1e4),
        (torch.bfloat16, -1e4),
        (torch.float16, 65000.0),
        (torch.float16, -65000.0),
    ],
    ids=str,
)
def test_large_offsets(dtype, offset):
    x = _logits(4, 4097, dtype, seed=5, scale=4.0, offset=offset)
    t = R.make_targets(4, 4097, _gen(6), bad=False)
    out = cpu.logp(x, t)
    assert torch.isfinite(out).all()
    _assert_close_fwd(out, R.ref_logp(x, t))
    # Constant rows: exactly uniform.
    c = torch.full((2, 1000), offset, dtype=dtype)
    torch.testing.assert_close(
        cpu.logp(c, torch.tensor([0, 999])).double(),
        torch.full((2,), -math.log(1000.0), dtype=torch.float64),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
@pytest.mark.parametrize("vocab", VOCABS)
def test_backward_matches_float64(dtype, vocab):
    x = _logits(6, vocab, dtype, seed=vocab + 1).requires_grad_(True)
    t = R.make_targets(6, vocab, _gen(7))
    g = torch.randn(6, generator=_gen(8))
    (grad,) = torch.autograd.grad(cpu.logp(x, t), x, g)
    assert grad.dtype == dtype and grad.shape == x.shape
    ref = R.ref_grad(x, t, g)
    # One rounding to dtype plus fp32 noise.
    eps = R.ulp_tol(dtype)
    torch.testing.assert_close(grad.double(), ref, rtol=2 * eps, atol=1e-7)
    # Out-of-range rows: all +0.0.
    zero_rows = R.bits(grad)[[1, 3]]
    assert torch.count_nonzero(zero_rows).item() == 0


def test_backward_16bit_is_rounded_fp32_gradient():
    # On exactly representable inputs the 16-bit gradient is the fp32 kernel gradient rounded
    # to nearest even (as torch's .to() does).
    x = _logits(3, 4097, torch.float32, seed=9)
    t = torch.tensor([5, 6, 7])
    g = torch.randn(3, generator=_gen(10))
    for dtype in (torch.bfloat16, torch.float16):
        xd = x.to(dtype)
        xf = xd.float().requires_grad_(True)
        (gf,) = torch.autograd.grad(cpu.logp(xf, t), xf, g)
        xq = xd.clone().requires_grad_(True)
        (gq,) = torch.autograd.grad(cpu.logp(xq, t), xq, g)
        assert torch.equal(R.bits(gq), R.bits(gf.to(dtype)))


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
def test_bitwise_invariance_threads_batch_alignment(dtype):
    rows, vocab = 29, 20011  # rows * vocab large enough that 7 threads really run
    x = _logits(rows, vocab, dtype, seed=11)
    t = R.make_targets(rows, vocab, _gen(12))
    g = torch.randn(rows, generator=_gen(13))
    cpu.set_num_threads(1)
    base = cpu.logp(x, t)
    xb = x.clone().requires_grad_(True)
    (gbase,) = torch.autograd.grad(cpu.logp(xb, t), xb, g)
    for n in (2, 3, 7):
        cpu.set_num_threads(n)
        assert torch.equal(R.bits(cpu.logp(x, t)), R.bits(base)), f"threads={n}"
        xb = x.clone().requires_grad_(True)
        (gn,) = torch.autograd.grad(cpu.logp(xb, t), xb, g)
        assert torch.equal(R.bits(gn), R.bits(gbase)), f"backward threads={n}"
    cpu.set_num_threads(0)
    # Batch size and position: every row alone, and slices at different offsets.
    for i in (0, 5, 28):
        assert torch.equal(R.bits(cpu.logp(x[i : i + 1], t[i : i + 1])), R.bits(base[i : i + 1]))
    for a, b in ((3, 17), (1, 29), (10, 12)):
        assert torch.equal(R.bits(cpu.logp(x[a:b], t[a:b])), R.bits(base[a:b]))
    # Misaligned row starts (offset views into a larger buffer).
    for off in (1, 2, 3, 5, 7):
        xm = R.misaligned_copy(x, off)
        assert torch.equal(R.bits(cpu.logp(xm, t)), R.bits(base)), f"offset={off}"
        xm.requires_grad_(True)
        (gm,) = torch.autograd.grad(cpu.logp(xm, t), xm, g)
        assert torch.equal(R.bits(gm), R.bits(gbase)), f"backward offset={off}"


@pytest.mark.parametrize("dtype", R.DTYPES, ids=str)
def test_strided_rows(dtype):
    rows, vocab = 7, 1031
    big = _logits(rows, vocab + 45, dtype, seed=14)
    x = big[:, 13 : 13 + vocab]  # row stride vocab + 45, odd start
    assert x.stride() == (vocab + 45, 1)
    t = R.make_targets(rows, vocab, _gen(15))
    out = cpu.logp(x, t)
    assert torch.equal(R.bits(out), R.bits(cpu.logp(x.contiguous(), t)))
    _assert_close_fwd(out, R.ref_logp(x, t))
    # Lead dims that collapse to one stride, and ones that do not (copied).
    big3 = _logits(12, vocab + 3, dtype, seed=16).view(3, 4, vocab + 3)
    x3 = big3[..., :vocab]
    t3 = R.make_targets(12, vocab, _gen(17)).view(3, 4)
    out3 = cpu.logp(x3, t3)
    assert out3.shape == (3, 4)
    assert torch.equal(R.bits(out3), R.bits(cpu.logp(x3.contiguous(), t3)))
    x4 = big3[:, ::2, :vocab]  # non-collapsible lead dims
    out4 = cpu.logp(x4, t3[:, ::2])
    assert torch.equal(R.bits(out4), R.bits(out3[:, ::2]))
    # Gradient through a strided view lands in the right places.
    xg = big.clone().requires_grad_(True)
    out = cpu.logp(xg[:, 13 : 13 + vocab], t)
    (gg,) = torch.autograd.grad(out.sum(), xg)
    assert torch.count_nonzero(gg[:, :13]) == 0 and torch.count_nonzero(gg[:, 13 + vocab :]) == 0


def test_wrapper_rejects_bad_inputs():
    x = torch.randn(3, 10)
    t = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(TypeError):
        cpu.logp(x.double(), t)
    with pytest.raises(TypeError):
        cpu.logp(x, t.int())
    with pytest.raises(ValueError):
        cpu.logp(x, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError):
        cpu.logp(torch.zeros(3, 0), t)
    with pytest.raises(ValueError):
        cpu.logp(torch.zeros(()), torch.zeros((), dtype=torch.int64)[None][0:0])
    with pytest.raises(TypeError):
        cpu.logp(x.numpy(), t)
    with pytest.raises(ValueError):
        cpu.set_num_threads(-1)


def test_c_abi_argument_checks():
    lib = library.load("cpu")
    x = torch.randn(2, 8)
    t = torch.zeros(2, dtype=torch.int64)
    out = torch.empty(2)
    p, tp, op = x.data_ptr(), t.data_ptr(), out.data_ptr()
    f = lib.kc_logp_forward
    assert lib.kc_abi_version() == 1 and lib.kc_backend_name() == b"cpu"
    assert f(0, p, tp, op, 2, 8, 8, None) == 0
    assert f(9, p, tp, op, 2, 8, 8, None) == 1  # KC_ERR_DTYPE
    assert f(0, p, tp, op, 2, 0, 8, None) == 2  # vocab <= 0
    assert f(0, p, tp, op, 2, 8, 7, None) == 2  # row_stride < vocab
    assert f(0, p, tp, op, -1, 8, 8, None) == 2  # rows < 0
    assert f(0, None, tp, op, 2, 8, 8, None) == 3  # KC_ERR_NULL
    assert f(0, None, None, None, 0, 8, 8, None) == 0  # rows == 0: nothing to do
    g = torch.ones(2)
    gl = torch.empty(2, 8)
    b = lib.kc_logp_backward
    assert b(0, p, tp, g.data_ptr(), gl.data_ptr(), 2, 8, 8, None) == 0
    assert b(0, p, tp, None, gl.data_ptr(), 2, 8, 8, None) == 3
    assert b(2, p, tp, g.data_ptr(), gl.data_ptr(), 2, 8, 9, None) == 0
    assert lib.kc_set_num_threads(-3) == 2
    for s in range(6):
        assert isinstance(ctypes.string_at(lib.kc_status_string(s)), bytes)


def test_library_status_missing_reports_where_it_looked(monkeypatch, tmp_path):
    from kernelcheck import native_files

    monkeypatch.setattr(native_files, "search_dirs", lambda: [tmp_path / "nowhere"])
    monkeypatch.setattr(native_files, "_REPO_ROOT", tmp_path)
    st = library.library_status("cpu")
    assert st["status"] == "missing" and st["path"] is None
    assert "not built" in st["reason"] and str(tmp_path / "nowhere") in st["reason"]
