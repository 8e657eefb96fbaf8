"""``forward_accuracy`` and ``backward_accuracy``: elementwise tolerance against the gold."""

from __future__ import annotations

from kernelcheck.cases.inputs import parts_of, row_distribution
from kernelcheck.checks.check import Check
from kernelcheck.checks.metrics import ErrorProfile, ErrorStats, merge_stats
from kernelcheck.checks.outcome import CandidateFault, Outcome
from kernelcheck.checks.rows import RowSelection, flat_rows, fmt_index, row_selection
from kernelcheck.checks.trial import Trial


def _new_stats(tol, trial: Trial, row_wise: bool, judged: RowSelection | None) -> ErrorStats:
    """Empty statistics at ``tol`` with the error profile of ``trial``'s distributions: a
    row-wise tensor's rows come from them in turn (the judged ones alone); a shared one
    mixes them all."""
    dists = parts_of(trial.distribution) if row_wise else [trial.distribution]
    if row_wise and judged is not None:
        dists = [dists[k] for k in judged.kept]
    return ErrorStats(tol.atol, tol.rtol, profile=ErrorProfile(dists))


class _ToleranceCheck(Check):
    judgment = ""
    # only: the distributions whose rows are judged (empty: every one); shape_sweep's
    # judges leave out its edges row, drawn for the precision rules (relative to the
    # honest reference), which the spec's contract was never written for
    PARAMS = {"only": ()}

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.tols = {n: ctx.tolerance(self.judgment, n) for n in self.judged()}
        tol = ctx.tolerance(self.judgment) or next(iter(self.tols.values()), None)
        self.tol = tol  # the op-wide table (or the first name's): the case total's
        self.total = ErrorStats(tol.atol, tol.rtol) if tol else None
        # (trial, stats, what failed, is it row-wise: indexed with the lead dims)
        self.failed: tuple[Trial, ErrorStats, str, bool] | None = None
        self.worst: Trial | None = None
        self.worst_abs = -1.0
        self.profiles: dict[str, ErrorProfile] = {}  # per output or gradient, every trial

    def judged(self) -> list[str]:
        """The outputs or gradients this check judges, by name."""
        raise NotImplementedError

    def stats(self, name: str, trial: Trial, row_wise: bool) -> ErrorStats:
        """Statistics of one output or gradient of ``trial``, with its error profile: a
        row-wise tensor's rows come from the trial's distributions in turn; a shared one
        (a norm's weight gradient) mixes them all."""
        return _new_stats(self.tols[name], trial, row_wise, self.judged_rows(trial))

    def judged_rows(self, trial: Trial) -> RowSelection | None:
        """The rows of ``trial`` this check judges (None: every row)."""
        return row_selection(parts_of(trial.distribution), tuple(self.params["only"]))

    def _output_stats(self, trial: Trial, tol, spec, c, g) -> ErrorStats:
        """One output ``c`` of ``trial`` against its gold ``g`` at ``tol``."""
        row_wise = self.ctx.op.is_row_wise(spec)
        judged = self.judged_rows(trial)
        st = _new_stats(tol, trial, row_wise, judged)
        if row_wise:
            nlead = len(self.ctx.lead)
            update_rows(st, flat_rows(c, nlead), flat_rows(g, nlead), 0, judged)
        else:
            st.update(c.unsqueeze(0), g.unsqueeze(0))
        return st

    def skip_reason(self) -> str | None:
        missing = [n for n, t in self.tols.items() if t is None]
        if missing or self.tol is None:
            which = f" ({', '.join(missing)})" if missing and len(self.tols) > 1 else ""
            return f"the spec has no tolerance.{self.judgment} for {self.ctx.case.dtype}{which}"
        return super().skip_reason()

    def _record(self, trial: Trial, st: ErrorStats, what: str, row_wise: bool) -> None:
        merge_stats(self.total, st)
        if what in self.profiles:
            self.profiles[what].merge(st.profile)
        else:
            self.profiles[what] = st.profile
        if st.max_abs > self.worst_abs:
            self.worst, self.worst_abs = trial, st.max_abs
        if st.n_bad and self.failed is None:
            self.failed = (trial, st, what, row_wise)

    def _shape_fail(self, trial: Trial, what: str, got, want) -> None:
        if self.failed is None:
            st = ErrorStats(self.tol.atol, self.tol.rtol, n_bad=1)
            message = f"{what}: shape {tuple(got)} != expected {tuple(want)}"
            self.failed = (trial, st, message, False)
        self.total.n_bad += 1

    def outcome(self) -> Outcome:
        tol = {"atol": self.tol.atol, "rtol": self.tol.rtol}
        own = {n: {"atol": t.atol, "rtol": t.rtol} for n, t in self.tols.items() if t != self.tol}
        if own:
            tol["per_name"] = own
        metrics = self.total.metrics()
        plots = {"errors": [{"name": w, **p.to_dict()} for w, p in self.profiles.items()]}
        if self.failed is None:
            t = self.worst
            seed, dist = (t.seed, t.distribution) if t else (None, None)
            return Outcome("pass", "", metrics, tol, seed, dist, plots=plots)
        trial, st, what, row_wise = self.failed
        tol["judged"] = what  # the failing output or gradient: its own limit applied
        dist = trial.distribution
        if st.first_bad is None:
            message = what
        else:
            lead = self.ctx.lead

            judged = self.judged_rows(trial)

            def row_of(first: tuple) -> int:  # its row in the trial
                return first[0] if judged is None else judged.original(first[0])

            def at(first: tuple) -> str:
                # a row-wise tensor's index has the lead dims; a shared one (a norm's
                # weight gradient) its own shape only
                return (
                    fmt_index(row_of(first), first[1:], lead) if row_wise else str(list(first[1:]))
                )

            message = st.bounds_message(what, at)
            if row_wise:
                dist = row_distribution(trial.distribution, row_of(st.first_bad))  # that row's
        message += f" [seed {trial.seed}, {dist}]"
        return Outcome("fail", message, metrics, tol, trial.seed, dist, trial.distribution, plots)


