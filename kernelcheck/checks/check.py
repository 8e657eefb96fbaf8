"""The base of every check: observe each trial, then give one outcome for the case."""

from __future__ import annotations

from typing import ClassVar

from kernelcheck.cases.grid import Case
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.trial import Trial
from kernelcheck.spec.model import OpSpec


class Check:
    """Base of every check: observe each trial, then give one outcome for the case."""

    name: ClassVar[str] = ""
    PARAMS: ClassVar[dict] = {}
    needs_grad: ClassVar[bool] = False
    # the trial results it reads (of Trial.PARTS): the trial frees each once no check
    # still to observe the trial reads it (at the Qwen3 shape, a gradient is GBs)
    uses: ClassVar[frozenset[str]] = frozenset()
    # observes with small inputs only (pools or draws of its own, a trial's first rows):
    # the trial's full inputs may be let go of before it runs (Trial.unmap_inputs)
    small_inputs: ClassVar[bool] = False
    # draws inputs of its own (invariance pools, other shapes): observes after every check
    # that reads the trial's results, so those are freed before its draws (it may read
    # them first, listed in ``uses``, and call ``trial.finished`` itself)
    draws_own: ClassVar[bool] = False
    # an attribute sweep runs it at the grid's first dtype only: an attribute can switch a
    # kernel's code path, and every dtype is judged at the defaults; the bitwise checks
    # (the costliest: some 800 calls per case) then judge each swept path once
    sweep_first_dtype_only: ClassVar[bool] = False
    summary: ClassVar[str] = ""

    def __init__(self, ctx: CaseContext, params: dict | None = None):
        self.ctx = ctx
        self.params = {**self.PARAMS, **(params or {})}

    @classmethod
    def lead_work(cls, op: OpSpec, case: Case, params: dict) -> int:
        """An upper bound on the product of the dims of the largest batch this check draws
        in ``case`` beyond the case's own (0: none): the case's timeout grows with it."""
        return 0

    def skip_reason(self) -> str | None:
        """Why this check does not apply to this op/candidate (None: it applies)."""
        if self.needs_grad and not self.ctx.grad:
            return self.ctx.grad_reason or "backward checks are off"
        return None

    def trials_wanted(self, trials: list[Trial]) -> list[Trial]:
        """Which trials this check observes; ``max_seeds`` limits it per distribution."""
        limit = self.params.get("max_seeds")
        if not limit:
            return trials
        seen: dict[str, int] = {}
        out = []
        for t in trials:
            if seen.get(t.distribution, 0) < limit:
                out.append(t)
                seen[t.distribution] = seen.get(t.distribution, 0) + 1
        return out

    def progress(self, probe: str) -> None:
        """Say which step of this check runs now (a crash or hang is reported on it)."""
        self.ctx.progress(self.name, probe)

    def observe(self, trial: Trial) -> None:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError
