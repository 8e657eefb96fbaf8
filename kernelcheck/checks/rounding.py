"""Which way a 16-bit result was rounded: to nearest, or always one way.

An honest kernel computes in fp32 and rounds once to the output's 16-bit dtype, to
nearest: its result is the float64 gold's nearest 16-bit value except near a midpoint,
where fp32's error (far below a 16-bit ulp) may tip it either way. A kernel that packs
fp32 to bf16 by keeping the upper 16 bits (``u32 >> 16``), or casts with a truncating or
flooring mode (Ascend C's ``Cast`` takes the rounding mode as an argument:
``CAST_TRUNC``, ``CAST_FLOOR``, ``CAST_CEIL`` beside ``CAST_RINT``), lands one step
off in about half the elements, always the same way. Its error is at most one ulp, twice
an honest one's at most: within every tolerance, and within ``ratio = 2`` of the
reference. Its direction is what gives it away:

    excess = (elements off toward zero - elements off away from zero) / elements judged

and the same downward against upward. Round to nearest: both near 0 (an honest kernel
is off in a few elements near midpoints, either way); truncation: about 0.5. A result
fails where either excess is past ``BIAS_LIMIT``. Measured: an honest bf16 swiglu at
64 x 1,000, 1 element of 64,000 off (toward zero); the same truncated, 31,790 (excess
0.497); an fp16 softmax over the Qwen3 vocab, none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
BIAS_LIMIT = 0.1  # of the elements judged; truncation gives about 0.5, round to nearest ~0
MIN_JUDGED = 256  # fewer elements judge nothing: a small tensor's excess is too unsteady


@dataclass
class RoundingCounts:
    """Elements judged, and how many were off the gold's nearest value each way."""

    judged: int = 0
    toward_zero: int = 0
    away: int = 0
    down: int = 0
    up: int = 0

    def add(self, other: RoundingCounts) -> None:
        self.judged += other.judged
        self.toward_zero += other.toward_zero
        self.away += other.away
        self.down += other.down
        self.up += other.up

    def excess(self) -> tuple[float, float]:
        """(toward zero minus away, down minus up), as fractions of the elements judged."""
        n = max(1, self.judged)
        return (self.toward_zero - self.away) / n, (self.down - self.up) / n

    def worst(self) -> float:
        """The larger |excess| of the two."""
        return max(map(abs, self.excess()))


def count_rounding(result: torch.Tensor, gold: torch.Tensor) -> RoundingCounts:
    """Compare a 16-bit ``result`` with ``gold`` (float64) rounded to nearest in its dtype,
    where both are finite. Other dtypes judge nothing: an fp32 result is computed, not
    rounded from one."""
    if result.dtype not in SIXTEEN_BIT:
        return RoundingCounts()
    got = result.detach().cpu().reshape(-1).double()
    want = gold.detach().cpu().reshape(-1).to(result.dtype).double()
    if got.shape != want.shape:
        return RoundingCounts()
    judged = torch.isfinite(got) & torch.isfinite(want)
    got, want = got[judged], want[judged]
    low, high = got.abs() < want.abs(), got.abs() > want.abs()
    return RoundingCounts(
        int(judged.sum()),
        int(low.sum()),
        int(high.sum()),
        int((got < want).sum()),
        int((got > want).sum()),
    )


def rounding_problem(counts: RoundingCounts, what: str) -> str | None:
    """Why ``counts`` (a result's) show rounding one way, or None. An absolute rule, not
    one relative to the honest reference's counts: those are not at hand for every
    candidate (the reference's gradient is shared across them), and round to nearest
    leaves both excesses near 0 whatever the op (an fp32 error past half a 16-bit ulp,
    in cancelling entries, tips either way and is rare)."""
    if counts.judged < MIN_JUDGED:
        return None
    ways = {
        "toward zero": counts.toward_zero,
        "away from zero": counts.away,
        "down": counts.down,
        "up": counts.up,
    }
    for excess, (one, other) in zip(
        counts.excess(), (("toward zero", "away from zero"), ("down", "up"))
    ):
        if abs(excess) > BIAS_LIMIT:
            way, back = (one, other) if excess > 0 else (other, one)
            return (
                f"{what}: {ways[way]} of {counts.judged} elements lie {way} of the float64 "
                f"gold's nearest 16-bit value, {ways[back]} {back}: rounded {way}, not to "
                f"nearest (a truncating pack or cast; round to nearest errs both ways alike, "
                f"the limit is an excess of {BIAS_LIMIT:g} of the elements)"
            )
    return None


def worst_excess(counts: dict[str, RoundingCounts]) -> float | None:
    """The largest |excess| either way over the results with enough elements judged, or
    None where none has: a pass's margin, reported."""
    found = [c.worst() for c in counts.values() if c.judged >= MIN_JUDGED]
    return max(found) if found else None


def first_rounding_problem(
    counts: dict[str, RoundingCounts], label: str
) -> tuple[str, RoundingCounts] | None:
    """(why, counts) of the first result rounded one way, each named by ``label``
    formatted with its name, or None."""
    for name, found in counts.items():
        problem = rounding_problem(found, label.format(name))
        if problem:
            return problem, found
    return None


def rounding_failure(
    counts: dict[str, RoundingCounts], label: str, seeds, distribution: str
) -> tuple[str, float] | None:
    """(message, worst excess) of a check failing on rounding alone: the first result
    rounded one way (``label`` formatted with its name), over the case's ``seeds``."""
    found = first_rounding_problem(counts, label)
    if found is None:
        return None
    problem, one = found
    return f"{problem} [seeds {', '.join(map(str, seeds))}, {distribution}]", one.worst()
