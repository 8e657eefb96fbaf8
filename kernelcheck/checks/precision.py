"""``forward_precision``: is the candidate as precise as an honest fp32 computation?

Because the gold is exact on the already-rounded inputs, a kernel that accumulates in
fp32 lands within fp32 rounding of the gold whatever the input dtype. One that
accumulates in bf16 may still pass the loose bf16 contract (6e-2), so it is judged here
against the error of an honest fp32 reference on the same inputs, the rule
FlashAttention's tests use:

    max|cand - gold| <= ratio * max|ref - gold| + floor_ulp * ulp_fp32(max|gold|)

(``max|gold|`` at least ``floor_magnitude``, where the op's spec sets one.)

Where the floor is larger than ``ratio x`` the reference's error (an elementwise op whose
reference is exactly rounded, say), the limit is mostly the floor: the check then proves
"within a few ulps", not "as precise as fp32". The result says so (``floor_dominated``),
so a reader does not take a pass there for the stronger claim.
"""

from __future__ import annotations

import torch

from kernelcheck.cases.inputs import parts_of
from kernelcheck.checks.check import Check
from kernelcheck.checks.diagnose import Evidence, gather, likely_cause
from kernelcheck.checks.metrics import ErrorStats, fp32_ulp, sig3
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.rounding import (
    RoundingCounts,
    count_rounding,
    first_rounding_problem,
    rounding_failure,
    worst_excess,
)
from kernelcheck.checks.rows import flat_rows, fmt_index
from kernelcheck.checks.trial import Trial


