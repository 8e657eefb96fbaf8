"""``determinism``: repeated runs on the same input give the same bits.

The repeats run at the process's thread count, and then ``thread_repeats`` more at
``threads`` CPU threads (8, even on 2 cores), and one at ``odd_threads`` (3): partial
sums that threads add in the order they finish agree at 2 threads often enough, and
differ at 8; work that 8 threads split evenly leaves a remainder at 3. A row's bits may not
depend on the thread count either, so those runs are compared with run 1 too. So is one
under ``torch.use_deterministic_algorithms(True)`` (a trainer's setting: a kernel that
takes another path there gives the trainer other bits than the rollout), and so are a
call under ``torch.inference_mode`` and the with-grad call's outputs: one input, one set
of bits, whatever the autograd mode (a PPO ratio of old and new logps is then exactly 1).

Outputs (one value per row) are compared whole; gradients by 32-bit row digests
(:func:`~kernelcheck.checks.metrics.row_digests`), so a repeat never holds two copies of
a Qwen3-sized gradient: the trial's own gradient is freed before the repeats run.
"""

from __future__ import annotations

import math

import torch

from kernelcheck import dtypes
from kernelcheck.cases.grid import at_first_grid_case, row_work
from kernelcheck.checks.check import Check
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.metrics import bits, first_bit_difference, row_digests
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.rows import fmt_index
from kernelcheck.checks.threads import deterministic_algorithms, torch_threads
from kernelcheck.checks.trial import Trial

WITH_GRAD = "output (with grad)"  # the backward's own forward call: a training path
FIRST_BATCH = 64  # a pristine process's first call when the case has a single row
# a big first call's rows are a multiple of this (a warm-up batch is a round count)
FIRST_BATCH_MULTIPLE = 64
FIRST_CALL_DISTRIBUTION = "normal"
BASE = "a pristine process whose first call was the case process's"


