"""Name the likely cause of a precision failure, only from what the metrics show.

A hint that names the wrong cause sends an engineer to the wrong line of the kernel, so
each cause is said only when the numbers support it, most specific first.
"""

from __future__ import annotations

import torch

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def stored_in_16_bits(out: torch.Tensor, min_values: int = 4) -> str | None:
    """``"bf16"``/``"fp16"`` when the output is, or only holds values of, a 16-bit type.

    A kernel that accumulates in fp32 but stores bf16 and casts back to fp32 leaves
    every finite value exactly representable in bf16; an honest fp32 output does not
    (``min_values`` distinct values make a coincidence negligible).
    """
    if out.dtype in SIXTEEN_BIT:
        return _NAMES[out.dtype]
    finite = out[torch.isfinite(out)]
    if torch.unique(finite).numel() < min_values:
        return None
    for dt in SIXTEEN_BIT:
        if bool((finite.to(dt).to(out.dtype) == finite).all()):
            return _NAMES[dt]
    return None


def likely_cause(
    n_nonfinite: int,
    out_of_range: tuple[str, float] | None,
    sixteen_bit: str | None,
) -> str:
    """The cause that the evidence supports.

    ``out_of_range``: (what, worst error) when the bound is broken only at rows whose
    index is out of range; ``sixteen_bit``: what :func:`stored_in_16_bits` found.
    """
    if n_nonfinite:
        return f"{n_nonfinite} NaN/Inf output(s) where the gold is finite"
    if out_of_range is not None:
        what, err = out_of_range
        return f"the error ({err:.3g}) is only at out-of-range {what}"
    if sixteen_bit:
        return f"the output is stored in 16 bits ({sixteen_bit}): its rounding exceeds fp32's"
    return "accumulates in lower precision than fp32?"
