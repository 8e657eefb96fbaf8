"""Ascend NPU candidate for ``logp``: the Ascend C kernel ``kernelcheck_ascend.fused_logp_forward``.

``logp(logits, target)`` computes ``logits[..., target] - logsumexp(logits, -1)`` in fp32 and
returns fp32. The forward pass is the Ascend C kernel in ``kernels_ascend/fused_logp.asc``; the
backward pass is row-local fp32 torch ops on the NPU, ``g * (onehot(target) - softmax(logits))``
(zero for rows whose target is outside ``[0, V)``), cast to the logits dtype. It is not an
Ascend C kernel.

There is never a PyTorch fallback: input this candidate cannot take (not on the NPU, a dtype other
than float32/bfloat16/float16, a non-int64 target, mismatched shapes) raises ``TypeError`` or
``ValueError``, and a missing kernel raises ``AscendUnavailable`` with the reason ``probe`` gives.

torch_npu is imported lazily, only when the NPU is asked for. The ``kernelcheck`` command
and its workers start with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` unless the user set it
(``kernelcheck/environment.py``), so that a torch_npu installed without CANN cannot break
their ``import torch``; importing this module sets nothing.

The kernel entry is the module-level ``_kernel_forward``, resolved by ``_load_kernel()``; tests
replace it (and ``_DEVICE_TYPE``) with a clearly named CPU stand-in to test this wrapper's own
logic. ``logp.last_implementation`` records which entry actually ran.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from kernelcheck.candidates import devices
from kernelcheck.native_files import search_dirs

IMPLEMENTATION = "ascend-c:kernelcheck_ascend.fused_logp_forward"
EXTENSION_NAME = "kernelcheck_ascend"
NATIVE_DIR_ENV = "KERNELCHECK_NATIVE_DIR"
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# The device type the kernel runs on. Tests of the wrapper set it to "cpu" together with a CPU
# stand-in for _kernel_forward; nothing else should change it.
_DEVICE_TYPE = "npu"

KernelForward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# The one indirection to the kernel: None until _load_kernel() resolves it.
_kernel_forward: KernelForward | None = None
# The function _load_kernel() found in the extension, to tell it apart from a replacement.
_loaded_kernel: KernelForward | None = None


class AscendUnavailable(RuntimeError):
    """The Ascend kernel cannot run here; the message is the reason ``probe`` gives."""


# ---- discovery ------------------------------------------------------------------------------


def _import_torch_npu() -> tuple[ModuleType | None, str | None]:
    """torch_npu through the one lazy, autoload-off import in :mod:`devices`."""
    error = devices.import_torch_npu()
    if error is not None:
        return None, error.removeprefix("torch_npu not importable: ")
    return sys.modules["torch_npu"], None


def _cann_reason() -> str | None:
    return devices.cann_problem()


def _npu_count(torch_npu: ModuleType) -> tuple[int, str | None]:
    try:
        npu = getattr(torch, "npu", None) or torch_npu.npu
        return int(npu.device_count()), None
    except Exception as exc:  # noqa: BLE001 - a driver error means no usable NPU
        return 0, f"{type(exc).__name__}: {exc}"


def native_dirs() -> list[Path]:
    """The native libraries' folders: $KERNELCHECK_NATIVE_DIR, kernelcheck/_native, sys.path."""
    return search_dirs()


def library_status() -> dict:
    """The ``native_libraries.ascend`` entry of ``kernelcheck doctor`` (imports nothing built)."""
    dirs = [str(d) for d in native_dirs()]
    spec = importlib.machinery.PathFinder.find_spec(EXTENSION_NAME, dirs)
    if spec is None or not spec.origin:
        # name the folders that exist (the build's output), not every sys.path entry
        shown = [d for d in dirs if Path(d).is_dir() and Path(d).name == "_native"] or dirs[:1]
        return {
            "status": "missing",
            "path": None,
            "reason": f"{EXTENSION_NAME} not built (needs CANN and bisheng; "
            f"looked in {', '.join(shown)})",
        }
    device = devices.status("npu")
    if not device.available:
        return {"status": "built", "path": spec.origin, "reason": device.reason}
    return {"status": "available", "path": spec.origin, "reason": None}


def _load_extension() -> tuple[ModuleType | None, str | None]:
    """Import kernelcheck_ascend from native_dirs() (then the normal sys.path)."""
    loaded = sys.modules.get(EXTENSION_NAME)
    if loaded is not None:
        return loaded, None
    dirs = native_dirs()
    looked = ", ".join(str(d) for d in dirs)
    spec = importlib.machinery.PathFinder.find_spec(EXTENSION_NAME, [str(d) for d in dirs])
    if spec is None:
        spec = importlib.util.find_spec(EXTENSION_NAME)
    if spec is None or spec.loader is None:
        return None, f"{EXTENSION_NAME} extension not built (looked in {looked} and sys.path)"
    try:
        module = importlib.util.module_from_spec(spec)
        sys.modules[EXTENSION_NAME] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - e.g. an undefined symbol: reported, not raised
        sys.modules.pop(EXTENSION_NAME, None)
        return None, (
            f"{EXTENSION_NAME} extension found at {spec.origin} but could not be loaded: "
            f"{type(exc).__name__}: {exc}"
        )
    if not callable(getattr(module, "fused_logp_forward", None)):
        return None, f"{EXTENSION_NAME} at {spec.origin} has no fused_logp_forward"
    return module, None