class Determinism(Check):
    name = "determinism"
    PARAMS = {
        "repeats": 3,
        "max_seeds": 1,
        "threads": 8,
        "thread_repeats": 2,
        # one more run at an odd count (0: none): work that 8 threads split evenly
        # leaves a remainder at 3, which a partition that floors n / threads drops
        "odd_threads": 3,
        # a training batch for the gradients of shared inputs: rows up to this many, and
        # up to big_work products of a row's dims (0: no such runs)
        "big_rows": 4096,
        "big_work": 1 << 32,
        # in one case per op (CaseContext.is_big_batch_case, at the grid's first dtype and
        # shape): rows up to this many, up to huge_work products of a row's dims and
        # huge_bytes of row-wise inputs: a kernel may add its weight-gradient partials in
        # finish order (atomics) only past a threshold of several thousand rows, or where
        # a fixed reduction's workspace for 2^17 rows runs out
        "huge_rows": 262145,
        "huge_work": 1 << 30,
        "huge_bytes": 1 << 28,
        # runs in pristine processes whose first call was another (runner/pristine.py;
        # 0: none)
        "pristine": 1,
        # one of them begins with a big batch (a serving warm-up, a trainer's
        # micro-batch): rows up to this many, up to first_batch_work products of a
        # row's dims, a multiple of FIRST_BATCH_MULTIPLE (an autotuner that splits a row
        # only while rows cannot fill the SMs picks another config there than at the
        # grid's few rows; a plan cached from a warm-up of 4,096 rows may pack 16 rows a
        # program and drop its row mask, as they divide: a round-26 red team's entropy)
        "first_batch_rows": 4096,
        "first_batch_work": 1 << 26,
    }

    summary = (
        "repeated runs (forward, and backward with its call's outputs when on) are bit-identical"
    )
    uses = frozenset({"outputs", "grads", "grad_outputs"})

    @classmethod
    def lead_work(cls, op, case, params: dict) -> int:
        """The training batch's (``big_rows``; ``huge_rows`` in the grid's first case, an
        upper bound on the big-batch case's), within its products of a row's dims."""
        params = {**cls.PARAMS, **params}
        work_of_row = row_work(op, case.sizes)
        work = min(int(params["big_rows"]) * work_of_row, int(params["big_work"]))
        if at_first_grid_case(op, case):
            huge = min(int(params["huge_rows"]) * work_of_row, int(params["huge_work"]))
            work = max(work, huge)
        return work

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.runs = 0
        self.differ = 0
        self.first: tuple[Trial, str] | None = None
        self.batch_done = False
        self.unconfirmed = 0  # pristine processes that disagreed among themselves
        self.unconfirmed_first: str | None = None  # what the first of them saw differ

    def _repeat(self, trial: Trial) -> list:
        outs = trial.own_call(self.ctx.call)
        results = [("output", o.detach().cpu()) for o in outs]
        if self.ctx.grad:
            outs, grads = trial.own_call(lambda dev: self.ctx.call_backward(dev, trial.upstream))
            results += self._backward_results(outs, grads)
        return results

    def _backward_results(self, outs: list, grads: dict) -> list:
        """A backward call's gradients as row digests (at once: a Qwen3-sized gradient is
        freed before anything else runs), then its outputs."""
        digests = [
            (f"gradient:{n}", row_digests(self.ctx.input_rows(n, g.cpu())))
            for n, g in grads.items()
        ]
        return digests + [(WITH_GRAD, o.detach().cpu()) for o in outs]

    def observe(self, trial: Trial) -> None:
        # run 1 is the trial's own call, which the accuracy checks share
        reference = [("output", o) for o in trial.outputs]
        if self.ctx.grad:
            reference += [
                (f"gradient:{n}", row_digests(self.ctx.input_rows(n, g)))
                for n, g in trial.grads.items()
            ]
            reference += [(WITH_GRAD, o) for o in trial.grad_outputs]
        trial.finished(self.name)  # the digests are all the repeats need
        plain = max(2, int(self.params["repeats"]))
        threads = int(self.params["threads"])
        runs = [(r, None) for r in range(1, plain)]
        runs += [(plain + k, threads) for k in range(int(self.params["thread_repeats"]))]
        if int(self.params["odd_threads"]):
            runs.append((len(runs) + 1, int(self.params["odd_threads"])))
        for r, n in runs:
            if n is None:
                results = self._repeat(trial)
            else:
                with torch_threads(n):
                    results = self._repeat(trial)
            at = "" if n is None else f" (at {n} threads)"
            self._judge(trial, reference, results, f"run {r + 1}{at}")  # freed before the next
        with deterministic_algorithms():
            results = self._repeat(trial)
        self._judge(trial, reference, results, f"run {len(runs) + 2} (deterministic mode)")
        self._pristine_process(trial, reference)
        self._other_modes(trial, reference)
        if not self.batch_done:
            self.batch_done = True
            self._training_batch(trial)

    def _pristine_process(self, trial: Trial, reference: list) -> None:
        """Pristine processes with other first calls, each compared with a pristine
        process whose first call was the case process's (the trial, no grad): one whose
        first call is a rollout's (another row count's realistic rows, no grad, at 1
        thread: a rollout worker's), then those rows' call and the trial's calls; one
        whose first call is a training step (the trial's shape, with grad); one whose
        first call is in another dtype, and one whose first call is a big batch (a decode
        batch, a micro-batch: hundreds of rows where the grid has tens, at ``threads``),
        each then the trial's calls. A choice fixed at a process's first call and kept
        (an autotuner keyed on the vocab that splits rows only while they cannot fill the
        SMs, a split count read from the first call's thread count as a GPU kernel reads
        the SM count once, a plan cached at the first batch size or mode, a fast path left
        for a safe one at the first overflow: every case's first trial holds overflowing
        rows) gives a rollout worker other bits than the
        trainer, or runs a path no call here took. Compared between pristine processes,
        never with this one: forks of one zygote, their memory laid out alike (a BLAS
        may pick its path by a buffer's address)."""
        ctx = self.ctx
        if not int(self.params["pristine"]) or ctx.in_pristine_process is None:
            return
        seed, dist, one = trial.seed, trial.distribution, first_call_lead(ctx.lead)
        drawn = first_call_distribution(ctx)
        firsts = ["trial", "rollout", "training"] if ctx.grad else ["trial", "rollout"]
        other = other_dtype(ctx)
        firsts += ["dtype"] if other else []
        big = self._first_batch_lead()
        firsts += ["batch"] if big else []

        def run_all() -> dict:
            ctx.progress(self.name, "pristine processes: the case's first call, then others")
            return {
                f: ctx.in_pristine_process(
                    pristine_calls, seed, dist, big if f == "batch" else one, f
                )
                for f in firsts
            }

        runs = run_all()
        rollout = (
            f"a pristine process whose first call was a rollout's (lead {one}, {drawn} rows, "
            "at 1 thread):"
        )
        pairs = [
            (0, "rollout", f"{rollout} that call"),
            (1, "rollout", f"{rollout} the trial's calls after it"),
            (
                2,
                "training",
                f"a pristine process whose first call was a training step ({drawn} rows):",
            ),
            (1, "dtype", f"a pristine process whose first call was in {other}: the trial's calls"),
            (
                1,
                "batch",
                f"a pristine process whose first call was a big batch's (lead {big}, {drawn} "
                f"rows, at {self.params['threads']} threads): the trial's calls",
            ),
        ]
        pairs = [p for p in pairs if p[1] in runs]
        found = [(p, self._compare(runs["trial"][p[0]], runs[p[1]][p[0]])) for p in pairs]
        differ = [(p, detail) for p, detail in found if detail]
        if differ and not self._reproduced(runs, run_all(), pairs):
            self.unconfirmed += 1  # the processes disagree among themselves: no verdict
            if self.unconfirmed_first is None:
                (_, _, run), detail = differ[0]
                self.unconfirmed_first = f"{run} {detail} vs {BASE} [seed {seed}, {dist}]"
            return
        for part, first, run in pairs:
            self._judge(trial, runs["trial"][part], runs[first][part], run, BASE)

    def _first_batch_lead(self) -> tuple[int, ...] | None:
        """The lead of a pristine process's big first call: ``first_batch_rows`` rows,
        fewer at long rows, a multiple of FIRST_BATCH_MULTIPLE where that many fit; None
        where that is no more than the case's own rows (its first call is as big) or
        the op has no lead."""
        ctx = self.ctx
        rows = ctx.training_rows(
            int(self.params["first_batch_rows"]), int(self.params["first_batch_work"])
        )
        if rows >= FIRST_BATCH_MULTIPLE:
            rows -= rows % FIRST_BATCH_MULTIPLE
        if rows <= math.prod(ctx.lead) or not ctx.lead:
            return None
        return (rows,) + (1,) * (len(ctx.lead) - 1)

    def _reproduced(self, runs: dict, again: dict, pairs: list) -> bool:
        """Whether a second set of pristine processes gave each compared result the
        first set's bits: a difference that follows the first call, not one that a
        process's load or layout decides (a BLAS's thread count under load)."""
        checked = {(part, f) for part, first, _ in pairs for f in ("trial", first)}
        return not any(self._compare(runs[f][part], again[f][part]) for part, f in checked)

    def _judge(
        self, trial: Trial, reference: list, results: list, run: str, versus: str = "run 1"
    ) -> None:
        """Count one more run compared with ``reference`` (``versus`` names it); keep the
        first that differs (``run`` names it)."""
        self.runs += 1
        detail = self._compare(reference, results)
        if detail:
            self.differ += 1
            if self.first is None:
                self.first = (trial, f"{run} {detail} vs {versus}")

    def _other_modes(self, trial: Trial, reference: list) -> None:
        """The same call under ``torch.inference_mode`` and, when on, the with-grad call's
        outputs must give the no-grad outputs' bits: a rollout's old logps (inference)
        and the trainer's new ones (with grad) give a PPO ratio of exactly 1 on the same
        inputs only then, and a kernel may take another path in each mode."""
        plain = [o for what, o in reference if what == "output"]
        ctx = self.ctx
        modes = [("under inference_mode", lambda: trial.own_call(lambda d: ctx.call(d, True)))]
        if ctx.grad:
            modes.append(("with grad", lambda: [o for w, o in reference if w == WITH_GRAD]))
        for label, outputs in modes:
            self.runs += 1
            for want, got in zip(plain, outputs()):
                detail = self._difference("output", got.detach().cpu(), want)
                if detail:
                    self.differ += 1
                    if self.first is None:
                        what = f"the call {label}: output {detail} vs the no-grad call's"
                        self.first = (trial, what)
                    break

    def _training_batch(self, trial: Trial) -> None:
        """Forward and backward on a fresh draw of a training batch's rows, three times
        (:meth:`_training_thread_counts`): the gradient of a shared input (a norm's weight,
        an lm_head) sums every row, and a kernel may add its blocks' partial sums in the
        order they finish, or one per thread, once the rows are many (past 1,024 rows),
        never at the grid's."""
        ctx = self.ctx
        rows = ctx.training_rows(int(self.params["big_rows"]), int(self.params["big_work"]))
        if ctx.at_first_grid_case() and ctx.is_big_batch_case():  # one case per op
            itemsize = dtypes.torch_dtype(ctx.case.dtype).itemsize
            fit = int(self.params["huge_bytes"]) // ctx.row_bytes(itemsize)
            huge = min(int(self.params["huge_rows"]), fit)
            rows = max(rows, ctx.training_rows(huge, int(self.params["huge_work"])))
        if not ctx.grad or not rows or not ctx.shared_grad_inputs:
            return
        lead = (rows,)
        inputs = ctx.draw(trial.seed, trial.distribution, lead=lead, salt="training batch")
        ups = ctx.upstream(trial.seed, lead, salt="training batch")
        reference = []
        for r, threads in enumerate(self._training_thread_counts()):
            with torch_threads(threads):
                results = self._backward_results(*ctx.call_backward(ctx.to_device(inputs), ups))
            if not reference:
                reference = results
                continue
            self._judge(
                trial, reference, results, f"run {r + 1} (at {rows} rows, {threads} threads)"
            )

    def _training_thread_counts(self) -> tuple[int, int, int]:
        """The training batch's three runs: twice at ``threads`` (partials added as they
        finish), then at ``odd_threads`` where set (one partial per thread, as one per SM:
        Liger's norm backward, a split-K over the tokens), else ``threads`` again."""
        threads, odd = int(self.params["threads"]), int(self.params["odd_threads"])
        return threads, threads, odd or threads

    def _compare(self, reference: list, results: list) -> str:
        """The first difference of one repeat from run 1 ('' when none)."""
        for (what, want), (_, got) in zip(reference, results):
            detail = self._difference(what, got, want)
            if detail:
                return f"{what}: {detail}"
        return ""

    def _difference(self, what: str, got: torch.Tensor, want: torch.Tensor) -> str:
        """'' when ``got`` has ``want``'s bits (``want``: the tensor, or a gradient's digests)."""
        if what in ("output", WITH_GRAD):
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
        metrics = {
            "repeats": self.runs + 1,
            "differing_runs": self.differ,
            "threads": int(self.params["threads"]),
        }
        if self.unconfirmed:  # no verdict from them: their bits varied from process to process
            metrics["pristine_unconfirmed"] = self.unconfirmed
            why = (
                "their bits varied from process to process, a second set's too (no verdict);"
                f" first: {self.unconfirmed_first}"
            )
            metrics["not_judged"] = [["pristine processes' first calls", why]]
        if self.ctx.shared_module_folder:  # a choice kept in a file beside it: unseen
            why = f"{self.ctx.shared_module_folder[0]}; they imported it from its own folder"
            metrics.setdefault("not_judged", []).append(["files kept beside the module", why])
        tol = {"mode": "bitwise"}
        if self.first:
            t, what = self.first
            msg = (
                f"{self.differ} of {self.runs} runs after the first differ from it; first: {what} "
                f"[seed {t.seed}, {t.distribution}]"
            )
            return Outcome("fail", msg, metrics, tol, t.seed, t.distribution)
        return Outcome("pass", "", metrics, tol)


def first_call_lead(lead: tuple[int, ...]) -> tuple[int, ...]:
    """The lead shape of a pristine process's first call: one row where the case has more,
    else ``FIRST_BATCH`` rows; a lead-less op's own (only the inputs differ)."""
    if not lead:
        return ()
    if math.prod(lead) > 1:
        return (1,) * len(lead)
    return (FIRST_BATCH,) + (1,) * (len(lead) - 1)


def first_call_distribution(ctx: CaseContext) -> str:
    """What a pristine process's first call draws: realistic rows (``normal``, where the
    case has it), never the trials' overflowing ones (which a kernel may answer by
    leaving a fast path for good)."""
    dists = ctx.case.distributions
    return FIRST_CALL_DISTRIBUTION if FIRST_CALL_DISTRIBUTION in dists or not dists else dists[0]


def first_inputs(ctx: CaseContext, seed: int, lead: tuple[int, ...]) -> dict:
    """Device inputs of a pristine process's first call at ``lead``, drawn alike there
    and here."""
    drawn = ctx.draw(seed, first_call_distribution(ctx), lead=lead, salt="first call")
    return ctx.to_device(drawn)


def other_dtype(ctx: CaseContext) -> str | None:
    """The grid's first dtype other than the case's: a pristine process's first call in
    it (an autotuner keyed on the vocab alone keeps what that call picked)."""
    return next(iter(ctx.other_dtypes), None)


