"""``determinism``: repeated runs on the same input give the same bits.

Outputs (one value per row) are compared whole; gradients by 32-bit row digests
(:func:`~kernelcheck.checks.metrics.row_digests`), so a repeat never holds two copies of
a Qwen3-sized gradient: the trial's own gradient is freed before the repeats run.
"""

from __future__ import annotations

import torch

from kernelcheck.checks.base import Check, Outcome, Trial, fmt_index
from kernelcheck.checks.metrics import bits, first_bit_difference, row_digests


class Determinism(Check):
    name = "determinism"
    PARAMS = {"repeats": 3, "max_seeds": 1}
    summary = "repeated runs (forward, and backward when on) are bit-identical"
    uses = frozenset({"outputs", "grads"})

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.runs = 0
        self.differ = 0
        self.first: tuple[Trial, str] | None = None

    def _repeat(self, trial: Trial) -> list:
        outs = trial.own_call(self.ctx.call)
        results = [("output", o.detach().cpu()) for o in outs]
        if self.ctx.grad:
            _, grads = trial.own_call(lambda dev: self.ctx.call_backward(dev, trial.upstream))
            # digested at once: a Qwen3-sized gradient is freed before anything else runs
            results += [
                (f"gradient:{n}", row_digests(self.ctx.input_rows(n, g.cpu())))
                for n, g in grads.items()
            ]
        return results

    def observe(self, trial: Trial) -> None:
        # run 1 is the trial's own call, which the accuracy checks share
        reference = [("output", o) for o in trial.outputs]
        if self.ctx.grad:
            reference += [
                (f"gradient:{n}", row_digests(self.ctx.input_rows(n, g)))
                for n, g in trial.grads.items()
            ]
        trial.finished(self.name)  # the digests are all the repeats need
        for r in range(1, max(2, int(self.params["repeats"]))):
            self.runs += 1
            detail = self._compare(reference, self._repeat(trial))  # freed before the next
            if detail:
                self.differ += 1
                if self.first is None:
                    self.first = (trial, f"run {r + 1} {detail} vs run 1")

    def _compare(self, reference: list, results: list) -> str:
        """The first difference of one repeat from run 1 ('' when none)."""
        for (what, want), (_, got) in zip(reference, results):
            detail = self._difference(what, got, want)
            if detail:
                return f"{what}: {detail}"
        return ""

    def _difference(self, what: str, got: torch.Tensor, want: torch.Tensor) -> str:
        """'' when ``got`` has ``want``'s bits (``want``: the tensor, or a gradient's digests)."""
        if what == "output":
            if got.shape != want.shape:
                return "shape changed"
            same = bool((bits(got) == bits(want)).all())
            return "" if same else first_bit_difference(got, want)
        if got.shape[0] != want.shape[0]:
            return "shape changed"
        differ = (got != want).nonzero().flatten()  # row digests, both
        if not len(differ):
            return ""
        row = int(differ[0])
        where = fmt_index(row, (), self.ctx.lead) if got.shape[0] > 1 else "[]"
        return f"{len(differ)} of {got.shape[0]} rows differ in bits (first: row {where})"

    def outcome(self) -> Outcome:
        # ``repeats`` counts every run, the first included, as the spec's ``repeats`` does
        metrics = {"repeats": self.runs + 1, "differing_runs": self.differ}
        tol = {"mode": "bitwise"}
        if self.first:
            t, what = self.first
            msg = (
                f"{self.differ} of {self.runs} runs after the first differ from it; first: {what} "
                f"[seed {t.seed}, {t.distribution}]"
            )
            return Outcome("fail", msg, metrics, tol, t.seed, t.distribution)
        return Outcome("pass", "", metrics, tol)
