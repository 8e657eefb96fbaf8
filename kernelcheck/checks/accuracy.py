"""``forward_accuracy`` and ``backward_accuracy``: elementwise tolerance against the gold."""

from __future__ import annotations

from kernelcheck.cases.inputs import row_distribution
from kernelcheck.checks.base import Check, Outcome, Trial, flat_rows, fmt_index
from kernelcheck.checks.metrics import ErrorStats, merge_stats


class _ToleranceCheck(Check):
    judgment = ""

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        tol = ctx.tolerance(self.judgment)
        self.tol = tol
        self.total = ErrorStats(tol.atol, tol.rtol) if tol else None
        self.failed: tuple[Trial, ErrorStats, str] | None = None
        self.worst: Trial | None = None
        self.worst_abs = -1.0

    def skip_reason(self) -> str | None:
        if self.tol is None:
            return f"the spec has no tolerance.{self.judgment} for {self.ctx.case.dtype}"
        return super().skip_reason()

    def _record(self, trial: Trial, st: ErrorStats, what: str) -> None:
        merge_stats(self.total, st)
        if st.max_abs > self.worst_abs:
            self.worst, self.worst_abs = trial, st.max_abs
        if st.n_bad and self.failed is None:
            self.failed = (trial, st, what)

    def _shape_fail(self, trial: Trial, what: str, got, want) -> None:
        if self.failed is None:
            st = ErrorStats(self.tol.atol, self.tol.rtol, n_bad=1)
            self.failed = (trial, st, f"{what}: shape {tuple(got)} != expected {tuple(want)}")
        self.total.n_bad += 1

    def outcome(self) -> Outcome:
        tol = {"atol": self.tol.atol, "rtol": self.tol.rtol}
        metrics = self.total.metrics()
        if self.failed is None:
            t = self.worst
            return Outcome(
                "pass", "", metrics, tol, t.seed if t else None, t.distribution if t else None
            )
        trial, st, what = self.failed
        dist = trial.distribution
        if st.first_bad is None:
            message = what
        else:
            lead = self.ctx.lead
            where = fmt_index(st.first_bad[0], st.first_bad[1:], lead)
            c, g = st.first_bad_values
            message = (
                f"{what}: {st.n_bad} of {st.n} elements outside atol={self.tol.atol:g}"
                f"+rtol={self.tol.rtol:g}*|gold|; first at {where}: {c!r} vs gold {g!r}"
            )
            if st.n_nonfinite:
                where = fmt_index(st.first_nonfinite[0], st.first_nonfinite[1:], lead)
                message += f"; {st.n_nonfinite} NaN/Inf where gold is finite (first at {where})"
            if what.startswith("output") or self.ctx.op.is_row_wise(self.ctx.op.input(what[9:])):
                dist = row_distribution(trial.distribution, st.first_bad[0])  # that row's
        message += f" [seed {trial.seed}, {dist}]"
        return Outcome("fail", message, metrics, tol, trial.seed, dist, trial.distribution)


class ForwardAccuracy(_ToleranceCheck):
    name = "forward_accuracy"
    uses = frozenset({"outputs", "gold"})
    judgment = "forward_accuracy"
    summary = "every output element within atol + rtol*|gold| of the float64 gold"

    def observe(self, trial: Trial) -> None:
        nlead = len(self.ctx.lead)
        for i, (c, g) in enumerate(zip(trial.outputs, trial.gold)):
            what = "output" if len(trial.gold) == 1 else f"output {i}"
            if tuple(c.shape) != tuple(g.shape):
                self._shape_fail(trial, what, c.shape, g.shape)
                continue
            st = ErrorStats(self.tol.atol, self.tol.rtol)
            st.update(flat_rows(c, nlead), flat_rows(g, nlead))
            self._record(trial, st, what)


class BackwardAccuracy(_ToleranceCheck):
    name = "backward_accuracy"
    uses = frozenset({"grads"})
    judgment = "backward_accuracy"
    needs_grad = True
    summary = "gradient w.r.t. each grad input within tolerance of the float64 gold gradient"

    def observe(self, trial: Trial) -> None:
        grads = trial.grads
        nlead = len(self.ctx.lead)
        per_input = {n: ErrorStats(self.tol.atol, self.tol.rtol) for n in grads}
        flat = {}
        for n, g in grads.items():
            want = tuple(trial.cpu_inputs[n].shape)
            if tuple(g.shape) != want:
                self._shape_fail(trial, f"gradient:{n}", g.shape, want)
                per_input.pop(n)
                continue
            row_wise = self.ctx.op.is_row_wise(self.ctx.op.input(n))
            flat[n] = flat_rows(g, nlead) if row_wise else g
        for sl, chunk in trial.gold_grad_chunks():
            for n, gold_rows in chunk.items():
                if n not in per_input:
                    continue
                if sl is None:
                    per_input[n].update(flat[n].unsqueeze(0), gold_rows.unsqueeze(0))
                else:
                    per_input[n].update(flat[n][sl], gold_rows, row_offset=sl.start)
        for n, st in per_input.items():
            self._record(trial, st, f"gradient:{n}")
