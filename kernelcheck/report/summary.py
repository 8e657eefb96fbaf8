"""The end of a table or plain report: what was not checked and why, then the verdict.

Shared by both formats so they say the same thing. The verdict stays the last line (CI
logs and people read the tail), and it counts the (candidate, check) pairs that ran: a
run of skips only is ``NOTHING CHECKED``, never ``PASSED``.
"""

from __future__ import annotations

from kernelcheck.results import Report
from kernelcheck.wrap import PIPE_WIDTH, fill


def verdict_word(report: Report, regressed: bool = False, unwritten: bool = False) -> str:
    """``PASSED``, ``FAILED`` (also when the JSON report could not be written:
    ``unwritten``, exit 1), ``REGRESSED`` (no failure, but worse than the baseline),
    ``NOTHING CHECKED`` or ``INTERRUPTED (SIGINT)``."""
    if report.interrupted:
        return f"INTERRUPTED ({report.interrupted})"
    if not report.passed or unwritten:
        return "FAILED"
    if regressed:
        return "REGRESSED"
    return "PASSED" if report.pairs_run else "NOTHING CHECKED"


def verdict_rest(report: Report, unwritten: bool = False) -> str:
    """What follows the word: counts, time, the (candidate, check) pairs that ran (and
    that the JSON report was not written)."""
    s = report.summary()
    counts = ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v) or "no results"
    n = s["pairs_run"]
    pairs = f"{n} (candidate, check) pair{'' if n == 1 else 's'} ran"
    lead = f", {len(report.not_run)} case(s) not run" if report.interrupted else ""
    lost = "; the JSON report was not written (--json-out)" if unwritten else ""
    return f"{lead}: {counts} in {s['wall_time_s']:.1f} s; {pairs}{lost}"


def not_checked_lines(report: Report, width: int = PIPE_WIDTH) -> list[str]:
    """One entry per distinct reason, wrapped at ``width`` (continuations indented)."""
    return [line for item in report.not_checked() for line in fill(item.line(), width).splitlines()]
