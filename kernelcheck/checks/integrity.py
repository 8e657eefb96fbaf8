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
from kernelcheck.checks.contract import (
    WIDE_BATCH_ELEMENTS,
    WIDE_BATCH_ROWS,
    WIDE_BATCH_WORK,
    plant_out_of_range,
)
from kernelcheck.checks.metrics import bits, integrity_problems, overlaps
from kernelcheck.checks.outcome import CandidateFault, Outcome
from kernelcheck.checks.rows import flat_rows
from kernelcheck.checks.trial import Trial


class Integrity(Check):
    name = "integrity"
    small_inputs = True
    # the second call again at a wide batch, as contract's (wide_rows: 0, none), within
    # wide_work products of a row's dims
    PARAMS = {
        "max_seeds": 1,
        "edge_rows": 64,
        "wide_rows": WIDE_BATCH_ROWS,
        "wide_elements": WIDE_BATCH_ELEMENTS,
        "wide_work": WIDE_BATCH_WORK,
    }
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
        the same shape: unchanged bits, no shared storage. Of the trial's first rows, then
        of a wide batch (:meth:`_wide_rows`), each call's inputs unchanged there too: a
        kernel may keep a static output buffer (a rollout engine's) or write its result
        over an input only past a size the trial never reaches."""
        inputs, lead = self._edge_inputs(trial, plant=False)
        other = self.ctx.draw(trial.seed, trial.distribution, lead, salt="second")
        self._second_call_of(trial, inputs, other, lead, "")
        rows = self._wide_rows()
        if rows > lead[0]:
            self.progress(f"a second call of {rows} rows")
            inputs = self.ctx.draw(trial.seed, trial.distribution, (rows,), salt="wide")
            other = self.ctx.draw(trial.seed, trial.distribution, (rows,), salt="wide second")
            self._second_call_of(trial, inputs, other, (rows,), f" of {rows} rows")

    def _wide_rows(self) -> int:
        """The wide batch's rows (0: none): in the first dtype,
        ``CaseContext.big_batch_rows`` at the params ``wide_rows``, ``wide_elements`` and
        ``wide_work``."""
        if not self.ctx.at_first_dtype():
            return 0
        p = self.params
        return self.ctx.big_batch_rows(
            int(p["wide_rows"]), int(p["wide_elements"]), int(p["wide_work"])
        )

    def _second_call_of(self, trial: Trial, inputs: dict, other: dict, lead, batch: str) -> None:
        """:meth:`_second_call` on ``inputs`` then ``other`` (CPU, lead ``lead``);
        ``batch`` names the batch in a finding. (A result kept by the inputs' address
        through a refill in place is ``contract``'s: its wide-batch refill.)"""
        upstream = self.ctx.upstream(trial.seed, lead, salt="second") if self.ctx.grad else []
        # inference: None for the backward; True: a rollout's (no autograd, no version
        # counters, where a kernel may reuse more)
        modes = [("forward", False), ("forward (inference_mode)", True)]
        if self.ctx.grad:
            modes.append(("backward", None))
        for phase, inference in modes:
            handed = [self.ctx.to_device(inputs), self.ctx.to_device(other)]
            first = self._results(handed[0], inference, upstream)
            kept = [bits(r.detach().cpu()).clone() for r in first]
            second = self._results(handed[1], inference, upstream)
            for i, (r, was) in enumerate(zip(first, kept)):
                shared = any(overlaps(r, s) for s in second)
                if shared or not bool((bits(r.detach().cpu()) == was).all()):
                    how = "shares memory with" if shared else "changed with"
                    self.problems.append(
                        f"{phase} result {i}{batch} of one call {how} the next call's results "
                        "(a reused output buffer overwrites what the caller still holds)"
                    )
            for given, dev in zip((inputs, other), handed):
                self.problems += integrity_problems(given, dev, [], f"{phase}{batch}")

    def _results(self, dev: dict, inference: bool | None, upstream: list) -> list:
        """A forward call's outputs (``inference``: under inference_mode), or (None) a
        backward call's outputs and gradients."""
        if inference is not None:
            return self.ctx.call(dev, inference)
        outs, grads = self.ctx.call_backward(dev, upstream)
        return list(outs) + list(grads.values())

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