class ForwardAccuracy(_ToleranceCheck):
    name = "forward_accuracy"
    uses = frozenset({"outputs", "gold"})
    judgment = "forward_accuracy"
    summary = "every output element within atol + rtol*|gold| of the float64 gold"

    def judged(self) -> list[str]:
        return [o.name for o in self.ctx.op.outputs]

    def observe(self, trial: Trial) -> None:
        outputs = self.ctx.op.outputs
        for spec, c, g in zip(outputs, trial.outputs, trial.gold):
            # one output: "output" (as ever); several: each by its name
            what = "output" if len(outputs) == 1 else f"output:{spec.name}"
            if tuple(c.shape) != tuple(g.shape):
                self._shape_fail(trial, what, c.shape, g.shape)
                continue
            st = self._output_stats(trial, self.tols[spec.name], spec, c, g)
            self._record(trial, st, what, self.ctx.op.is_row_wise(spec))


def update_rows(st: ErrorStats, cand, gold, start: int, judged: RowSelection | None) -> None:
    """``st`` updated with the rows of ``cand`` against ``gold`` (rows ``start`` on of the
    trial) that ``judged`` selects, counted as compacted rows (every row: None)."""
    if judged is None:
        st.update(cand, gold, row_offset=start)
        return
    keep = judged.local(start, start + gold.shape[0])
    st.update(cand[keep], gold[keep], row_offset=judged.compact(start))


