"""What a training process may hand a kernel besides clean draws: a NaN in its inputs (a
diverging model's logits) and a default dtype other than float32 (a script that sets
bf16 globally). Pure helpers of ``contract``'s two probes of them; they never call a
candidate."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from kernelcheck.checks.rows import flat_rows

NAN_COLUMN_STEP = 7  # a planted row's NaN moves 7 columns a row: not always its first


def with_nans(
    head: dict[str, torch.Tensor], names: list[str], rows: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``head`` (rows first) with one NaN in each of the rows ``rows`` (a bool mask) of
    each input of ``names``. Copies: ``head`` is left as it was."""
    out = dict(head)
    for k in names:
        t = head[k].clone()
        flat = flat_rows(t, 1).reshape(t.shape[0], -1)
        for r in rows.nonzero().flatten().tolist():
            flat[r, (r * NAN_COLUMN_STEP + 1) % flat.shape[1]] = float("nan")
        out[k] = t
    return out


def every_other(free: torch.Tensor) -> torch.Tensor:
    """Every other row of those ``free`` selects (the first, the third, ...)."""
    picked = torch.zeros_like(free)
    picked[free.nonzero().flatten()[::2]] = True
    return picked


def hidden_nans(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """Where the float64 gold is NaN the candidate's element must not be finite (NaN or
    Inf: a value that says the result is lost); the first finite one, worded, or None."""
    g, w = got.detach().cpu().reshape(-1), want.detach().cpu().reshape(-1)
    nan = torch.isnan(w)
    hidden = nan & torch.isfinite(g)
    if not bool(hidden.any()):
        return None
    i = int(hidden.nonzero()[0])
    return (
        f"{int(hidden.sum())} of {int(nan.sum())} elements finite where the float64 gold is "
        f"NaN; first at flat index {i}: {g[i].item()!r}"
    )


def row_elements(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The elements of ``t`` (rows first) in the rows ``rows`` selects."""
    return rows.view(-1, *([1] * (t.dim() - 1))).expand(t.shape)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """``torch.set_default_dtype(dtype)`` for the block, the previous one after it."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