class ForwardPrecision(Check):
    name = "forward_precision"
    uses = frozenset({"outputs", "gold", "reference"})
    # floor_magnitude: the floor's ulps are of max(max|gold|, this), for an op whose
    # output is a log near 0 of a sum near 1 (logp at a confident token), whose honest
    # fp32 error is the sum's: ulps of 1, not of |output|
    # only: the distributions judged (empty: every one); shape_sweep judges its edges row.
    # floor_of_inputs: the floor's ulps also of the judged rows' largest finite input, the
    # magnitude an honest kernel computes with (an entropy or a KL of 0.07 from logits of
    # 20 errs in ulps of 20): where one row per distribution is all there is to scale by
    PARAMS = {
        "ratio": 2.0,
        "floor_ulp": 8,
        "floor_magnitude": 0.0,
        "only": (),
        "floor_of_inputs": False,
        # a 16-bit output rounded one way fails (rounding.py); off where a few rows make
        # the direction unsteady
        "judge_rounding": True,
    }
    summary = "error <= ratio x an honest fp32 reference's error + a rounding floor; reports ULPs"

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.max_ulp = 0
        self.nonfinite = 0
        self.failed: tuple | None = None
        self.evidence: Evidence | None = None  # what the failure's hint cites
        # the judged part closest to its limit:
        # (margin, trial, dist, cand, ref, ratio, bound, floor)
        self.closest: tuple | None = None
        # per distribution, the seed closest to its limit: (margin, cand, ref, bound)
        self.by_distribution: dict[str, tuple[float, float, float, float]] = {}
        # per 16-bit output, which way it is off the gold's nearest value (rounding.py)
        self.rounding: dict[str, RoundingCounts] = {}
        self.first_trial: Trial | None = None

    def skip_reason(self) -> str | None:
        if self.ctx.reference_fn is None:
            return f"op {self.ctx.op.name} declares no fp32 reference"
        return None

    def _out_of_range_rows(self, trial: Trial) -> tuple[str, torch.Tensor] | None:
        """(what, mask) of the rows whose index input is out of range, if the op has some."""
        mask = self.ctx.out_of_range_rows(trial.cpu_inputs, len(self.ctx.lead))
        if mask is None:
            return None
        rule = self.ctx.op.out_of_range
        return f"{rule.input} (expected exactly {rule.output!r})", mask

    def observe(self, trial: Trial) -> None:
        nlead = len(self.ctx.lead)
        parts = parts_of(trial.distribution)
        oor = self._out_of_range_rows(trial)
        names = [o.name for o in self.ctx.op.outputs] if len(self.ctx.op.outputs) > 1 else None
        for i, (c, r, g) in enumerate(zip(trial.outputs, trial.reference, trial.gold)):
            if tuple(c.shape) != tuple(g.shape):
                if self.failed is None:
                    self.failed = (trial, trial.distribution, float("inf"), 0.0, 0.0, "", 0, 0)
                continue
            self.first_trial = self.first_trial or trial
            name = self.ctx.op.outputs[i].name
            self.rounding.setdefault(name, RoundingCounts()).add(count_rounding(c, g))
            c, r, g = flat_rows(c, nlead), flat_rows(r, nlead), flat_rows(g, nlead)
            # judged per distribution: one distribution's rounding must not hide another's
            for k, dist in enumerate(parts):
                if self.params["only"] and dist not in self.params["only"]:
                    continue
                rows = slice(k, None, len(parts))
                mask = None if oor is None or oor[1].numel() != c.shape[0] else oor[1][rows]
                part = (trial, rows, names[i] if names else "")
                self._judge(part, dist, c[rows], r[rows], g[rows], mask, oor and oor[0])

    def _judge(self, part: tuple, dist: str, c, r, g, out_of_range, what) -> None:
        trial = part[0]
        cand, ref = ErrorStats(), ErrorStats()
        cand.update(c, g)
        ref.update(r, g)
        magnitude = max(ref.gold_absmax, float(self.params["floor_magnitude"]))
        if self.params["floor_of_inputs"]:
            magnitude = max(magnitude, self._input_magnitude(trial, part[1]))
        floor = self.params["floor_ulp"] * fp32_ulp(magnitude)
        bound = self.params["ratio"] * ref.max_abs + floor
        if ref.max_abs:
            ratio = cand.max_abs / ref.max_abs
        else:
            ratio = 0.0 if not cand.max_abs else float("inf")
        self.max_ulp = max(self.max_ulp, cand.max_ulp or 0)
        margin = cand.max_abs / bound if bound else float("inf")
        if dist not in self.by_distribution or margin > self.by_distribution[dist][0]:
            self.by_distribution[dist] = (margin, cand.max_abs, ref.max_abs, bound)
        if self.closest is None or margin > self.closest[0]:
            self.closest = (margin, trial, dist, cand.max_abs, ref.max_abs, ratio, bound, floor)
        self.nonfinite += cand.n_nonfinite
        bad = cand.n_nonfinite > 0 or cand.max_abs > bound
        if bad and self.failed is None:
            cause = self._cause(part, cand, (c, g, ratio, bound), out_of_range, what)
            if cand.max_abs <= bound:  # the NaN/Inf alone break it: say so, not "error > limit"
                cause = f"finite max error {cand.max_abs:.3e} is within the limit, but {cause}"
            self.failed = (trial, dist, cand.max_abs, ref.max_abs, floor, cause, ratio, bound)

    def _input_magnitude(self, trial: Trial, rows: slice) -> float:
        """The largest finite |entry| of ``rows`` of the trial's row-wise float inputs."""
        top = 0.0
        for spec in self.ctx.op.inputs:
            x = trial.cpu_inputs.get(spec.name)
            if x is None or not x.is_floating_point() or not self.ctx.op.is_row_wise(spec):
                continue
            part = flat_rows(x, len(self.ctx.lead))[rows].float().abs()
            finite = part[torch.isfinite(part)]
            if finite.numel():
                top = max(top, float(finite.max()))
        return top

    def _cause(self, part: tuple, cand: ErrorStats, judged: tuple, out_of_range, what) -> str:
        """The hint, from the evidence gathered on the in-range rows (kept for the metrics)."""
        c, g, ratio, bound = judged
        only_oor = None
        keep = torch.arange(c.shape[0])
        if out_of_range is not None and bool(out_of_range.any()):
            inside, outside = ErrorStats(), ErrorStats()
            inside.update(c[~out_of_range], g[~out_of_range])
            outside.update(c[out_of_range], g[out_of_range])
            if inside.max_abs <= bound and not inside.n_nonfinite:
                only_oor = (what, outside.max_abs)
            keep = keep[~out_of_range]
        if not cand.n_nonfinite and only_oor is None and keep.numel():
            self.evidence = gather(
                c[keep],
                g[keep],
                ratio,
                bound,
                self._locator(part, keep),
                self._row_absmax(part, keep),
            )
        return likely_cause(cand.n_nonfinite, only_oor, self.evidence)

    def _locator(self, part: tuple, keep: torch.Tensor):
        """Row ``i`` of the judged rows -> its index in the trial's output (named when the
        op has several)."""
        trial, rows, name = part
        lead = tuple(trial.gold[0].shape[: len(self.ctx.lead)])

        def locate(i: int, rest: tuple) -> str:
            return name + fmt_index(rows.start + int(keep[i]) * rows.step, rest, lead)

        return locate

    def _row_absmax(self, part: tuple, keep: torch.Tensor):
        """Row ``i`` of the judged rows -> the largest |input| in it (row-wise float inputs)."""
        trial, rows, _ = part
        op, nlead = self.ctx.op, len(self.ctx.lead)
        names = [s.name for s in op.inputs if op.is_row_wise(s)]

        def absmax(i: int) -> float | None:
            row = rows.start + int(keep[i]) * rows.step
            vals = [
                float(flat_rows(trial.cpu_inputs[n], nlead)[row].double().abs().max())
                for n in names
                if trial.cpu_inputs[n].is_floating_point() and trial.cpu_inputs[n].numel()
            ]
            return max(vals) if vals else None

        return absmax

    def outcome(self) -> Outcome:
        """Metrics and ``limit`` belong to one judged part: the failing one, else the one
        closest to its limit, so the ratio shown is the one the limit was applied to."""
        tol = {"ratio": self.params["ratio"], "floor_ulp": self.params["floor_ulp"]}
        plots = {
            "precision": {
                d: {"max_abs": sig3(c), "reference_max_abs": sig3(r), "limit": sig3(b)}
                for d, (_, c, r, b) in self.by_distribution.items()
            }
        }
        rounded = self._rounding_failure(tol, plots)
        if rounded is not None:
            return rounded
        if self.failed is None:
            if self.closest is None:
                return Outcome("pass", "", {"max_ulp": self.max_ulp}, tol, plots=plots)
            _, trial, dist, cand, ref, ratio, bound, floor = self.closest
            tol["limit"] = bound
            metrics = self._metrics(ratio, cand, ref, floor)
            excess = worst_excess(self.rounding)
            if excess is not None:
                metrics["rounding_excess"] = excess
            return Outcome("pass", "", metrics, tol, trial.seed, dist, plots=plots)
        trial, dist, cand, ref, floor, cause, ratio, bound = self.failed
        if cand == float("inf"):
            msg = "output shape differs from the gold"
            metrics = {"max_ulp": self.max_ulp}
        else:
            tol["limit"] = bound
            metrics = self._metrics(ratio, cand, ref, floor)
            if self.evidence is not None:
                metrics["evidence"] = self.evidence.metrics()
            if cand > bound:
                msg = (
                    f"max error {cand:.3e} > limit {bound:.3e} = {self.params['ratio']:g} x fp32 "
                    f"reference error {ref:.3e} + floor {floor:.3e} "
                    f"({self.params['floor_ulp']} ulp): {cause}"
                )
            else:
                msg = f"limit {bound:.3e}: {cause}"
            if metrics["floor_dominated"]:
                msg += (
                    f" (floor-dominated: the {self.params['floor_ulp']}-ulp floor exceeds "
                    f"{self.params['ratio']:g} x the reference error)"
                )
        found = first_rounding_problem(self.rounding, "output {!r}")
        if found is not None:  # the likely cause of the error, where there is one
            msg += f"; also {found[0]}"
        return Outcome(
            "fail",
            f"{msg} [seed {trial.seed}, {dist}]",
            metrics,
            tol,
            trial.seed,
            dist,
            trial.distribution,
            plots,
        )

    def _rounding_failure(self, tol: dict, plots: dict) -> Outcome | None:
        """A fail where no other failure was found and a 16-bit output is rounded one way."""
        t = self.first_trial
        if self.failed is not None or t is None or not self.params["judge_rounding"]:
            return None
        found = rounding_failure(self.rounding, "output {!r}", self.ctx.case.seeds, t.distribution)
        if found is None:
            return None
        metrics = {"max_ulp": self.max_ulp, "rounding_excess": found[1]}
        return Outcome("fail", found[0], metrics, tol, t.seed, t.distribution, None, plots)

    def _metrics(self, ratio: float, cand: float, ref: float, floor: float) -> dict:
        out = {"ratio": ratio, "max_ulp": self.max_ulp, "max_abs": cand, "reference_max_abs": ref}
        out["floor_dominated"] = floor_dominated(floor, self.params["ratio"], ref)
        if self.nonfinite:
            out["n_nonfinite"] = self.nonfinite
        return out


def floor_dominated(floor: float, ratio: float, reference_error: float) -> bool:
    """True when the rounding floor, not ``ratio x`` the honest reference's error, makes
    up most of the limit: there the check bounds ulps, not precision relative to fp32."""
    return floor > ratio * reference_error