class BackwardAccuracy(_ToleranceCheck):
    """Also the outputs of the backward's own forward call (made with grad, as training
    makes them), against the forward gold with the forward tolerance: a fused kernel's
    training path is never seen by ``forward_accuracy``'s no-grad call."""

    name = "backward_accuracy"
    # frozen_inputs: shape_sweep's judge: off (a path, not a size)
    PARAMS = {**_ToleranceCheck.PARAMS, "frozen_inputs": True}
    uses = frozenset({"grads", "grad_outputs", "gold"})
    judgment = "backward_accuracy"
    needs_grad = True
    summary = (
        "gradient w.r.t. each grad input within tolerance of the float64 gold gradient; "
        "the outputs of that call (with grad) within the forward tolerance"
    )

    def judged(self) -> list[str]:
        return list(self.ctx.op.grad_inputs)

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.frozen_judged = False

    def observe(self, trial: Trial) -> None:
        sets = [("", trial.grads)]
        frozen = self.params["frozen_inputs"] and len(self.ctx.op.grad_inputs) > 1
        if frozen and not self.frozen_judged:
            self.frozen_judged = True  # one trial of the case: a path, not a precision
            sets += self._frozen_grads(trial)
        nlead = len(self.ctx.lead)
        judged = []  # (what, input name, stats, its rows)
        for suffix, grads in sets:
            for n, g in grads.items():
                row_wise = self.ctx.op.is_row_wise(self.ctx.op.input(n))
                want = tuple(trial.cpu_inputs[n].shape)
                if tuple(g.shape) != want:
                    self._shape_fail(trial, f"gradient:{n}{suffix}", g.shape, want)
                    continue
                rows = flat_rows(g, nlead) if row_wise else g
                judged.append((f"gradient:{n}{suffix}", n, self.stats(n, trial, row_wise), rows))
        selection = self.judged_rows(trial)
        for sl, chunk in trial.gold_grad_chunks():
            for _, n, st, rows in judged:
                if n not in chunk:  # a chunk holds row-wise gradients or the shared ones
                    continue
                if sl is None:
                    st.update(rows.unsqueeze(0), chunk[n].unsqueeze(0))
                else:
                    update_rows(st, rows[sl], chunk[n], sl.start, selection)
        for what, n, st, _ in judged:
            self._record(trial, st, what, self.ctx.op.is_row_wise(self.ctx.op.input(n)))
        self._judge_grad_outputs(trial)

    def _frozen_grads(self, trial: Trial) -> list[tuple[str, dict]]:
        """(" (others frozen)", {name: gradient}) of a call where one grad input alone
        requires grad, per grad input: a frozen weight (LoRA's base, a frozen lm_head or
        norm) sends autograd down another path, and kernels take another kernel there."""
        names = self.ctx.op.grad_inputs
        found = []
        for k in names:
            self.progress(f"gradient:{k} alone")
            frozen = ", ".join(n for n in names if n != k)
            try:
                _, grads = self.ctx.call_backward(
                    self.ctx.to_device(trial.cpu_inputs), trial.upstream, wrt=(k,)
                )
            except CandidateFault as exc:
                if exc.out_of_memory:
                    raise
                raise CandidateFault(f"gradient:{k} ({frozen} frozen): {exc}") from None
            found.append((f" ({frozen} frozen)", {k: grads[k].cpu()}))
        return found

    def _judge_grad_outputs(self, trial: Trial) -> None:
        """The with-grad outputs against the gold, each at its forward tolerance (none in
        the spec: not judged). A failure is this check's; the metrics stay the gradients'."""
        outputs = self.ctx.op.outputs
        for spec, c, g in zip(outputs, trial.grad_outputs, trial.gold):
            tol = self.ctx.tolerance(ForwardAccuracy.judgment, spec.name)
            if tol is None or self.failed is not None:
                continue
            what = ("output" if len(outputs) == 1 else f"output:{spec.name}") + " (with grad)"
            if tuple(c.shape) != tuple(g.shape):
                self._shape_fail(trial, what, c.shape, g.shape)
                continue
            st = self._output_stats(trial, tol, spec, c, g)
            if st.n_bad:
                self.failed = (trial, st, what, self.ctx.op.is_row_wise(spec))
