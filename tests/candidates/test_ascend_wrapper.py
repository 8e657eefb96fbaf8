"""Tests of the Ascend candidate's Python wrapper (kernelcheck/candidates/ascend.py) on the CPU.

These tests do NOT test the Ascend C kernel. Where a forward result is needed, the kernel entry
``_kernel_forward`` is replaced by ``cpu_standin_fused_logp_forward``, a plain fp32 torch formula
on the CPU, and ``_DEVICE_TYPE`` is set to "cpu". What is tested is the wrapper's own logic: input
checks, lead shapes, the 2-D contiguous view handed to the kernel, zero rows, the autograd bridge
(its backward is real wrapper code), the record of which implementation ran, probe() reasons, and
that a torch_npu without CANN breaks nothing. The kernel itself is only tested on an NPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelcheck.candidates import ascend
from tests.conftest import HANG_S

REPO_ROOT = Path(ascend.__file__).resolve().parents[2]


def cpu_standin_fused_logp_forward(logits2d: torch.Tensor, target1d: torch.Tensor) -> torch.Tensor:
    """CPU STAND-IN for kernelcheck_ascend.fused_logp_forward -- NOT the Ascend kernel.

    Same contract as the kernel entry (2-D contiguous logits, 1-D int64 target, fp32 [N] out,
    0.0 for out-of-range targets), computed with fp32 torch ops, no float64.
    """
    assert logits2d.dim() == 2 and logits2d.is_contiguous()
    assert target1d.dim() == 1 and target1d.dtype == torch.int64
    cpu_standin_fused_logp_forward.calls.append((tuple(logits2d.shape), logits2d.is_contiguous()))
    x = logits2d.float()
    vocab = x.shape[1]
    valid = (target1d >= 0) & (target1d < vocab)
    safe = torch.where(valid, target1d, torch.zeros_like(target1d))
    row_max = x.amax(dim=1)
    selected = x.gather(1, safe.unsqueeze(1)).squeeze(1)
    log_sum = torch.log(torch.exp(x - row_max.unsqueeze(1)).sum(dim=1))
    out = (selected - row_max) - log_sum
    return torch.where(valid, out, torch.zeros_like(out))


cpu_standin_fused_logp_forward.calls = []


@pytest.fixture
def standin(monkeypatch):
    """Run the wrapper on the CPU with the stand-in in place of the kernel entry."""
    cpu_standin_fused_logp_forward.calls.clear()
    monkeypatch.setattr(ascend, "_DEVICE_TYPE", "cpu")
    monkeypatch.setattr(ascend, "_kernel_forward", cpu_standin_fused_logp_forward)
    return cpu_standin_fused_logp_forward


def reference_f64(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    vocab = logits.shape[-1]
    valid = (target >= 0) & (target < vocab)
    safe = torch.where(valid, target, torch.zeros_like(target))
    lsm = torch.log_softmax(logits.double(), dim=-1)
    picked = lsm.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, picked, torch.zeros_like(picked))


def make_inputs(lead, vocab, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(*lead, vocab, generator=gen).to(dtype)
    target = torch.randint(0, vocab, lead, generator=gen)
    return logits, target


# ---- forward through the wrapper -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_2d_matches_reference_and_is_fp32(standin, dtype):
    logits, target = make_inputs((7,), 33, dtype)
    out = ascend.logp(logits, target)
    assert out.dtype == torch.float32 and out.shape == (7,)
    torch.testing.assert_close(out.double(), reference_f64(logits, target), atol=1e-5, rtol=0)
    assert standin.calls == [((7, 33), True)]


def test_3d_lead_shape_is_restored(standin):
    logits, target = make_inputs((2, 3), 17)
    out = ascend.logp(logits, target)
    assert out.shape == (2, 3)
    assert standin.calls == [((6, 17), True)]
    torch.testing.assert_close(out.double(), reference_f64(logits, target), atol=1e-5, rtol=0)


def test_1d_logits_scalar_target(standin):
    logits, target = make_inputs((), 9)
    out = ascend.logp(logits, target)
    assert out.shape == ()
    torch.testing.assert_close(out.double(), reference_f64(logits, target), atol=1e-5, rtol=0)


@pytest.mark.parametrize("lead", [(0,), (2, 0)])
def test_zero_rows(standin, lead):
    logits = torch.randn(*lead, 5)
    target = torch.zeros(lead, dtype=torch.int64)
    out = ascend.logp(logits, target)
    assert out.shape == lead and out.dtype == torch.float32 and out.numel() == 0


def test_out_of_range_targets_give_zero(standin):
    logits, _ = make_inputs((4,), 8)
    target = torch.tensor([0, -1, 8, 100])
    out = ascend.logp(logits, target)
    assert out[1].item() == 0.0 and out[2].item() == 0.0 and out[3].item() == 0.0
    assert out[0].item() != 0.0


def test_non_contiguous_input_goes_through_the_kernel(standin):
    logits, target = make_inputs((6,), 10)
    wide = torch.randn(6, 20)
    wide[:, ::2] = logits
    sliced = wide[:, ::2]  # non-contiguous view with the same values
    assert not sliced.is_contiguous()
    out = ascend.logp(sliced, target)
    assert standin.calls == [((6, 10), True)]
    torch.testing.assert_close(out, ascend.logp(logits, target), atol=0, rtol=0)
    transposed = logits.t().contiguous().t()
    assert not transposed.is_contiguous()
    torch.testing.assert_close(ascend.logp(transposed, target), out, atol=0, rtol=0)


def test_records_the_implementation_that_ran(standin):
    logits, target = make_inputs((2,), 4)
    ascend.logp(logits, target)
    assert ascend.logp.last_implementation.startswith("replaced:")
    assert ascend.logp.last_implementation.endswith("cpu_standin_fused_logp_forward")
    assert ascend.IMPLEMENTATION == "ascend-c:kernelcheck_ascend.fused_logp_forward"


def test_kernel_contract_violation_is_an_error(monkeypatch):
    monkeypatch.setattr(ascend, "_DEVICE_TYPE", "cpu")
    monkeypatch.setattr(ascend, "_kernel_forward", lambda x, t: x.sum(dim=1).double())
    logits, target = make_inputs((3,), 4)
    with pytest.raises(RuntimeError, match="contract"):
        ascend.logp(logits, target)


# ---- rejection, no fallback ----------------------------------------------------------------


def test_rejects_unsupported_dtypes(standin):
    logits, target = make_inputs((3,), 5)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        ascend.logp(logits.double(), target)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        ascend.logp(logits.to(torch.int64), target)
    with pytest.raises(TypeError, match="int64 target"):
        ascend.logp(logits, target.to(torch.int32))
    with pytest.raises(TypeError):
        ascend.logp(logits.numpy(), target)
    assert standin.calls == []


def test_rejects_shape_mismatch(standin):
    logits, target = make_inputs((3,), 5)
    with pytest.raises(ValueError, match=r"target shape == logits.shape\[:-1\]"):
        ascend.logp(logits, target[:2])
    with pytest.raises(ValueError, match=r"target shape == logits.shape\[:-1\]"):
        ascend.logp(logits.reshape(1, 3, 5), target)
    with pytest.raises(ValueError, match="V = logits.shape"):
        ascend.logp(torch.randn(3, 0), target)
    with pytest.raises(ValueError, match="0-d"):
        ascend.logp(torch.tensor(1.0), torch.tensor(0))
    assert standin.calls == []


def test_rejects_wrong_device_with_the_real_device_type(monkeypatch):
    # _DEVICE_TYPE stays "npu": CPU tensors must be refused, never computed with PyTorch.
    called = []
    monkeypatch.setattr(ascend, "_kernel_forward", lambda *a: called.append(a))
    logits, target = make_inputs((3,), 5)
    with pytest.raises(ValueError, match="needs logits on device 'npu', got cpu"):
        ascend.logp(logits, target)
    assert called == []


def test_kernel_failure_propagates_no_fallback(monkeypatch):
    def broken(logits2d, target1d):
        raise RuntimeError("kernel launch failed")

    monkeypatch.setattr(ascend, "_DEVICE_TYPE", "cpu")
    monkeypatch.setattr(ascend, "_kernel_forward", broken)
    logits, target = make_inputs((3,), 5)
    with pytest.raises(RuntimeError, match="kernel launch failed"):
        ascend.logp(logits, target)


def test_unloadable_kernel_raises_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(ascend, "_DEVICE_TYPE", "cpu")
    monkeypatch.setattr(ascend, "_kernel_forward", None)
    monkeypatch.setattr(ascend, "_import_torch_npu", lambda: (None, "ImportError: no torch_npu"))
    logits, target = make_inputs((3,), 5)
    with pytest.raises(ascend.AscendUnavailable, match="torch_npu not importable"):
        ascend.logp(logits, target)


# ---- autograd bridge -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float32, 1e-6), (torch.bfloat16, 1e-2), (torch.float16, 1e-3)]
)
def test_backward_matches_float64_autograd(standin, dtype, atol):
    logits, target = make_inputs((3, 4), 11, dtype, seed=1)
    target[0, 1] = -1
    target[2, 3] = 11  # == V: out of range
    grad_out = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))

    x = logits.clone().requires_grad_(True)
    out = ascend.logp(x, target)
    (grad,) = torch.autograd.grad(out, x, grad_out)
    assert grad.dtype == dtype and grad.shape == logits.shape

    ref_x = logits.double().requires_grad_(True)
    (ref_grad,) = torch.autograd.grad(reference_f64(ref_x, target), ref_x, grad_out.double())
    torch.testing.assert_close(grad.double(), ref_grad, atol=atol, rtol=0)
    # Out-of-range rows: an exact +0.0 gradient row.
    for row in (grad[0, 1], grad[2, 3]):
        assert torch.equal(row, torch.zeros_like(row))
        assert not torch.signbit(row.float()).any()


def test_backward_through_non_contiguous_view(standin):
    base = torch.randn(5, 16)
    target = torch.randint(0, 8, (5,))
    x = base.clone().requires_grad_(True)
    out = ascend.logp(x[:, ::2], target)
    out.sum().backward()
    ref_x = base.double().requires_grad_(True)
    reference_f64(ref_x[:, ::2], target).sum().backward()
    torch.testing.assert_close(x.grad.double(), ref_x.grad, atol=1e-6, rtol=0)
    assert torch.equal(x.grad[:, 1::2], torch.zeros(5, 8))


def test_backward_is_row_local():
    logits = torch.randn(4, 9)
    logits[1] = logits[0]
    target = torch.tensor([3, 3, 3, 3])
    grad_out = torch.tensor([0.5, 0.5, 0.5, -2.0])
    grad = ascend._row_local_backward(logits, target, grad_out)
    assert torch.equal(grad[0], grad[1])
    alone = ascend._row_local_backward(logits[:1], target[:1], grad_out[:1])
    assert torch.equal(alone[0], grad[0])


# ---- probe and discovery -------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_probe_refuses_other_devices(device):
    assert ascend.probe(device) == f"needs device npu (asked for {device})"


def test_probe_npu_here_names_torch_npu_or_npu():
    reason = ascend.probe("npu")
    if reason is None:  # only on an Ascend host with the extension built
        pytest.skip("an NPU and the kernelcheck_ascend extension are available here")
    assert any(word in reason for word in ("torch_npu", "NPU", "CANN", "kernelcheck_ascend"))


def test_probe_reports_missing_cann(monkeypatch, tmp_path):
    monkeypatch.setattr(ascend, "_import_torch_npu", lambda: (object(), None))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "nowhere"))
    assert ascend.probe("npu") == (
        f"CANN not found: ASCEND_HOME_PATH={tmp_path / 'nowhere'} is not a directory"
    )


def test_extension_not_built_reason_lists_the_folders(monkeypatch, tmp_path):
    monkeypatch.setenv(ascend.NATIVE_DIR_ENV, str(tmp_path))
    monkeypatch.delitem(sys.modules, ascend.EXTENSION_NAME, raising=False)
    module, reason = ascend._load_extension()
    assert module is None
    assert reason.startswith("kernelcheck_ascend extension not built (looked in ")
    assert str(tmp_path) in reason


def test_extension_found_in_native_dir(monkeypatch, tmp_path):
    (tmp_path / "kernelcheck_ascend.py").write_text(
        "def fused_logp_forward(logits, target):\n    raise NotImplementedError\n"
    )
    monkeypatch.setenv(ascend.NATIVE_DIR_ENV, str(tmp_path))
    monkeypatch.delitem(sys.modules, ascend.EXTENSION_NAME, raising=False)
    module, reason = ascend._load_extension()
    try:
        assert reason is None
        assert Path(module.__file__).parent == tmp_path
    finally:
        sys.modules.pop(ascend.EXTENSION_NAME, None)


# ---- a torch_npu installed without CANN breaks nothing -------------------------------------

_FAKE_TORCH_NPU_ERROR = "libascendcl.so: cannot open shared object file"


def _fake_torch_npu(root: Path) -> Path:
    """A torch_npu that fails like one installed without CANN, registered as a torch backend."""
    pkg = root / "torch_npu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"raise ImportError({_FAKE_TORCH_NPU_ERROR!r})\n")
    dist = root / "torch_npu-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return root


def _run(code: str, fake_root: Path, autoload: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(fake_root), str(REPO_ROOT)])
    if autoload is not None:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = autoload
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_torch_npu_without_cann_breaks_nothing(tmp_path):
    fake_root = _fake_torch_npu(tmp_path / "site")
    result = _run(
        """
        import json, sys
        from kernelcheck.candidates import ascend
        import torch
        x = torch.ones(2) + 1
        print(json.dumps({
            "probe": ascend.probe("npu"),
            "torch_ok": x.tolist() == [2.0, 2.0],
            "torch_npu_loaded": "torch_npu" in sys.modules,
        }))
        """,
        fake_root,
        autoload="0",  # as the kernelcheck command and its workers start
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["torch_ok"] is True
    assert report["torch_npu_loaded"] is False
    assert report["probe"].startswith("torch_npu not importable: ImportError: ")
    assert _FAKE_TORCH_NPU_ERROR in report["probe"]


def test_fake_torch_npu_is_a_faithful_simulation(tmp_path):
    # Negative control: with torch's backend autoload on, this fake torch_npu does break
    # `import torch`, which is what the command's own default avoids (tests/test_cli.py).
    fake_root = _fake_torch_npu(tmp_path / "site")
    result = _run("import torch\n", fake_root, autoload="1")
    assert result.returncode != 0
    assert _FAKE_TORCH_NPU_ERROR in result.stderr


def test_importing_the_candidate_does_not_import_torch_npu(tmp_path):
    fake_root = _fake_torch_npu(tmp_path / "site")
    result = _run(
        """
        import sys
        import kernelcheck.candidates.ascend
        assert "torch_npu" not in sys.modules
        assert "kernelcheck_ascend" not in sys.modules
        """,
        fake_root,
        autoload="0",  # torch itself must not load it: only kernelcheck could
    )
    assert result.returncode == 0, result.stderr
