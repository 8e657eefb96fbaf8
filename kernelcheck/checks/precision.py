"""``forward_precision``: is the candidate as precise as an honest fp32 computation?

Because the gold is exact on the already-rounded inputs, a kernel that accumulates in
fp32 lands within fp32 rounding of the gold whatever the input dtype. One that
accumulates in bf16 may still pass the loose bf16 contract (6e-2), so it is judged here
against the error of an honest fp32 reference on the same inputs, the rule
FlashAttention's tests use:

    max|cand - gold| <= ratio * max|ref - gold| + floor_ulp * ulp_fp32(max|gold|)
"""

from __future__ import annotations

from kernelcheck.cases.inputs import parts_of
from kernelcheck.checks.base import Check, Outcome, Trial, flat_rows
from kernelcheck.checks.metrics import ErrorStats, fp32_ulp


class ForwardPrecision(Check):
    name = "forward_precision"
    PARAMS = {"ratio": 2.0, "floor_ulp": 8}
    summary = "error <= ratio x an honest fp32 reference's error + a rounding floor; reports ULPs"

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.worst_ratio = 0.0
        self.max_ulp = 0
        self.cand_max = 0.0
        self.ref_max = 0.0
        self.failed: tuple[Trial, float, float, float] | None = None
        self.worst: tuple[Trial, str] | None = None

    def skip_reason(self) -> str | None:
        if self.ctx.reference_fn is None:
            return f"op {self.ctx.op.name} declares no fp32 reference"
        return None

    def observe(self, trial: Trial) -> None:
        nlead = len(self.ctx.lead)
        parts = parts_of(trial.distribution)
        for c, r, g in zip(trial.outputs, trial.reference, trial.gold):
            if tuple(c.shape) != tuple(g.shape):
                if self.failed is None:
                    self.failed = (trial, trial.distribution, float("inf"), 0.0, 0.0)
                continue
            c, r, g = flat_rows(c, nlead), flat_rows(r, nlead), flat_rows(g, nlead)
            # judged per distribution: one distribution's rounding must not hide another's
            for k, dist in enumerate(parts):
                rows = slice(k, None, len(parts))
                self._judge(trial, dist, c[rows], r[rows], g[rows])

    def _judge(self, trial: Trial, dist: str, c, r, g) -> None:
        cand, ref = ErrorStats(), ErrorStats()
        cand.update(c, g)
        ref.update(r, g)
        floor = self.params["floor_ulp"] * fp32_ulp(ref.gold_absmax)
        bound = self.params["ratio"] * ref.max_abs + floor
        if ref.max_abs:
            ratio = cand.max_abs / ref.max_abs
        else:
            ratio = 0.0 if not cand.max_abs else float("inf")
        self.max_ulp = max(self.max_ulp, cand.max_ulp)
        self.cand_max = max(self.cand_max, cand.max_abs)
        self.ref_max = max(self.ref_max, ref.max_abs)
        if ratio >= self.worst_ratio:
            self.worst_ratio, self.worst = ratio, (trial, dist)
        bad = cand.n_nonfinite > 0 or cand.max_abs > bound
        if bad and self.failed is None:
            self.failed = (trial, dist, cand.max_abs, ref.max_abs, floor)

    def outcome(self) -> Outcome:
        tol = {"ratio": self.params["ratio"], "floor_ulp": self.params["floor_ulp"]}
        metrics = {
            "ratio": self.worst_ratio,
            "max_ulp": self.max_ulp,
            "max_abs": self.cand_max,
            "reference_max_abs": self.ref_max,
        }
        if self.failed is None:
            seed, dist = (self.worst[0].seed, self.worst[1]) if self.worst else (None, None)
            return Outcome("pass", "", metrics, tol, seed, dist)
        trial, dist, cand, ref, floor = self.failed
        if cand == float("inf"):
            msg = "output shape differs from the gold"
        else:
            msg = (
                f"max error {cand:.3e} > {self.params['ratio']:g} x fp32 reference error {ref:.3e}"
                f" + floor {floor:.3e} ({self.params['floor_ulp']} ulp): accumulates in lower"
                " precision than fp32?"
            )
        return Outcome("fail", f"{msg} [seed {trial.seed}, {dist}]", metrics, tol, trial.seed, dist)
