"""The ``native-cpu`` candidate: libkc_logp_cpu (deterministic AVX2 kernel) through ctypes."""

from __future__ import annotations

import torch

from kernelcheck.candidates.native import _common, library

IMPLEMENTATION = "native:cpu-avx2"
BACKEND = "cpu"


def probe(device: str) -> str | None:
    """None when the CPU library can run on ``device`` here; otherwise the reason."""
    if str(device).split(":", 1)[0] != "cpu":
        return "needs device cpu"
    st = library.library_status(BACKEND)
    if st["status"] == "available":
        return None
    return st["reason"]


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """fp32 ``logits[..., target] - logsumexp(logits)``; +0.0 where target is out of range.

    logits: [..., V] float32/bfloat16/float16 on CPU; target: [...] int64. Differentiable
    with respect to ``logits`` (native backward kernel).
    """
    return _common.logp(BACKEND, "cpu", logits, target)


def set_num_threads(n: int) -> None:
    """Threads over rows for the CPU kernel (0 = hardware concurrency). Results never change."""
    if int(n) < 0:
        raise ValueError("number of threads must be >= 0")
    lib = library.load(BACKEND)
    status = lib.kc_set_num_threads(int(n))
    if status != library.KC_OK:
        raise RuntimeError(f"kc_set_num_threads failed: {library.status_string(lib, status)}")
