"""The single-pass comparison loops of ``libkc_metrics_cpu`` (``metrics_cpu/``), through ctypes.

:mod:`kernelcheck.checks.metrics` states every statistic as torch passes over a row chunk;
at the Qwen3 shape those passes cost ~13 s per gradient on 2 cores, this library's loop
2-4 s in a run. It computes the same numbers (``tests/checks/test_fastpath.py`` compares them
element for element, planted bad values, bf16/fp16 rounding ties and subnormals included)
and is used only where it applies: both tensors on the CPU, contiguous rows, a chunk large
enough to matter, every element finite. Anywhere else (no library built, a GPU gold, a
NaN in the chunk) the torch passes run, unchanged. ``KERNELCHECK_TORCH_METRICS=1`` forces
the torch passes everywhere.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import torch

from kernelcheck.native_files import find_named, shared_library_name

FILENAME = shared_library_name("kc_metrics_cpu")
ABI_VERSION = 1
MIN_ELEMENTS = 1 << 16  # smaller chunks stay with torch: a thread start costs more there
FORCE_TORCH_ENV = "KERNELCHECK_TORCH_METRICS"
# the log2 ULP-step histogram's buckets, as the library fills them (metrics reads the same):
# [0] exact, [k] 2^(k-1) to 2^k - 1 steps (k = 1..32), [33] NaN/Inf
ULP_BUCKETS = 34
_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_NOT_LOADED = object()
_lib = _NOT_LOADED


def _load():
    """The library, or None when it is not built or not loadable (the torch passes run)."""
    global _lib
    if _lib is _NOT_LOADED:
        _lib = None
        path = find_named(FILENAME)[0]
        if path is not None:
            try:
                lib = ctypes.CDLL(str(path))
                lib.kc_metrics_abi_version.restype = ctypes.c_int
                if lib.kc_metrics_abi_version() == ABI_VERSION:
                    _declare(lib)
                    _lib = lib
            except (OSError, AttributeError):
                pass
    return _lib


def _declare(lib) -> None:
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    if hasattr(lib, "kc_metrics_use_avx2"):  # a library built before it has the baseline only
        lib.kc_metrics_use_avx2.restype = ctypes.c_int
        lib.kc_metrics_use_avx2.argtypes = [ctypes.c_int]
    lib.kc_compare_rows.restype = ctypes.c_int
    lib.kc_compare_rows.argtypes = [ctypes.c_int, vp, vp, i64, i64, ctypes.c_double]
    lib.kc_compare_rows.argtypes += [ctypes.c_double, ctypes.c_int, vp, vp, vp, vp]
    lib.kc_row_digests.restype = ctypes.c_int
    lib.kc_row_digests.argtypes = [vp, ctypes.c_int, i64, i64, vp, ctypes.c_int, vp]


def available() -> bool:
    """Whether the single-pass loops are used in this process."""
    return os.environ.get(FORCE_TORCH_ENV, "") in ("", "0") and _load() is not None


def isa() -> str | None:
    """Which copy of the comparison loop runs: "avx2" (built with AVX2 and F16C, on a CPU that
    has them) or "baseline"; None without the library. Both give the same numbers."""
    lib = _load()
    if lib is None:
        return None
    use = getattr(lib, "kc_metrics_use_avx2", None)
    return "avx2" if use is not None and use(-1) else "baseline"


def use_avx2(on: bool) -> str | None:
    """Ask for the AVX2 copy (where the build and the CPU have it) or the baseline one; returns
    :func:`isa` after. For tests and measurements: the default is the best the CPU has."""
    lib = _load()
    use = getattr(lib, "kc_metrics_use_avx2", None) if lib is not None else None
    if use is not None:
        use(1 if on else 0)
    return isa()


def status() -> dict:
    """``dict(status=available|missing|off, path, reason)`` for ``kernelcheck doctor``."""
    path = find_named(FILENAME)[0]
    if path is None:
        reason = f"{FILENAME} not built: comparisons take the torch passes (slower)"
        return {"status": "missing", "path": None, "reason": reason}
    if _load() is None:
        return {"status": "missing", "path": str(path), "reason": "cannot be loaded (ABI?)"}
    if not available():
        return {"status": "off", "path": str(path), "reason": f"{FORCE_TORCH_ENV} is set"}
    return {"status": "available", "path": str(path), "reason": None, "isa": isa()}


def _threads() -> int:
    return max(1, torch.get_num_threads())


@dataclass
class RowErrors:
    """One chunk's comparison: per-row ``[max_abs, sum_abs, max_rel, gold_absmax]`` (float64)
    and ``[n_bad, first_bad_column, max_steps]`` (int64), per-column max ``|err|`` and the
    log2 ULP-step counts (``ULP_BUCKETS``, NaN/Inf bucket empty)."""

    rows: torch.Tensor
    counts: torch.Tensor
    column_max: torch.Tensor
    ulp_counts: torch.Tensor


def compare_rows(cand: torch.Tensor, gold: torch.Tensor, atol: float, rtol: float):
    """:class:`RowErrors` of ``cand`` ([rows, cols], fp32/bf16/fp16) against ``gold``
    ([rows, cols] float64), or None where the loop does not apply or met a NaN/Inf."""
    if (
        cand.dim() != 2
        or cand.shape != gold.shape
        or cand.dtype not in _DTYPES
        or gold.dtype != torch.float64
        or cand.device.type != "cpu"
        or gold.device.type != "cpu"
        or cand.numel() < MIN_ELEMENTS
        or not available()
    ):
        return None
    c, g = cand.contiguous(), gold.contiguous()
    rows, cols = c.shape
    out = RowErrors(
        torch.empty(rows, 4, dtype=torch.float64),
        torch.empty(rows, 3, dtype=torch.int64),
        torch.zeros(cols, dtype=torch.float64),
        torch.zeros(ULP_BUCKETS, dtype=torch.int64),
    )
    status = _lib.kc_compare_rows(
        _DTYPES[c.dtype],
        c.data_ptr(),
        g.data_ptr(),
        rows,
        cols,
        float(atol),
        float(rtol),
        _threads(),
        out.rows.data_ptr(),
        out.counts.data_ptr(),
        out.column_max.data_ptr(),
        out.ulp_counts.data_ptr(),
    )
    return out if status == 0 else None


def row_digests(words: torch.Tensor, weights: torch.Tensor) -> torch.Tensor | None:
    """``metrics.row_digests`` of ``words`` ([rows, cols] of 2-, 4- or 8-byte integers, the
    bit view) with ``weights`` (int32, one per 32-bit word of a row), or None where the loop
    does not apply."""
    size = words.element_size()
    if (
        words.dim() != 2
        or words.device.type != "cpu"
        or words.dtype.is_floating_point
        or words.dtype in (torch.bool, torch.uint16)
        or size not in (2, 4, 8)
        or words.numel() < MIN_ELEMENTS
        or not available()
    ):
        return None
    w = words.contiguous()
    rows, cols = w.shape
    weights = weights.contiguous()
    if weights.numel() != cols * max(1, size // 4) or weights.dtype != torch.int32:
        return None
    out = torch.empty(rows, dtype=torch.int32)
    status = _lib.kc_row_digests(
        w.data_ptr(), size, rows, cols, weights.data_ptr(), _threads(), out.data_ptr()
    )
    return out if status == 0 else None
