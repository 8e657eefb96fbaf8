"""``integrity``: the candidate leaves its inputs alone and returns fresh memory.

Observed on the trial and, for an op with an out-of-range rule, on the trial's first
rows with out-of-range (ignore-index) values planted: a kernel that writes into the
rows it ignores is caught on every shape, whatever the draw held. Fresh memory also
means fresh per call: a kernel that hands every call of a shape the same output buffer
overwrites the result a caller still holds (the old policy's logp, say) the next time
it is called; the results of one call, forward and backward, must keep their bits
through a second call on other inputs.
"""

from __future__ import annotations

import math

from kernelcheck.checks.check import Check
from kernelcheck.checks.contract import plant_out_of_range
from kernelcheck.checks.metrics import bits, integrity_problems, overlaps
from kernelcheck.checks.outcome import CandidateFault, Outcome
from kernelcheck.checks.rows import flat_rows
from kernelcheck.checks.trial import Trial


class Integrity(Check):
    name = "integrity"
    small_inputs = True
    PARAMS = {"max_seeds": 1, "edge_rows": 64}
    summary = (
        "inputs and the backward's upstream gradient unchanged (bit compare), outputs "
        "never alias an input nor the next call's outputs"
    )

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.problems: list[str] = []
        self.faults: list[str] = []
        self.trial: Trial | None = None

    def observe(self, trial: Trial) -> None:
        self.trial = self.trial or trial
        # the trial's own calls (shared with the accuracy checks) were watched
        self.progress("forward and backward on the trial")
        try:
            trial.ensure("outputs")
            self.problems += trial.findings.get("forward", [])
        except CandidateFault as exc:
            self.faults.append(f"forward: {exc}")
        if self.ctx.grad:
            try:
                trial.ensure("grads")
                self.problems += trial.findings.get("backward", [])
            except CandidateFault as exc:
                # a candidate that writes its inputs may well break autograd too
                self.faults.append(f"backward: {exc}")
        if self.ctx.op.out_of_range is not None:
            # edge inputs on every shape: out-of-range (ignore-index) rows, whatever the draw
            self.progress("out-of-range rows")
            inputs, lead = self._edge_inputs(trial)
            upstream = self.ctx.upstream(trial.seed, lead, salt="edge")
            self._forward_backward(inputs, upstream, " with out-of-range rows")
        self.progress("a second call")
        try:
            self._second_call(trial)
        except CandidateFault as exc:
            self.faults.append(f"a second call: {exc}")

    def _second_call(self, trial: Trial) -> None:
        """Results of one call (forward, under no_grad and under inference_mode; backward:
        outputs and gradients) against the same results after a call on other inputs of
        the same shape: unchanged bits, no shared storage."""
        inputs, lead = self._edge_inputs(trial, plant=False)
        other = self.ctx.draw(trial.seed, trial.distribution, lead, salt="second")
        calls = [
            ("forward", lambda x: self.ctx.call(self.ctx.to_device(x))),
            # a rollout's: no autograd, no version counters, where a kernel may reuse more
            ("forward (inference_mode)", lambda x: self.ctx.call(self.ctx.to_device(x), True)),
        ]
        if self.ctx.grad:
            upstream = self.ctx.upstream(trial.seed, lead, salt="second")

            def backward(x):
                outs, grads = self.ctx.call_backward(self.ctx.to_device(x), upstream)
                return list(outs) + list(grads.values())

            calls.append(("backward", backward))
        for phase, call in calls:
            first = call(inputs)
            kept = [bits(r.detach().cpu()).clone() for r in first]
            second = call(other)
            for i, (r, was) in enumerate(zip(first, kept)):
                shared = any(overlaps(r, s) for s in second)
                if shared or not bool((bits(r.detach().cpu()) == was).all()):
                    how = "shares memory with" if shared else "changed with"
                    self.problems.append(
                        f"{phase} result {i} of one call {how} the next call's results (a "
                        "reused output buffer overwrites what the caller still holds)"
                    )

    def _edge_inputs(self, trial: Trial, plant: bool = True) -> tuple[dict, tuple[int, ...]]:
        op, nlead = self.ctx.op, len(self.ctx.lead)
        n = min(int(self.params["edge_rows"]), math.prod(self.ctx.lead))
        inputs = {
            s.name: (
                flat_rows(trial.cpu_inputs[s.name], nlead)[:n].clone()
                if op.is_row_wise(s)
                else trial.cpu_inputs[s.name]
            )
            for s in op.inputs
        }
        if plant:
            plant_out_of_range(self.ctx, inputs)
        return inputs, (n,)

    def _forward_backward(self, inputs: dict, upstream: list, label: str) -> None:
        # each phase on its own: a fault in one never hides what the other shows
        dev = self.ctx.to_device(inputs)
        try:
            self._inspect(inputs, dev, self.ctx.call(dev), "forward" + label)
        except CandidateFault as exc:
            self.faults.append(f"forward{label}: {exc}")
        if not self.ctx.grad:
            return
        dev = self.ctx.to_device(inputs)
        try:
            outs, grads = self.ctx.call_backward(dev, upstream)
        except CandidateFault as exc:
            # a candidate that writes its inputs may well break autograd too
            self.faults.append(f"backward{label}: {exc}")
            return
        self._inspect(inputs, dev, list(outs) + list(grads.values()), "backward" + label)

    def _inspect(self, inputs: dict, dev: dict, outs: list, phase: str) -> None:
        self.problems += integrity_problems(inputs, dev, outs, phase)

    def outcome(self) -> Outcome:
        # every backward call of the case so far (the trial's own, and the edge rows')
        writes = self.ctx.upstream_writes
        more = f", and in {len(writes) - 1} more backward calls" if len(writes) > 1 else ""
        problems = self.problems + ([writes[0] + more] if writes else [])
        t = self.trial
        seed, dist = (t.seed, t.distribution) if t else (None, None)
        metrics = {"violations": len(problems)}
        if problems:
            found = list(dict.fromkeys(problems)) + self.faults
            return Outcome("fail", "; ".join(found), metrics, {"mode": "exact"}, seed, dist)
        if self.faults:
            return Outcome("error", "; ".join(self.faults), metrics, {"mode": "exact"}, seed, dist)
        return Outcome("pass", "", metrics, {"mode": "exact"}, seed, dist)
