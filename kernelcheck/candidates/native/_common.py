"""Shared ctypes glue: argument checks, row layout, and the autograd Function."""

from __future__ import annotations

import math

import torch

from kernelcheck.candidates.native import library

_DTYPES = {
    torch.float32: library.KC_FLOAT32,
    torch.bfloat16: library.KC_BFLOAT16,
    torch.float16: library.KC_FLOAT16,
}


def check_inputs(logits, target, device_type: str) -> None:
    """Raise TypeError / ValueError for inputs the native kernels cannot take."""
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("logits and target must be torch.Tensor")
    if logits.device.type != device_type:
        raise ValueError(f"logits must be on a {device_type} device, got {logits.device}")
    if target.device != logits.device:
        raise ValueError(f"target is on {target.device}, logits on {logits.device}")
    if logits.dtype not in _DTYPES:
        raise TypeError(f"logits dtype must be float32, bfloat16 or float16, got {logits.dtype}")
    if target.dtype != torch.int64:
        raise TypeError(f"target dtype must be int64, got {target.dtype}")
    if logits.dim() < 1:
        raise ValueError("logits must have at least one dimension (the vocab)")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal the logits lead shape "
            f"{tuple(logits.shape[:-1])}"
        )
    if logits.shape[-1] <= 0:
        raise ValueError("logits vocab dimension must be > 0")


def rows_view(logits: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(x2, row_stride)``: a [rows, V] view with unit column stride, copying only if needed.

    A strided row layout (rows further apart than V, e.g. a column slice) is passed as is when
    the lead dimensions collapse to a single stride; anything else is made contiguous.
    """
    vocab = logits.shape[-1]
    rows = math.prod(logits.shape[:-1])
    try:
        x2 = logits.view(rows, vocab)
    except RuntimeError:
        x2 = logits.contiguous().view(rows, vocab)
    if rows <= 1:
        # A single row's stride is arbitrary in torch; any value >= V describes it.
        if vocab > 1 and x2.stride(1) != 1:
            x2 = x2.contiguous()
        return x2, vocab
    if (vocab > 1 and x2.stride(1) != 1) or x2.stride(0) < vocab:
        x2 = x2.contiguous()
    return x2, x2.stride(0)


def _check(lib, status: int, what: str) -> None:
    if status != library.KC_OK:
        raise RuntimeError(f"{what} failed: {library.status_string(lib, status)} ({status})")


class _Stream:
    """Device guard + stream handle for one call (no-op on CPU)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._guard = None

    def __enter__(self):
        if self.device.type == "cuda":
            self._guard = torch.cuda.device(self.device)
            self._guard.__enter__()
            return torch.cuda.current_stream(self.device).cuda_stream
        return None

    def __exit__(self, *exc):
        if self._guard is not None:
            self._guard.__exit__(*exc)
        return False


def forward_call(backend: str, x2: torch.Tensor, stride: int, t1: torch.Tensor) -> torch.Tensor:
    lib = library.load(backend)
    rows, vocab = x2.shape
    out = torch.empty(rows, dtype=torch.float32, device=x2.device)
    with _Stream(x2.device) as stream:
        status = lib.kc_logp_forward(
            _DTYPES[x2.dtype],
            x2.data_ptr(),
            t1.data_ptr(),
            out.data_ptr(),
            rows,
            vocab,
            stride,
            stream,
        )
    _check(lib, status, "kc_logp_forward")
    return out


def backward_call(
    backend: str, x2: torch.Tensor, stride: int, t1: torch.Tensor, g1: torch.Tensor
) -> torch.Tensor:
    lib = library.load(backend)
    rows, vocab = x2.shape
    grad = torch.empty(rows, vocab, dtype=x2.dtype, device=x2.device)
    with _Stream(x2.device) as stream:
        status = lib.kc_logp_backward(
            _DTYPES[x2.dtype],
            x2.data_ptr(),
            t1.data_ptr(),
            g1.data_ptr(),
            grad.data_ptr(),
            rows,
            vocab,
            stride,
            stream,
        )
    _check(lib, status, "kc_logp_backward")
    return grad


class NativeLogp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, backend: str) -> torch.Tensor:
        lead = tuple(logits.shape[:-1])
        x2, stride = rows_view(logits)
        t1 = target.reshape(-1).contiguous()
        out = forward_call(backend, x2, stride, t1)
        ctx.backend = backend
        ctx.stride = stride
        ctx.logits_shape = tuple(logits.shape)
        ctx.save_for_backward(x2, t1)
        return out.view(lead)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        x2, t1 = ctx.saved_tensors
        g1 = grad_out.reshape(-1).to(torch.float32).contiguous()
        grad = backward_call(ctx.backend, x2, ctx.stride, t1, g1)
        return grad.view(ctx.logits_shape), None, None


def logp(backend: str, device_type: str, logits: torch.Tensor, target: torch.Tensor):
    check_inputs(logits, target, device_type)
    return NativeLogp.apply(logits, target, backend)