def probe(device: str) -> str | None:
    """None if this candidate can run on ``device``, else the exact reason it cannot."""
    device_type, _, index_text = str(device).partition(":")
    if device_type != _DEVICE_TYPE:
        return f"needs device {_DEVICE_TYPE} (asked for {device})"
    torch_npu, error = _import_torch_npu()
    if torch_npu is None:
        return f"torch_npu not importable: {error}"
    reason = _cann_reason()
    if reason is not None:
        return reason
    count, error = _npu_count(torch_npu)
    if error is not None:
        return f"no NPU visible: {error}"
    if count == 0:
        return "no NPU visible"
    if index_text:
        if not index_text.isdigit():
            return f"bad device index in {device!r}"
        if int(index_text) >= count:
            return f"no NPU visible at index {index_text} ({count} visible)"
    _, error = _load_extension()
    return error


def _load_kernel() -> KernelForward:
    """Resolve _kernel_forward to kernelcheck_ascend.fused_logp_forward, or raise why not."""
    global _kernel_forward, _loaded_kernel
    if _kernel_forward is not None:
        return _kernel_forward
    torch_npu, error = _import_torch_npu()  # the extension links libtorch_npu: import it first
    if torch_npu is None:
        raise AscendUnavailable(f"torch_npu not importable: {error}")
    module, error = _load_extension()
    if module is None:
        raise AscendUnavailable(error)
    _loaded_kernel = module.fused_logp_forward
    _kernel_forward = _loaded_kernel
    return _kernel_forward


def _implementation_of(kernel: KernelForward) -> str:
    if kernel is _loaded_kernel:
        return IMPLEMENTATION
    name = getattr(kernel, "__qualname__", None) or type(kernel).__qualname__
    return f"replaced:{getattr(kernel, '__module__', '?')}.{name}"


# ---- input checks ---------------------------------------------------------------------------


def _check_inputs(logits: object, target: object) -> None:
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError(
            "ascend logp expects torch.Tensor logits and target, got "
            f"{type(logits).__name__} and {type(target).__name__}"
        )
    if logits.device.type != _DEVICE_TYPE:
        raise ValueError(
            f"ascend logp needs logits on device '{_DEVICE_TYPE}', got {logits.device} "
            "(this candidate never falls back to PyTorch)"
        )
    if target.device != logits.device:
        raise ValueError(
            f"ascend logp needs target on the logits device {logits.device}, got {target.device}"
        )
    if logits.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            "ascend logp needs logits of dtype float32, bfloat16 or float16, "
            f"got {logits.dtype} (no fallback)"
        )
    if target.dtype != torch.int64:
        raise TypeError(f"ascend logp needs an int64 target, got {target.dtype}")
    if logits.dim() < 1:
        raise ValueError("ascend logp needs logits of shape [..., V], got a 0-d tensor")
    if tuple(logits.shape[:-1]) != tuple(target.shape):
        raise ValueError(
            f"ascend logp needs target shape == logits.shape[:-1]; got logits "
            f"{tuple(logits.shape)} and target {tuple(target.shape)}"
        )
    if logits.shape[-1] == 0:
        raise ValueError("ascend logp needs V = logits.shape[-1] > 0, got 0")


# ---- autograd bridge ------------------------------------------------------------------------


def _row_local_backward(
    logits2d: torch.Tensor, target1d: torch.Tensor, grad_out: torch.Tensor
) -> torch.Tensor:
    """dlogits = g * (onehot(target) - softmax(logits)) in fp32, row by row, on logits' device."""
    vocab = logits2d.shape[1]
    x = logits2d.float()
    probs = torch.softmax(x, dim=1)
    valid = (target1d >= 0) & (target1d < vocab)
    safe_target = torch.where(valid, target1d, torch.zeros_like(target1d))
    onehot = torch.zeros_like(probs).scatter_(1, safe_target.unsqueeze(1), 1.0)
    grad = grad_out.float().unsqueeze(1) * (onehot - probs)
    # Out-of-range rows get an exact +0.0 gradient (even where softmax is not finite).
    grad = torch.where(valid.unsqueeze(1), grad, torch.zeros_like(grad))
    return grad.to(logits2d.dtype)


class _FusedLogpAscend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits2d, target1d, kernel):  # type: ignore[override]
        out = kernel(logits2d, target1d)
        if (
            not isinstance(out, torch.Tensor)
            or out.dtype != torch.float32
            or tuple(out.shape) != (logits2d.shape[0],)
            or out.device != logits2d.device
        ):
            raise RuntimeError(
                "kernel entry broke its contract: expected a float32 tensor of shape "
                f"({logits2d.shape[0]},) on {logits2d.device}, got "
                + (
                    f"{out.dtype} {tuple(out.shape)} on {out.device}"
                    if isinstance(out, torch.Tensor)
                    else type(out).__name__
                )
            )
        ctx.save_for_backward(logits2d, target1d)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        logits2d, target1d = ctx.saved_tensors
        return _row_local_backward(logits2d, target1d, grad_out), None, None


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """fp32 ``logits[..., target] - logsumexp(logits, -1)`` via the Ascend C kernel.

    logits: [..., V] float32/bfloat16/float16 on the NPU; target: [...] int64 on the same NPU.
    Returns float32 [...]; a target outside [0, V) gives 0.0 (and a zero gradient row).
    """
    _check_inputs(logits, target)
    kernel = _kernel_forward if _kernel_forward is not None else _load_kernel()
    lead = tuple(target.shape)
    vocab = logits.shape[-1]
    # .contiguous() on the 2-D view so that non-contiguous slices still go through the kernel.
    logits2d = logits.reshape(-1, vocab).contiguous()
    target1d = target.reshape(-1).contiguous()
    out = _FusedLogpAscend.apply(logits2d, target1d, kernel)
    logp.last_implementation = _implementation_of(kernel)
    return out.view(lead)


logp.last_implementation = None
