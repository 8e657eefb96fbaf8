"""``determinism``: repeated runs on the same input give the same bits."""

from __future__ import annotations

from kernelcheck.checks.base import Check, Outcome, Trial
from kernelcheck.checks.metrics import bits, first_bit_difference


class Determinism(Check):
    name = "determinism"
    PARAMS = {"repeats": 3, "max_seeds": 1}
    summary = "repeated runs (forward, and backward when on) are bit-identical"

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.runs = 0
        self.differ = 0
        self.first: tuple[Trial, str] | None = None

    def _once(self, trial: Trial) -> list:
        outs = self.ctx.call(self.ctx.to_device(trial.cpu_inputs))
        results = [("output", o.detach().cpu()) for o in outs]
        if self.ctx.grad:
            _, grads = self.ctx.call_backward(self.ctx.to_device(trial.cpu_inputs), trial.upstream)
            results += [(f"gradient:{n}", g.cpu()) for n, g in grads.items()]
        return results

    def observe(self, trial: Trial) -> None:
        # run 1 is the trial's own call, which the accuracy checks share
        reference = [("output", o) for o in trial.outputs]
        if self.ctx.grad:
            reference += [(f"gradient:{n}", g) for n, g in trial.grads.items()]
        for r in range(1, max(2, int(self.params["repeats"]))):
            self.runs += 1
            for (what, want), (_, got) in zip(reference, self._once(trial)):
                if got.shape != want.shape or not bool((bits(got) == bits(want)).all()):
                    self.differ += 1
                    if self.first is None:
                        detail = (
                            "shape changed"
                            if got.shape != want.shape
                            else first_bit_difference(got, want)
                        )
                        self.first = (trial, f"run {r + 1} {what}: {detail} vs run 1")
                    break

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
