"""Say what a precision failure's numbers show, and a cause only where they show it.

A hint that names the wrong cause sends an engineer to the wrong line of the kernel, so
each statement is backed by a figure the check computed (kept in the result's
``evidence`` metrics): the output's 16-bit rounding only when it is 16-bit *and* every
error is within that rounding of the gold; flushed subnormals only when every error over
the limit sits below fp32's normal range; cancellation only when the gold is far
smaller than the row's inputs and the error is fp32's rounding at the inputs' scale.
Otherwise the hint states the measured facts and guesses nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from kernelcheck.checks.metrics import fp32_ulp

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# significand bits (with the hidden one) and the smallest spacing (subnormal), per type
_SIGNIFICAND = {"bf16": (8, 2.0**-133), "fp16": (11, 2.0**-24)}
ROUNDING = 0.5 + 1 / 16  # ulps: an fp32-exact value rounded once lands within half + slack
CANCELLING = 64.0  # the row's inputs this many times |gold|: most of their digits cancel
INPUT_ROUNDING_ULPS = 64  # and the error at most this many fp32 ulps of the inputs' scale
FP32_TINY = torch.finfo(torch.float32).tiny


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


def ulps_16(err: torch.Tensor, gold: torch.Tensor, kind: str) -> float:
    """The largest error in steps of the 16-bit type ``kind`` at each element's |gold|."""
    bits, smallest = _SIGNIFICAND[kind]
    _, exp = torch.frexp(gold.abs())
    ulp = torch.ldexp(torch.ones_like(gold), exp - bits).clamp_(min=smallest)
    return float((err / ulp).max())


@dataclass(frozen=True)
class Evidence:
    """The figures a hint may cite, for one failing part (in-range rows only)."""

    ratio: float  # the candidate's max error / the honest fp32 reference's
    index: str  # the worst element, as an output index
    error: float  # |cand - gold| there
    gold: float  # the gold there
    input_absmax: float | None  # the largest |input| of its row (row-wise float inputs)
    sixteen_bit: str | None  # the 16-bit type the output is stored in, if any
    ulps_16: float | None  # the largest error in that type's steps at |gold|
    subnormal_gold: float | None  # every error over the limit at |gold| below this < 2^-126
    flushed: bool | None  # ... and the candidate is 0 at each of them

    def metrics(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def gather(
    c: torch.Tensor,
    g: torch.Tensor,
    ratio: float,
    bound: float,
    locate,
    input_absmax,
) -> Evidence:
    """The evidence in ``c`` against ``g`` (``[rows, ...]``, the in-range rows).

    ``locate(row, rest)``: the output index of an element; ``input_absmax(row)``: the
    largest |input| of that row, or None.
    """
    c = c.to(g.device)
    err = (c.double() - g.double()).abs().nan_to_num_(0.0)
    flat = int(err.argmax())
    row, col = divmod(flat, max(err[0].numel(), 1)) if err.dim() > 1 else (flat, None)
    rest = () if col is None else tuple(torch.unravel_index(torch.tensor(col), err.shape[1:]))
    kind = stored_in_16_bits(c)
    over = err > bound
    tiny = g.abs()[over]
    subnormal = bool(over.any()) and bool((tiny < FP32_TINY).all())
    return Evidence(
        ratio=ratio,
        index=locate(row, tuple(int(i) for i in rest)),
        error=float(err.reshape(-1)[flat]),
        gold=float(g.reshape(-1)[flat]),
        input_absmax=input_absmax(row),
        sixteen_bit=kind,
        ulps_16=ulps_16(err, g.double(), kind) if kind else None,
        subnormal_gold=float(tiny.max()) if subnormal else None,
        flushed=bool((c[over] == 0).all()) if subnormal else None,
    )


def likely_cause(
    n_nonfinite: int,
    out_of_range: tuple[str, float] | None,
    evidence: Evidence | None,
) -> str:
    """What the evidence shows, most specific first; a cause only where it is shown.

    ``out_of_range``: (what, worst error) when the bound is broken only at rows whose
    index is out of range.
    """
    if n_nonfinite:
        return f"{n_nonfinite} NaN/Inf output(s) where the gold is finite"
    if out_of_range is not None:
        what, err = out_of_range
        return f"the error ({err:.3g}) is only at out-of-range {what}"
    if evidence is None:
        return "the error exceeds the limit"
    return _cause(evidence) or _facts(evidence)


def _cause(ev: Evidence) -> str | None:
    kind = ev.sixteen_bit
    if kind and ev.ulps_16 is not None and ev.ulps_16 <= ROUNDING:
        return f"the output's {kind} rounding: errors reach {ev.ulps_16:.2g} {kind} ulp of the gold"
    if ev.subnormal_gold is not None:
        zero = ", the candidate 0 there" if ev.flushed else ""
        return (
            f"every error over the limit is at outputs below fp32's normal range "
            f"(|gold| <= {ev.subnormal_gold:.2g}{zero}): flushed subnormals?"
        )
    scale = ev.input_absmax
    if (
        scale
        and scale >= CANCELLING * abs(ev.gold)
        and ev.error <= INPUT_ROUNDING_ULPS * fp32_ulp(scale)
    ):
        return (
            f"cancellation? at {ev.index} |gold| is {abs(ev.gold):.3g} where the row's "
            f"inputs reach {scale:.3g}; the error {ev.error:.2e} is "
            f"{ev.error / fp32_ulp(scale):.3g} fp32 ulp of {scale:.3g}"
        )
    return None


def _facts(ev: Evidence) -> str:
    """The measured facts alone, when no cause is shown."""
    text = (
        f"error {ev.ratio:.3g}x the honest fp32 reference's, largest at {ev.index} "
        f"(|gold| {abs(ev.gold):.3g})"
    )
    if ev.sixteen_bit and ev.ulps_16 is not None:
        text += f"; {ev.ulps_16:.3g} {ev.sixteen_bit} ulps of the gold: more than its rounding"
    return text
