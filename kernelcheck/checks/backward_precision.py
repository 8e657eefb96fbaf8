"""``backward_precision``: is each gradient as precise as an honest fp32 gradient?

``backward_accuracy``'s tolerance is absolute, and a softmax gradient's entries can be
as small as 1e-30: a backward that writes 0 for softmax terms below 2^-20 stays within
fp32's 1e-5 (2.3e-6 off at most at the Qwen3 vocab). Nor does a per-element max error
separate it from an honest backward: the dropped terms are far below the row's largest.
A relative error summed over a row does (fp32, u = 2^-24: honest logp gradients at most
8 u, the dropped terms 4,600 u to 540,000 u at the Qwen3 vocab, up to 1,200 u at V=257).

The rule, for every gradient input, every class of its entries and every distribution of
the trial (a mixed trial's rows are judged per distribution, as ``forward_precision``
does), row r's entries of class K:

    s_r       = sum x * sign(gold) / sum |gold|    over row r's non-target entries
    err_K(x)  = sum |x - s_r * gold| / sum |gold|  over row r's entries of class K
    max_rows err_K(cand) <= ratio * max(max_rows err_K(ref), max_rows err_K(exact))
                            + floor_ulp * 2^-23

with ratio 2 and floor_ulp 8 (``PARAMS``). ``gold`` is the float64 gold gradient;
``ref`` the honest fp32 reference's (autograd of the op's ``reference`` on the inputs as
the candidate gets them: a bf16 input's gradient is rounded to bf16 once, so in 16 bits
the reference carries the one rounding an honest kernel makes, and the floor only fp32
arithmetic). Rows whose gold class sum is 0 are not judged (the contract and accuracy
checks own zero gradients). ``exact`` is the gold rounded once to the gradient's dtype
(an exactly rounded gradient): no kernel does better, so the limit is never below twice
its error (a 16-bit ``heavy`` row whose mass sits in one entry rounds that entry the
other way than the reference did: ratio_kl's honest fp16 gradient at V = 358 was 4.7e-5
off, exactly as an exactly rounded one, the reference 1.3e-5). Measured on every
shipped op's default grid, seeds 0 to 5: honest candidates reach at most 0.50 of the
limit in fp32 and 0.66 in bf16/fp16; the planted bugs at least 66 times it.

``s_r`` takes out the row's scale, the upstream gradient times forward values: its
error is the forward's conditioning, not the backward's precision. In ratio_kl the
coefficient ``exp(d) - 1`` cancels and logp's fp32 rounding at |logp| ~ 27 is amplified:
an honest candidate's row was 603 u off where the reference happened to be 1.5 u, while
with the scale taken out both are within 5 u. A wrong scale of a whole row is left to
``backward_accuracy``; a wrong scale of some entries (a dropped term, a bf16 softmax) is
what this check judges. The scale is fitted on the entries other than the target, so the
target entry is judged against the others' scale: a logsumexp kept in bf16, which scales
every other entry alike, shows there. The floor is in fp32 ulps rather than in exactly
rounded errors: a row whose mass sits in one entry can round almost exactly (0.09 u)
while an honest kernel's ``exp`` is 4 u off there.

In 16 bits the index column's limit also allows one rounding flip of a row's largest
other entry, in the row where it weighs most (``_add_flips``): the reference is one draw
of the rounding, and a flip of an entry holding most of the row moves the fitted scale
the target is judged against.

Classes: where an index input points into the gradient (``index_into``: logp's
``target``), the entry it selects in each row (the "target column") is judged apart from
the others (the "non-target entries", which may be 1e-30 small), and judged over the
column, summed over the distribution's rows: one entry's relative error is dominated by
cancellation (``g * (1 - p_t)`` with ``p_t`` near 1). Any other gradient has one class,
all entries; a gradient of a shared input (a norm's weight) is one row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from kernelcheck import gold
from kernelcheck.cases.grid import lead_sizes
from kernelcheck.cases.inputs import parts_of
from kernelcheck.checks.check import Check
from kernelcheck.checks.differentiable import differentiable_call
from kernelcheck.checks.metrics import (
    picked_entries,
    row_scale,
    scale_weights,
    scaled_abs_error,
    split_row_sums,
    worst_relative,
)
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.rounding import (
    RoundingCounts,
    count_rounding,
    first_rounding_problem,
    rounding_failure,
    worst_excess,
)
from kernelcheck.checks.rows import fmt_index
from kernelcheck.checks.trial import Trial

FP32_ULP_OF_ONE = 2.0**-23  # the floor's unit: an fp32 ulp, relative
# per gradient input, per class: one float64 number per row (a shared input: one row)
Sums = dict[str, dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Judged:
    """One gradient class of one distribution of one trial, and its limit."""

    seed: int
    trial_distribution: str
    grad: str
    label: str  # "target column", "non-target entries", "all entries"
    distribution: str
    cand: float  # max over rows of the candidate's relative L1 error
    ref: float
    exact: float
    bound: float
    row: str  # the candidate's worst row ("" for a column or a shared input)
    nonfinite: int
    allowance: float = 0.0  # a 16-bit index column's rounding-flip allowance (_add_flips)

    @property
    def margin(self) -> float:
        return self.cand / self.bound if self.bound else math.inf

    @property
    def ratio(self) -> float:
        if self.ref:
            return self.cand / self.ref
        return 0.0 if not self.cand else math.inf


@dataclass
class GoldRows:
    """One chunk of gold gradient rows of one input, prepared once for every judged one."""

    gold: torch.Tensor  # float64 [rows, n], entries that are not finite set to 0
    finite: torch.Tensor | None  # where the gold is finite; None: everywhere
    picked: tuple[torch.Tensor, torch.Tensor] | None  # the index input's entries
    weight: torch.Tensor  # what the row scale is fitted with (metrics.scale_weights)
    size: torch.Tensor


class BackwardPrecision(Check):
    name = "backward_precision"
    uses = frozenset({"grads", "reference_grads"})
    needs_grad = True
    # a training batch for the gradients of shared inputs: rows up to ``big_rows``, and up
    # to ``big_work`` products of a row's dims (0: none), as ``determinism``'s
    # in the op's big-batch case (CaseContext.is_big_batch_case) a real training batch:
    # at least ``huge_rows`` rows (a micro-batch of tokens past 2^16) and enough to pass
    # ``huge_elements`` row-wise elements (256 MiB of fp32, where kernels commonly switch
    # strategy), but at most ``huge_rows_max`` rows, twice ``huge_elements`` (at long
    # rows: rms_norm at hidden 8,192 takes 16,385 rows, not 65,537, 2 GiB of fp32) and
    # ``huge_work`` products of a row's dims; an odd count, which no block size divides
    # (``huge_rows = 0``: none). Past 2^18 rows an honest fp32 GEMM's sum over the rows
    # drifts from the reference's, which adds its row chunks in float64 (linear_logp at
    # hidden 8, vocab 64: 7.5M tokens gave the torch candidate 6 times the reference's
    # error)
    PARAMS = {
        "ratio": 2.0,
        "floor_ulp": 8,
        "big_rows": 4096,
        "big_work": 1 << 32,
        "huge_rows": 65537,
        "huge_rows_max": (1 << 18) + 1,
        "huge_elements": 1 << 26,
        "huge_work": 1 << 33,
        # each gradient again from a call where it alone requires grad (_frozen_paths)
        "frozen_inputs": True,
        # the index column over the whole trial, not per distribution: where a trial has
        # one row per distribution (shape_sweep), one entry would be judged alone, and a
        # 16-bit entry's one rounding flip is several times the reference's
        "index_column_whole": False,
        # a 16-bit gradient rounded one way fails (rounding.py); off where a few rows make
        # the direction unsteady (one row's fp32 scale error tips all its entries one way)
        "judge_rounding": True,
    }
    summary = (
        "each gradient's relative L1 error per row (its scale taken out) <= ratio x an "
        "honest fp32 reference gradient's + a rounding floor, per element class"
    )

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.failed: Judged | None = None  # the failing part furthest over its limit
        self.closest: Judged | None = None
        self.shape_problem: tuple[Trial, str] | None = None
        self.nonfinite: dict[str, int] = {}  # this trial's, per gradient
        self._indices: dict[str, torch.Tensor] = {}  # this trial's index rows, per gradient
        # per 16-bit gradient, which way it is off the gold's nearest value (rounding.py)
        self.rounding: dict[str, RoundingCounts] = {}
        self.first_trial: Trial | None = None
        self.shared_only = False  # judge the gradients of shared inputs alone
        self.batch_done = False
        self.frozen_done = False
        op = ctx.op
        self.index_of = {n: _index_input(op, n) for n in op.grad_inputs}

    def skip_reason(self) -> str | None:
        reason = super().skip_reason()
        if reason:
            return reason
        if self.ctx.reference_fn is None:
            return f"op {self.ctx.op.name} declares no fp32 reference"
        return self._reference_problem()

    def _reference_problem(self) -> str | None:
        """Why autograd of the reference does not work (one row of the first trial's
        first distribution is enough to tell), or None."""
        ctx = self.ctx
        seed = ctx.case.seeds[0] if ctx.case.seeds else 0
        dist = parts_of(ctx.case.distributions[0])[0] if ctx.case.distributions else "normal"
        inputs = ctx.draw(seed, dist, lead=(1,), salt="reference-probe")
        ups = ctx.upstream(seed, lead=(1,), salt="reference-probe")
        chunks = gold.backward_chunks(
            ctx.op,
            lambda **args: differentiable_call(ctx.reference_fn, args),
            inputs,
            ups,
            (1,),
            upcast=False,
        )
        try:
            for _ in chunks:
                pass
        except Exception as exc:
            text = (str(exc).strip().splitlines() or ["(no message)"])[0][:300]
            return f"the op's fp32 reference is not differentiable: {type(exc).__name__}: {text}"
        return None

    # --- gathering ------------------------------------------------------------------

    def _candidate_rows(self, trial: Trial, grads: dict | None = None) -> dict[str, torch.Tensor]:
        """The candidate's gradients (``grads``, default the trial's) as ``[rows, n]`` (a
        shared input's as one row)."""
        out = {}
        for name, g in (trial.grads if grads is None else grads).items():
            if self.shared_only and name not in self.ctx.shared_grad_inputs:
                continue
            want = tuple(trial.cpu_inputs[name].shape)
            if tuple(g.shape) != want:
                if self.shape_problem is None:
                    what = f"gradient:{name} shape {tuple(g.shape)} != expected {want}"
                    self.shape_problem = (trial, what)
                continue
            rows = self.ctx.input_rows(name, g)
            out[name] = rows.reshape(rows.shape[0], -1)
        return out

    def observe(self, trial: Trial) -> None:
        self.first_trial = self.first_trial or trial
        cand = self._candidate_rows(trial)
        self.nonfinite = {}
        self._indices = {
            n: trial.cpu_inputs[i].reshape(-1).long() for n, i in self.index_of.items() if i
        }
        made: dict[str, Sums] = {}

        def make() -> dict[str, Sums]:
            made.update(self._sums(trial, cand, with_reference=True))
            kept = ("gold", "ref", "exact", "scale", "flip")
            return {who: made[who] for who in kept if who in made}

        stored = trial.reference_grads(make)
        mine = made.get("cand")
        if mine is None:  # the reference's came from the store: the gold alone, once
            mine = self._sums(trial, cand, with_reference=False)["cand"]
        self._judge_trial(trial, {**stored, "cand": mine})
        if not self.frozen_done:
            self.frozen_done = True
            self._frozen_paths(trial, stored)
        if not self.batch_done:
            self.batch_done = True
            self._training_batch(trial)

    def _frozen_paths(self, trial: Trial, stored: dict[str, Sums]) -> None:
        """Each gradient again from a call where it alone requires grad (the others frozen:
        LoRA's base, a frozen lm_head or norm), judged against the same gold and
        reference: autograd takes another path there, and a kernel may take another
        kernel (a gradient filter left on in a frozen-head path). Once per case, as
        ``backward_accuracy``'s frozen call."""
        names = self.ctx.op.grad_inputs
        if self.shared_only or len(names) < 2 or not self.params["frozen_inputs"]:
            return
        for k in names:
            self.progress(f"gradient:{k} alone")
            dev = self.ctx.to_device(trial.cpu_inputs)
            _, grads = self.ctx.call_backward(dev, trial.upstream, wrt=(k,))
            cand = self._candidate_rows(trial, {k: grads[k].cpu()})
            mine = self._sums(trial, cand, with_reference=False)["cand"]
            frozen = ", ".join(n for n in names if n != k)
            self._judge_trial(trial, {**stored, "cand": mine}, f" ({frozen} frozen)")

    def _training_batch(self, trial: Trial) -> None:
        """The gradients of shared inputs (a norm's weight) judged again on a fresh draw of
        a training batch's rows (up to 4,096): such a gradient sums every row, and a kernel
        may keep its partial sums in 16 bits (Triton's layer-norm tutorial keeps its dW
        partials in x's dtype, one per 64-row group), which at the grid's 64 rows hold one
        row each and round like an honest result."""
        ctx, op = self.ctx, self.ctx.op
        rows = ctx.training_rows(int(self.params["big_rows"]), int(self.params["big_work"]))
        if ctx.is_big_batch_case():
            rows = max(rows, self._huge_rows())
        if self.shared_only or not rows or not ctx.shared_grad_inputs:
            return
        inner = {d: n for d, n in ctx.sizes.items() if d not in op.lead}
        judge = BackwardPrecision(ctx.at_sizes({**lead_sizes(op, rows), **inner}), self.params)
        judge.shared_only = judge.batch_done = judge.frozen_done = True
        batch = Trial(judge.ctx, trial.seed, trial.distribution)
        try:
            judge.observe(batch)
        finally:
            batch.release()
        at = f"at a training batch of {rows} rows"
        if judge.shape_problem is not None and self.shape_problem is None:
            self.shape_problem = (trial, f"{judge.shape_problem[1]} ({at})")
        for j in (judge.failed, judge.closest):
            if j is not None:
                self._keep(replace(j, label=f"{j.label}, {at}"))
        for name, counts in judge.rounding.items():
            self.rounding.setdefault(name, RoundingCounts()).add(counts)

    def _huge_rows(self) -> int:
        """The big-batch case's training batch (``huge_*`` in ``PARAMS``): a kernel may
        switch its weight-gradient strategy past a size the grid's batches never reach
        (partials over a fixed number of blocks that floor the rows per block, token
        chunks of an lm_head's gradient past 2^26 logits), and such a switch drops rows
        only where the block size does not divide the count. 0 where ``huge_rows`` is."""
        least = int(self.params["huge_rows"])
        if not least:
            return 0
        row_elements = self.ctx.row_bytes(1)
        elements = int(self.params["huge_elements"])
        want = max(least, elements // row_elements + 1)
        most = min(
            int(self.params["huge_rows_max"]),
            2 * elements // row_elements,
            int(self.params["huge_work"]) // self.ctx.row_work,
        )
        rows = min(want, most)
        return rows | 1 if rows > math.prod(self.ctx.lead) else 0

    def _sums(self, trial: Trial, cand: dict, with_reference: bool) -> dict[str, Sums]:
        """One pass over the gold gradient (and, ``with_reference``, the reference's, in the
        same chunks): per row and class, sum |gold| and each judged gradient's error."""
        out: dict[str, Sums] = {"gold": {}, "cand": {}}
        refs = trial.reference_grad_chunks() if with_reference else None
        scales = trial.gradient_scale_chunks() if with_reference else None
        if refs is not None:
            out.update(ref={}, exact={})
        if scales is not None:
            out["scale"] = {}
        if with_reference:
            out["flip"] = {}
        for sl, chunk in trial.gold_grad_chunks():
            ref_chunk = _same_chunk(refs, sl)
            scale_chunk = _same_chunk(scales, sl)
            for n, g in chunk.items():
                start = 0 if sl is None else sl.start
                rows = slice(start, start + (1 if sl is None else g.shape[0]))
                nrows = self.ctx.input_rows(n, trial.cpu_inputs[n]).shape[0]
                prep = self._prepare(n, g.reshape(rows.stop - rows.start, -1), rows)
                self._add(out["gold"], n, rows, nrows, prep.gold.abs(), prep.picked)
                if scale_chunk is not None:
                    scale = scale_chunk[n].reshape(prep.gold.shape).nan_to_num(posinf=0.0)
                    scale = torch.maximum(scale, prep.gold.abs())  # never below the gradient
                    self._add(out["scale"], n, rows, nrows, scale, prep.picked)
                if with_reference:
                    self._add_flips(out["flip"], n, rows, nrows, prep, trial.cpu_inputs[n].dtype)
                judged = {"cand": cand[n][rows]} if n in cand else {}
                if n in cand:
                    self._count_rounding(n, cand[n][rows], prep)
                if ref_chunk is not None:
                    judged["ref"] = ref_chunk[n].reshape(prep.gold.shape)
                    judged["exact"] = prep.gold.to(trial.cpu_inputs[n].dtype)
                for who, x in judged.items():
                    self._add(out[who], n, rows, nrows, self._error(who, n, x, prep), prep.picked)
        return out

    def _count_rounding(self, grad: str, x: torch.Tensor, prep: GoldRows) -> None:
        """Add which way ``x`` is off the gold's nearest value (16-bit gradients only)."""
        want = prep.gold if prep.finite is None else prep.gold.masked_fill(~prep.finite, math.nan)
        self.rounding.setdefault(grad, RoundingCounts()).add(count_rounding(x, want))

    def _add_flips(self, sums: Sums, grad: str, rows: slice, nrows: int, prep, dtype) -> None:
        """Per row, what one 16-bit rounding flip there can add to the index column's
        error (the limit allows one, in the row where it weighs most):
        ``eps * max |gold| / sum |gold|`` over the non-target entries (the row scale's
        share of the largest one, which a flip moves by a step) times ``|gold_target|``.
        An honest fp32 result within a few ulps of a rounding midpoint rounds either way;
        where one entry holds most of the row's mass the fitted scale moves with it and
        the target entry is judged against that scale. fp32 gradients: none."""
        if prep.picked is None or dtype not in (torch.float16, torch.bfloat16):
            return
        others = prep.gold.abs()
        target = split_row_sums(others, prep.picked)[0]  # zeroes the target in ``others``
        largest = others.amax(dim=1)
        share = torch.where(prep.size > 0, largest / torch.where(prep.size > 0, prep.size, 1), 0)
        flip = torch.finfo(dtype).eps * share * target
        mine = sums.setdefault(grad, {})
        mine.setdefault(self.index_of[grad], torch.zeros(nrows, dtype=torch.float64))[rows] += flip

    def _prepare(self, grad: str, g: torch.Tensor, rows: slice) -> GoldRows:
        finite = torch.isfinite(g)
        if bool(finite.all()):
            finite = None
        else:
            g = torch.where(finite, g, 0.0)
        index = self._indices.get(grad)
        picked = None if index is None else picked_entries(index[rows], g.shape[1])
        weight, size = scale_weights(g, picked)
        return GoldRows(g, finite, picked, weight, size)

    def _error(self, who: str, grad: str, x: torch.Tensor, prep: GoldRows) -> torch.Tensor:
        """``|x - s * gold|`` per element, ``s`` the row's scale of ``x`` against the gold;
        a NaN/Inf where the gold is finite is an infinite error, where it is not, none."""
        x64 = x.to(torch.float64)
        err = scaled_abs_error(x64, prep.gold, row_scale(x64, prep.weight, prep.size))
        if prep.finite is not None:
            err.masked_fill_(~prep.finite, 0.0)
        if not bool(torch.isfinite(err.sum(dim=1)).all()):
            finite = (
                prep.finite if prep.finite is not None else torch.ones_like(err, dtype=torch.bool)
            )
            bad = ~torch.isfinite(x) & finite
            if who == "cand":
                self.nonfinite[grad] = self.nonfinite.get(grad, 0) + int(bad.sum())
            err = torch.where(finite & ~torch.isfinite(err), math.inf, err)
        return err

    def _add(self, sums: Sums, grad: str, rows: slice, nrows: int, values, picked) -> None:
        """Add the per-row class sums of ``values`` (``[rows, n]``, consumed) at ``rows``."""
        selected, rest = split_row_sums(values, picked)
        index_name = self.index_of[grad]
        found = {index_name: selected, f"non-{index_name}": rest} if picked else {"all": rest}
        mine = sums.setdefault(grad, {})
        for cls, v in found.items():
            mine.setdefault(cls, torch.zeros(nrows, dtype=torch.float64))[rows] += v

    # --- judging ----------------------------------------------------------------------

    def _judge_trial(self, trial: Trial, sums: dict[str, Sums], suffix: str = "") -> None:
        parts = parts_of(trial.distribution)
        for n, classes in sums["cand"].items():
            row_wise = self.ctx.op.is_row_wise(self.ctx.op.input(n))
            groups = list(enumerate(parts)) if row_wise else [(0, trial.distribution)]
            step = len(parts) if row_wise else 1
            for cls in classes:
                pooled = cls == self.index_of[n]
                whole = pooled and row_wise and self.params["index_column_whole"]
                for k, dist in [(0, trial.distribution)] if whole else groups:
                    rows = slice(k, None, 1 if whole else step)
                    picked = {
                        who: s[n][cls][rows] for who, s in sums.items() if cls in s.get(n, {})
                    }
                    where = "" if pooled or not row_wise else (k, step)
                    label = _label(cls, pooled) + suffix
                    self._judge(trial, n, label, dist, picked, pooled, where)

    def _judge(self, trial, grad, label, dist, picked, pooled, where) -> None:
        gold_sums = picked.pop("gold")
        scale_sums = picked.pop("scale", None)
        flips = picked.pop("flip", None)
        allowance = 0.0
        if pooled:
            gold_sums = gold_sums.sum(0, keepdim=True)
            scale_sums = None if scale_sums is None else scale_sums.sum(0, keepdim=True)
            picked = {who: v.sum(0, keepdim=True) for who, v in picked.items()}
            if flips is not None:  # one flip, in the row where it weighs most
                allowance = (
                    worst_relative(flips.amax(0, keepdim=True), gold_sums, scale_sums) or (0.0,)
                )[0]
        found = {who: worst_relative(v, gold_sums, scale_sums) for who, v in picked.items()}
        if found["cand"] is None:
            return
        (cand, at), (ref, _), (exact, _) = found["cand"], found["ref"], found["exact"]
        floor = self.params["floor_ulp"] * FP32_ULP_OF_ONE + allowance
        row = fmt_index(where[0] + at * where[1], (), self.ctx.lead) if where else ""
        judged = Judged(
            trial.seed,
            trial.distribution,
            grad,
            label,
            dist,
            cand,
            ref,
            exact,
            self.params["ratio"] * max(ref, exact) + floor,
            row,
            self.nonfinite.get(grad, 0),
            allowance,
        )
        self._keep(judged)

    def _keep(self, judged: Judged) -> None:
        """Keep ``judged`` if it is the closest to its limit, or the furthest over it."""
        if self.closest is None or judged.margin > self.closest.margin:
            self.closest = judged
        over = not judged.cand <= judged.bound
        if over and (self.failed is None or judged.margin > self.failed.margin):
            self.failed = judged

    def outcome(self) -> Outcome:
        """Metrics and ``limit`` belong to one judged part: the failing one furthest over
        its limit, else the one closest to it."""
        tol = {"reference_ratio": self.params["ratio"], "floor_ulp": self.params["floor_ulp"]}
        if self.shape_problem is not None and self.failed is None:
            trial, what = self.shape_problem
            message = f"{what} [seed {trial.seed}, {trial.distribution}]"
            return Outcome("fail", message, {}, tol, trial.seed, trial.distribution)
        rounded = self._rounding_failure(tol)
        if rounded is not None:
            return rounded
        j = self.failed or self.closest
        if j is None:
            return Outcome("pass", "no gradient with a nonzero gold to judge", {}, tol)
        tol["limit"] = j.bound
        if j.allowance:
            tol["flip_allowance"] = j.allowance
        metrics = {
            "ratio": j.ratio,
            "rel_l1": j.cand,
            "reference_rel_l1": j.ref,
            "exact_rel_l1": j.exact,
        }
        if j.nonfinite:
            metrics["n_nonfinite"] = j.nonfinite
        if self.failed is None:
            excess = worst_excess(self.rounding)
            if excess is not None:
                metrics["rounding_excess"] = excess
            return Outcome("pass", "", metrics, tol, j.seed, j.distribution)
        message = _message(j, self.params)
        found = first_rounding_problem(self.rounding, "gradient:{}")
        if found is not None:  # the likely cause of the error, where there is one
            message += f"; also {found[0]}"
        message += f" [seed {j.seed}, {j.distribution}]"
        return Outcome("fail", message, metrics, tol, j.seed, j.distribution, j.trial_distribution)

    def _rounding_failure(self, tol: dict) -> Outcome | None:
        """A fail where no other failure was found and a 16-bit gradient is rounded one way."""
        t = self.first_trial
        if self.failed is not None or t is None or not self.params["judge_rounding"]:
            return None
        found = rounding_failure(self.rounding, "gradient:{}", self.ctx.case.seeds, t.distribution)
        if found is None:
            return None
        metrics = {"rounding_excess": found[1]}
        return Outcome("fail", found[0], metrics, tol, t.seed, t.distribution)


def _same_chunk(chunks, sl: slice | None) -> dict | None:
    """The next chunk of ``chunks`` (None: none), which must cover the gold's ``sl``."""
    if chunks is None:
        return None
    got, chunk = next(chunks)
    if got != sl:
        raise RuntimeError(f"chunk {got} != gold chunk {sl}")
    return chunk


def _index_input(op, grad: str) -> str | None:
    """The index input that selects one entry per row of gradient ``grad``, if any."""
    spec = op.input(grad)
    if not op.is_row_wise(spec) or len(spec.shape) != len(op.lead) + 1:
        return None
    for i in op.inputs:
        if i.index_into == grad and op.is_row_wise(i) and len(i.shape) == len(op.lead):
            return i.name
    return None


def _label(cls: str, pooled: bool) -> str:
    if pooled:
        return f"{cls} column"
    return "all entries" if cls == "all" else f"{cls} entries"


def _message(j: Judged, params: dict) -> str:
    what = "over the column" if "column" in j.label else "of a row"
    where = f" (worst row {j.row})" if j.row else ""
    base = f"fp32 reference's {j.ref:.3e}"
    if j.exact > j.ref:
        base = f"an exactly rounded gradient's {j.exact:.3e} (the fp32 reference's {j.ref:.3e})"
    text = (
        f"gradient:{j.grad}, {j.label}: relative L1 error {what} {j.cand:.3e}{where} > "
        f"limit {j.bound:.3e} = {params['ratio']:g} x {base} + floor "
        f"{params['floor_ulp'] * FP32_ULP_OF_ONE:.3e} ({params['floor_ulp']:g} fp32 ulp)"
        + (f" + 16-bit rounding-flip allowance {j.allowance:.3e}" if j.allowance else "")
    )
    if j.exact <= j.ref:
        text += f"; an exactly rounded gradient: {j.exact:.3e}"
    if j.nonfinite:
        text += f"; {j.nonfinite} NaN/Inf where the gold is finite"
    return text
