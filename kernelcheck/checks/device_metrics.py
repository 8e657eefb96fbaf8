"""The comparison's numbers computed where the tensors are (a GPU, an NPU), with torch ops.

On a device the gold and the candidate's results can stay put: :func:`compare_rows` gives
:class:`~kernelcheck.checks.fastpath.RowErrors`, the per-row and per-column summaries that
``libkc_metrics_cpu`` gives on the host, from torch passes over bounded row chunks, and only
those summaries come back to the host (one synchronisation per call). :func:`changed_elements`
is integrity's compare of an input against its pristine host copy, moved over in chunks,
only the count coming back.

The numbers are the host path's, by the same definitions (``tests/checks/test_device_metrics.py``
compares them on CPU tensors with this path forced): the one exception is a row's sum of
``|err|`` (the mean error, reported, never judged), whose float64 additions run in another
order. ``KERNELCHECK_DEVICE_METRICS=1`` forces this path on CPU tensors too.
"""

from __future__ import annotations

import os

import torch

from kernelcheck.checks.fastpath import ULP_BUCKETS, RowErrors

FORCE_ENV = "KERNELCHECK_DEVICE_METRICS"
CHUNK_ELEMENTS = 1 << 22  # a few 32 MB float64 temporaries per chunk
_MAGNITUDE = {  # the candidate dtype's integer view and the mask of its magnitude bits
    torch.float32: (torch.int32, 0x7FFFFFFF),
    torch.bfloat16: (torch.int16, 0x7FFF),
    torch.float16: (torch.int16, 0x7FFF),
}
_DOUBLE_BIAS = 1022  # a double's biased exponent of an integer d >= 1 is 1022 + bit length


def forced() -> bool:
    """Whether ``KERNELCHECK_DEVICE_METRICS`` asks for this path on CPU tensors too."""
    return os.environ.get(FORCE_ENV, "") not in ("", "0")


def applies(t: torch.Tensor, force: bool | None = None) -> bool:
    """Whether ``t`` is judged by this path: it lives off the host, or the path is forced
    (``force``; None: the environment says)."""
    return t.device.type != "cpu" or (forced() if force is None else force)


def compare_rows(
    cand: torch.Tensor,
    gold: torch.Tensor,
    atol: float,
    rtol: float,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> RowErrors | None:
    """:class:`RowErrors` of ``cand`` ([rows, cols], fp32/bf16/fp16) against ``gold``
    ([rows, cols] float64, same device), on the host; None where it does not apply or an
    element is NaN/Inf (the torch passes of ``metrics.ErrorStats`` take those, as they take
    them from the host loop)."""
    if (
        cand.dim() != 2
        or cand.shape != gold.shape
        or cand.dtype not in _MAGNITUDE
        or gold.dtype != torch.float64
        or cand.device != gold.device
        or cand.numel() == 0
    ):
        return None
    rows, cols = cand.shape
    dev = cand.device
    out = RowErrors(
        torch.empty(rows, 4, dtype=torch.float64, device=dev),
        torch.empty(rows, 3, dtype=torch.int64, device=dev),
        torch.zeros(cols, dtype=torch.float64, device=dev),
        torch.zeros(ULP_BUCKETS, dtype=torch.int64, device=dev),
    )
    finite = torch.ones((), dtype=torch.bool, device=dev)
    step = max(1, chunk_elements // cols)
    for start in range(0, rows, step):
        c, g = cand[start : start + step], gold[start : start + step]
        finite &= torch.isfinite(c).all() & torch.isfinite(g).all()
        _compare_chunk(c, g, atol, rtol, out, slice(start, start + step))
    if not bool(finite):
        return None
    return RowErrors(out.rows.cpu(), out.counts.cpu(), out.column_max.cpu(), out.ulp_counts.cpu())


def _compare_chunk(c, g, atol: float, rtol: float, out: RowErrors, rows: slice) -> None:
    """One chunk's rows into ``out`` (its ``rows``), its columns and histogram added."""
    err = torch.sub(c.to(torch.float64), g).abs_()
    g_abs = g.abs()
    bad = err > g_abs.mul(rtol).add_(atol)  # rtol 0: atol exactly (|g| is finite)
    n_bad = bad.sum(dim=1)
    first = bad.to(torch.uint8).argmax(dim=1)  # the first of the maxima: the first bad column
    out.counts[rows, 0] = n_bad
    out.counts[rows, 1] = torch.where(n_bad > 0, first, -1)
    out.rows[rows, 0] = err.amax(dim=1)
    out.rows[rows, 1] = err.sum(dim=1)
    out.rows[rows, 3] = g_abs.amax(dim=1)
    torch.maximum(out.column_max, err.amax(dim=0), out=out.column_max)
    out.rows[rows, 2] = err.div_(g_abs.clamp_min_(1e-12)).amax(dim=1)
    steps = step_counts(c, g)
    out.counts[rows, 2] = steps.amax(dim=1)
    length = torch.where(steps > 0, (steps.double().view(torch.int64) >> 52) - _DOUBLE_BIAS, 0)
    out.ulp_counts += torch.bincount(length.reshape(-1), minlength=ULP_BUCKETS)


def step_counts(c: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """int64 steps of ``c``'s dtype between ``c`` and the gold rounded to it, on magnitudes:
    their difference where the signs agree, their sum where they differ (-0.0 against +0.0
    is 0), as ``metrics.step_distance`` and the host loop count them (never wrapped here)."""
    view, mask = _MAGNITUDE[c.dtype]
    ci = c.contiguous().view(view).to(torch.int64)
    gi = g.to(c.dtype).view(view).to(torch.int64)
    mc, mg = ci & mask, gi & mask
    return torch.where((ci ^ gi) < 0, mc + mg, (mc - mg).abs_())


def changed_elements(
    before: torch.Tensor, now: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS
) -> int:
    """How many elements of ``now`` differ from ``before`` (both integer bit views; -1 when
    the shapes differ), compared where ``now`` is: ``before`` is moved there a chunk at a
    time, and only the count comes back."""
    if before.shape != now.shape:
        return -1
    a, b = before.reshape(-1), now.reshape(-1)
    total = torch.zeros((), dtype=torch.int64, device=b.device)
    for start in range(0, a.numel(), chunk_elements):
        part = a[start : start + chunk_elements].to(b.device)
        total += (part != b[start : start + chunk_elements]).sum()
    return int(total)