def training_step(ctx: CaseContext, seed: int) -> tuple[list, dict]:
    """A forward and backward on first-call rows at the case's own lead shape."""
    ups = ctx.upstream(seed, ctx.lead, salt="first call")
    return ctx.call_backward(first_inputs(ctx, seed, ctx.lead), ups)


def pristine_calls(ctx: CaseContext, seed: int, dist: str, lead: tuple | None, first: str):
    """Run in a pristine process: ``first`` ("trial": the trial's no-grad call, as a case
    process's first call; "rollout": a call on first-call rows at ``lead`` at 1 thread;
    "training": a training step; "dtype": the case's rows in another dtype; "batch": a big
    batch of first-call rows at ``lead`` at ``threads``) as the candidate's first call,
    then (the rollout call's outputs, the trial's calls as a repeat makes them, the
    training step's results; these last only when on)."""
    trial = Trial(ctx, seed, dist)
    checker = Determinism(ctx)

    def rollout(threads: int | None = None):
        with torch_threads(threads or torch.get_num_threads()):
            outs = ctx.call(first_inputs(ctx, seed, lead))
        return [("output", o.detach().cpu()) for o in outs]

    def training():
        return checker._backward_results(*training_step(ctx, seed)) if ctx.grad else []

    if first == "training":
        return None, None, training()
    if first == "dtype":  # the case's rows in another dtype, then the trial's calls
        ctx.call(ctx.in_dtype(first_inputs(ctx, seed, ctx.lead), other_dtype(ctx)))
        return None, checker._repeat(trial), []
    if first == "batch":  # a big batch's rows at ``threads``, then the trial's calls
        rollout(int(checker.params["threads"]))
        return None, checker._repeat(trial), []
    if first == "trial":
        trial.own_call(ctx.call)
    row = rollout(1 if first == "rollout" else None)  # a rollout worker's single thread
    return row, checker._repeat(trial), training() if first == "trial" else []
