"""Which way a 16-bit result is rounded: round to nearest passes, one way fails."""

from __future__ import annotations

import torch

from kernelcheck.checks.rounding import (
    MIN_JUDGED,
    RoundingCounts,
    count_rounding,
    first_rounding_problem,
    rounding_failure,
    rounding_problem,
)


def _gold(n: int = 4096) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3


def _bf16_by(mode: str, gold: torch.Tensor) -> torch.Tensor:
    """``gold`` through fp32 to bf16: rounded, truncated (``u32 >> 16``) or floored."""
    x = gold.float()
    if mode == "nearest":
        return x.to(torch.bfloat16)
    cut = (x.view(torch.int32) & ~0xFFFF).view(torch.float32)
    if mode == "floor":  # below the value: one step down where truncation went up
        step = torch.nextafter(
            cut.to(torch.bfloat16), torch.tensor(-torch.inf, dtype=torch.bfloat16)
        )
        return torch.where((cut > x), step.float(), cut).to(torch.bfloat16)
    return cut.to(torch.bfloat16)


def test_round_to_nearest_is_no_finding():
    gold = _gold()
    counts = count_rounding(_bf16_by("nearest", gold), gold)
    assert counts.judged == gold.numel() and counts.toward_zero == counts.away == 0
    assert rounding_problem(counts, "output 'y'") is None


def test_truncation_is_rounding_toward_zero():
    gold = _gold()
    counts = count_rounding(_bf16_by("truncate", gold), gold)
    assert counts.away == 0 and counts.toward_zero > 0.4 * counts.judged
    problem = rounding_problem(counts, "gradient:gate")
    assert problem and "rounded toward zero, not to nearest" in problem
    assert problem.startswith("gradient:gate: ")


def test_flooring_is_rounding_down():
    gold = _gold()
    problem = rounding_problem(count_rounding(_bf16_by("floor", gold), gold), "output 'y'")
    assert problem and "rounded down" in problem


def test_fp32_results_and_small_ones_judge_nothing():
    gold = _gold()
    assert count_rounding(gold.float(), gold) == RoundingCounts()
    few = _gold(MIN_JUDGED - 1)
    assert rounding_problem(count_rounding(_bf16_by("truncate", few), few), "y") is None


def test_the_first_result_rounded_one_way_is_named():
    gold = _gold()
    counts = {
        "ok": count_rounding(_bf16_by("nearest", gold), gold),
        "cut": count_rounding(_bf16_by("truncate", gold), gold),
    }
    problem, found = first_rounding_problem(counts, "output {!r}")
    assert problem.startswith("output 'cut'") and found is counts["cut"]


def test_a_rounding_failure_names_the_result_the_seeds_and_the_worst_excess():
    gold = _gold()
    counts = {"y": count_rounding(_bf16_by("truncate", gold), gold)}
    message, excess = rounding_failure(counts, "output {!r}", (0, 1), "normal")
    assert message.startswith("output 'y': ") and message.endswith("[seeds 0, 1, normal]")
    assert excess == counts["y"].worst() > 0.4
    fine = {"y": count_rounding(_bf16_by("nearest", gold), gold)}
    assert rounding_failure(fine, "output {!r}", (0,), "normal") is None
