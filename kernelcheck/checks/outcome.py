"""What a check returns (:class:`Outcome`), and the candidate's faults it reports.

Checks are pure judges: they call the candidate through ``CaseContext``, compare, and
return an :class:`Outcome`. They never print and never touch reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class CandidateFault(Exception):
    """The candidate raised (or ran out of memory); the check's status is ``error``."""

    out_of_memory = False


class WrongOutput(CandidateFault):
    """The candidate returned something other than the op's outputs: a ``contract`` fail."""


@dataclass
class Outcome:
    status: str  # pass | fail | error | skip
    message: str = ""
    metrics: dict = field(default_factory=dict)
    tolerance: dict | None = None
    seed: int | None = None
    distribution: str | None = None  # where the failure is: the failing row's distribution
    trial_distribution: str | None = None  # what reruns it (a mixed trial's "a+b+..."); None: same
    plots: dict = field(default_factory=dict)  # bounded data for the HTML report's plots


_OOM_TEXT = (
    "out of memory",
    "not enough memory",
    "failed to allocate",
    "can't allocate memory",
    "cannot allocate memory",  # strerror(ENOMEM)
    "bad_alloc",  # C++'s std::bad_alloc
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception says that an allocation failed (torch's, Python's, C's)."""
    text = _first_line(exc).lower()
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(
        t in text for t in _OOM_TEXT
    )


def candidate_fault(exc: Exception, what: str) -> CandidateFault:
    """A candidate's exception as a fault; running out of memory is named as such."""
    text = _first_line(exc)
    if is_out_of_memory(exc):
        fault = CandidateFault(f"out of memory: {type(exc).__name__}: {text}")
        fault.out_of_memory = True
        return fault
    return CandidateFault(f"{what} {type(exc).__name__}: {text}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else "(no message)"
