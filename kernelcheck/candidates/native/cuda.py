"""The ``native-cuda`` candidate: libkc_logp_cuda (deterministic fused kernel) through ctypes."""

from __future__ import annotations

import torch

from kernelcheck.candidates.native import _common, library

IMPLEMENTATION = "native:cuda"
BACKEND = "cuda"


def probe(device: str) -> str | None:
    """None when the CUDA library can run on ``device`` here; otherwise the reason."""
    if str(device).split(":", 1)[0] != "cuda":
        return "needs device cuda"
    st = library.library_status(BACKEND)
    if st["status"] == "missing":
        return st["reason"]
    detail = st["detail"]
    if detail == "no-driver":
        return "no CUDA driver: libcuda.so.1 not loadable"
    if detail == "no-gpu":
        return "no CUDA GPU"
    if st["status"] != "available":
        return st["reason"]
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} cannot use CUDA (CPU-only build or no device)"
    return None


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """fp32 ``logits[..., target] - logsumexp(logits)``; +0.0 where target is out of range.

    logits: [..., V] float32/bfloat16/float16 on a CUDA device; target: [...] int64 on the
    same device. Runs on the current stream. Differentiable with respect to ``logits``.
    """
    return _common.logp(BACKEND, "cuda", logits, target)
