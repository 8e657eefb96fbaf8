"""``integrity``: the candidate leaves its inputs alone and returns fresh memory."""

from __future__ import annotations

import torch

from kernelcheck.checks.base import CandidateFault, Check, Outcome, Trial
from kernelcheck.checks.metrics import bits


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if (
        a.device != b.device
        or a.untyped_storage().nbytes() == 0
        or b.untyped_storage().nbytes() == 0
    ):
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


class Integrity(Check):
    name = "integrity"
    PARAMS = {"max_seeds": 1}
    summary = "inputs unchanged (bit compare), outputs never alias an input"

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.problems: list[str] = []
        self.trial: Trial | None = None

    def observe(self, trial: Trial) -> None:
        self.trial = self.trial or trial
        dev = self.ctx.to_device(trial.cpu_inputs)
        outs = self.ctx.call(dev)
        self._inspect(trial, dev, outs, "forward")
        if self.ctx.grad:
            dev = self.ctx.to_device(trial.cpu_inputs)
            try:
                outs, grads = self.ctx.call_backward(dev, trial.upstream)
            except CandidateFault as exc:
                if not self.problems:
                    raise
                # a candidate that writes its inputs may well break autograd too
                self.problems.append(f"backward: {exc}")
                return
            self._inspect(trial, dev, list(outs) + list(grads.values()), "backward")

    def _inspect(self, trial: Trial, dev: dict, outs: list, phase: str) -> None:
        for name, before in trial.cpu_inputs.items():
            after = dev[name].detach().cpu()
            if after.shape != before.shape or not bool((bits(after) == bits(before)).all()):
                changed = (
                    int((bits(after) != bits(before)).sum()) if after.shape == before.shape else -1
                )
                self.problems.append(f"{phase} changed input {name!r} ({changed} elements)")
        for i, o in enumerate(outs):
            for name, t in dev.items():
                if overlaps(o, t):
                    self.problems.append(f"{phase} result {i} aliases input {name!r}")

    def outcome(self) -> Outcome:
        t = self.trial
        seed, dist = (t.seed, t.distribution) if t else (None, None)
        metrics = {"violations": len(self.problems)}
        if self.problems:
            return Outcome(
                "fail",
                "; ".join(dict.fromkeys(self.problems)),
                metrics,
                {"mode": "exact"},
                seed,
                dist,
            )
        return Outcome("pass", "", metrics, {"mode": "exact"}, seed, dist)
