"""``contract``: the interface promises of the op, checked exactly.

Output dtype, shape and device; out-of-range indices give exactly the declared value
(+0.0 for logp, compared as bits) and a zero gradient; empty input works; a
non-contiguous input (row-padded, column-strided, lead-strided and RL's shifted-token
views) gives the same bits as its contiguous copy, forward and backward, in 16 rows and
again in a training batch of up to 4,096; so does a
backward handed a non-contiguous upstream gradient, as autograd hands one to a kernel
(``out.sum()`` gives an expanded one, of stride 0).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from kernelcheck import dtypes, gold
from kernelcheck.cases.inputs import make_inputs
from kernelcheck.checks import concurrent_calls, process_inputs
from kernelcheck.checks.check import Check
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.metrics import ErrorStats, bits, changed_elements, first_bit_difference
from kernelcheck.checks.outcome import CandidateFault, Outcome, WrongOutput
from kernelcheck.checks.rows import flat_rows
from kernelcheck.checks.trial import Trial
from kernelcheck.fresh_memory import poisoned_allocations
from kernelcheck.spec.model import Tolerance, eval_dim_expr

# 2^6: exact in every float type. Standard normal logits reach +-180, past fp32 exp's
# range (88.7); hidden states give logits of std 64; a 16-bit sum of squares overflows
SCALE_UP = 64.0
# the upstream gradient's factor in the loss-scale probe: fp16 training's GradScaler
# settles near 2^10 to 2^16; at 2^12 an upstream of std 1 stays finite in fp16
LOSS_SCALE = 4096.0
# an upstream gradient this small (2^-30, 9.3e-10) is a real one: a token mean over 2^20
# tokens times a KL coefficient of 1e-3; a backward that treats it as zero (a loss-masked
# row's skip tested with |g| < eps) drops the rows of every such step
TOKEN_MEAN_SCALE = 2.0**-30
# must_raise's packed batch: up to 256 rows (sequence packing: every position active),
# within 2^22 products of a row's dims where that leaves more than the head's rows (27 at
# the Qwen3 vocabulary; the head's 16 at linear_logp's widest)
PACKED_ROWS = 256
PACKED_ELEMENTS = 1 << 22
# the layout views again at a training batch: up to 4,096 rows, within 2^23 elements of
# the widest row-wise input (838 rows at a vocabulary of 10,000) and the in-flight probe's
# work; a kernel may pick its path by row count (a pitch-walking launcher from 256 rows, a
# range check skipped from 512: round-22 red teams')
TRAINING_ROWS = 4096
TRAINING_ELEMENTS = 1 << 23
# the must-raise calls' big batch, in the same cases: up to 65,537 rows (past 65,535
# blocks, the far-rows lead's), within 2^25 elements (an honest kernel raises before its
# work; a kernel that skips its check from 8,192 rows on, a round-23 red team's, passed
# 4,096)
MUST_RAISE_ROWS = 65_537
MUST_RAISE_ELEMENTS = 1 << 25
# and, in the first dtype, a huge batch just past 2^27 elements of the widest row-wise
# input (within the in-flight probe's work), its float rows the head's repeated and
# made once: a range check skipped past 2^26 logits (a round-24 red team's) spares a
# host sync where it costs least
MUST_RAISE_HUGE_ELEMENTS = 1 << 27
# the views that move rows again at a wide batch, forward only, in every dtype: up to
# 65,537 rows within 2^26 elements (2,048 rows at a vocabulary of 32,768): a kernel may
# skip the copy of a big strided input only past 2^24 elements, a 64 MiB fp32 copy (a
# round-23 red team's logp walked the shifted view by one pitch there; its swiglu wrote
# its result over the gate half of a 2^24-element gate_up buffer; a round-27 one's
# rms_norm did on its 16-bit path alone)
WIDE_BATCH_ROWS = 65_537
WIDE_BATCH_ELEMENTS = 1 << 26
# and within 2^29 products of a row's dims (linear_logp at 64 x 1,000: 8,388 tokens, 8.4M
# logits; at 2^31, its integrity took 114 s where it had taken 8)
WIDE_BATCH_WORK = 1 << 29
# two threads calling at once again at a batch of 2^26 elements (short rows: up to 2^20): a
# kernel may stage a 16-bit input in one fp32 buffer only past a size (a round-26 red
# team's rms_norm shared it from 2^22 elements, a round-27 one's swiglu from 2^24: Llama 3
# 8B's 4 x 2,048 x 14,336 activations are 2^26.8); each thread makes CONCURRENT_ROUNDS
# calls there (a call of that size is its own long window)
CONCURRENT_ROWS, CONCURRENT_ELEMENTS = 1 << 20, 1 << 26
CONCURRENT_ROUNDS = 2
# calls of one shape in flight at once: a ring of up to 8 workspaces, a queue or a stack
# of saved statistics reads another call's
IN_FLIGHT = 9
# calls of a few rows in flight at once, first in, first out: past rings of 16 and 32
# workspaces (one per pipeline stage; 17+ micro-batches accumulated before the backwards)
MANY_IN_FLIGHT, MANY_IN_FLIGHT_ROWS = 33, 2
# what a masked position of an ``any_value`` input holds in the masked probe's second pass
NON_FINITE = (float("nan"), float("-inf"), float("inf"))
# autograd's loud refusals of a backward through a tensor edited in place: a saved
# tensor's version counter, a view made under no_grad whose base was edited
INPLACE_REFUSALS = ("modified by an inplace operation", "has been modified inplace")


def times_scale_up(t: torch.Tensor, factor: float) -> torch.Tensor:
    """``t * factor``, but an entry that would overflow its dtype (a 16-bit ``large``
    row) keeps its value: the probe is about finite inputs."""
    big = t * factor
    return torch.where(torch.isinf(big) & torch.isfinite(t), t, big)


def _wider(a: Tolerance | None, b: Tolerance | None) -> Tolerance | None:
    """The looser of two tolerances, atol and rtol each (a 16-bit case's rows in fp32
    keep the 16-bit spread, |logp| of hundreds, which the fp32 contract cannot judge)."""
    if a is None or b is None:
        return a or b
    return Tolerance(max(a.atol, b.atol), max(a.rtol, b.rtol))


def _overflows(before: torch.Tensor, after: torch.Tensor) -> bool:
    """A finite value of ``before`` became infinite in ``after`` (its conversion)."""
    return bool((torch.isfinite(before) & ~torch.isfinite(after)).any())


def _lead_reversed_in_memory(v: torch.Tensor, nlead: int) -> torch.Tensor:
    """``v``'s values and shape, its first ``nlead`` dims laid out in reversed order in
    memory: dense, each row contiguous, the tensor not contiguous."""
    order = [*reversed(range(nlead)), *range(nlead, v.dim())]  # its own inverse
    return v.permute(order).contiguous().permute(order)


def _halves_of_one_buffer(inputs: dict, floats: list[str]) -> tuple[str, dict, tuple] | None:
    """The first two row-wise float inputs of one shape and dtype as the halves of one
    buffer's rows (``gate, up = gate_up.chunk(2, -1)``, a fused projection's output):
    (label, inputs, lead), or None. A kernel that recognises the layout and takes a
    fused path (writing its result over the first half, say) shows here only."""
    for a, b in itertools.combinations(floats, 2):
        x, y = inputs[a], inputs[b]
        if x.shape == y.shape and x.dtype == y.dtype:
            both = torch.cat([x, y], dim=-1)
            n = x.shape[-1]
            halves = {**inputs, a: both[..., :n], b: both[..., n:]}
            return f"{a} and {b} halves of one buffer", halves, tuple(x.shape[:-1])
    return None


def _past_storage_start(v: torch.Tensor) -> torch.Tensor:
    """``v``'s values in a contiguous view one element into its storage (``ids[:, 1:]`` of
    one sequence, a parameter in FSDP's flat buffer), the element before it poisoned
    (NaN, or ``v``'s last value): a kernel that reads from the storage's start instead of
    ``data_ptr()`` reads everything one element early."""
    flat = v.reshape(-1)
    buf = torch.empty(flat.numel() + 1, dtype=v.dtype, device=v.device)
    if v.is_floating_point():
        buf[0] = float("nan")
    else:
        buf[0] = flat[-1] if flat.numel() else 0
    buf[1:] = flat
    return buf[1:].view(v.shape)


def plant_out_of_range(ctx, inputs: dict) -> tuple[list[int], list[int]]:
    """Put the op's out-of-range index values into every other row of ``inputs`` (in place),
    or into consecutive rows where every other row is too few to hold each value once.

    Returns the rows changed and the values used (each value at least once where there
    are as many rows as values).
    """
    rule = ctx.op.out_of_range
    idx = inputs[rule.input].reshape(-1)
    values = [eval_dim_expr(v, ctx.sizes) for v in rule.values]
    step = 2 if -(-idx.numel() // 2) >= len(values) else 1
    rows = list(range(0, idx.numel(), step))[: max(len(values), idx.numel() // 2)]
    for j, r in enumerate(rows):
        idx[r] = values[j % len(values)]
    return rows, values


class Contract(Check):
    name = "contract"
    uses = frozenset({"outputs"})
    small_inputs = True
    # scale_up: the drawn inputs' factor in _scaled_up (a power of two; 0: no such probe)
    PARAMS = {
        "max_seeds": 1,
        "rows": 16,
        "scale_up": SCALE_UP,
        # loss_scale: the upstream's factor in _loss_scaled (a power of two; 0: no such probe)
        "loss_scale": LOSS_SCALE,
        # the upstream's factor in _scaled_down (a power of two below 1; 0: no such probe)
        "token_mean_scale": TOKEN_MEAN_SCALE,
        # two calls in flight at a big batch, in the big-batch cases of the first dtype:
        # rows up to this many elements of the widest row-wise input and up to
        # in_flight_work products of a row's dims
        "in_flight_elements": 3 << 23,
        "in_flight_work": 1 << 31,
        # the training batch's rows at most (0: no training-batch probe), and its elements
        "training_rows": TRAINING_ROWS,
        "training_elements": TRAINING_ELEMENTS,
        # the wide batch's rows at most (0: no wide-batch probe), and its elements
        "wide_rows": WIDE_BATCH_ROWS,
        "wide_elements": WIDE_BATCH_ELEMENTS,
        "wide_work": WIDE_BATCH_WORK,
        # two threads calling at once again at a big batch: its rows at most and its
        # elements of the widest row-wise input (within wide_work; 0: none)
        "concurrent_rows": CONCURRENT_ROWS,
        "concurrent_elements": CONCURRENT_ELEMENTS,
        # the must-raise calls' big batch's rows at most (0: none), and its elements
        "must_raise_rows": MUST_RAISE_ROWS,
        "must_raise_elements": MUST_RAISE_ELEMENTS,
        # the must-raise calls' huge batch: past these elements (0: none)
        "must_raise_huge_elements": MUST_RAISE_HUGE_ELEMENTS,
    }
    summary = "dtype, shape, out-of-range -> exact value, empty input, strided == contiguous bits"

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.problems: list[str] = []
        self.errors: list[str] = []  # out of memory in a probe: a resource, not the contract
        self.passed: list[str] = []
        self.trial: Trial | None = None
        self.done = False

    def observe(self, trial: Trial) -> None:
        if self.done:  # the contract is about the interface: one trial is enough
            return
        self.done, self.trial = True, trial
        # every probe runs and reports on its own: one that raises never hides the next
        probes = (
            self._types,
            self._unit_leads,
            self._out_of_range,
            self._masked,
            self._all_true_mask,
            self._must_raise,
            self._empty,
            self._strided,
            self._strided_at_training_batch,
            self._strided_at_wide_batch,
            self._column_major_rows,
            self._shared_views,
            self._strided_upstream,
            self._unused_outputs,
            self._edited_outputs,
            self._edited_inputs,
            self._edited_indices,
            self._calls_in_flight,
            self._many_calls_in_flight,
            self._calls_in_flight_at_scale,
            self._accumulated_grads,
            self._calls_from_threads,
            self._fp32_shared_inputs,
            self._narrow_shared_inputs,
            self._narrow_row_inputs,
            self._integer_masks,
            self._under_autocast,
            self._under_default_dtype,
            self._updated_in_place,
            self._updated_in_place_at_wide_batch,
            self._after_siblings,
            self._scaled_up,
            self._nan_inputs,
            self._loss_scaled,
            self._scaled_down,
            self._other_dtypes,
            self._other_attributes,
            self._other_switches,
        )
        for part in probes:
            probe = part.__name__.strip("_")
            self.progress(probe)
            try:
                part(trial)
            except WrongOutput as exc:
                self.problems.append(f"{probe}: {exc}")
            except CandidateFault as exc:
                if exc.out_of_memory:
                    self.errors.append(f"{probe}: {exc}")
                else:  # raising where the contract asks for a value breaks the contract
                    self.problems.append(f"{probe}: {exc}")

    def _head(self, trial: Trial) -> tuple[dict, tuple[int, ...]]:
        """The trial's first rows as a 2-D lead batch: the interface parts need no more."""
        op = self.ctx.op
        nlead = len(self.ctx.lead)
        n = min(int(self.params["rows"]), math.prod(self.ctx.lead))
        head = {}
        for spec in op.inputs:
            t = trial.cpu_inputs[spec.name]
            head[spec.name] = flat_rows(t, nlead)[:n].clone() if op.is_row_wise(spec) else t
        return head, (n,)

    def _types(self, trial: Trial) -> None:
        # dtype and shape from the trial's full-size call, which the accuracy checks share;
        # the device (lost when outputs move to the CPU) from a call on the first rows
        head, _ = self._head(trial)
        devices = [o.device for o in self.ctx.call(self.ctx.to_device(head))]
        for i, (o, device) in enumerate(zip(trial.outputs, devices)):
            name = self.ctx.op.outputs[i].name
            want_dtype, want_shape = self.ctx.expected_dtype(i), self.ctx.expected_shape(i)
            if o.dtype != want_dtype:
                self.problems.append(f"{name}: dtype {o.dtype} != expected {want_dtype}")
            if tuple(o.shape) != want_shape:
                self.problems.append(f"{name}: shape {tuple(o.shape)} != expected {want_shape}")
            if device.type != self.ctx.device.type:
                self.problems.append(f"{name}: on {device}, expected {self.ctx.device.type}")
        self.passed.append("dtype/shape/device")

    def _unit_leads(self, trial: Trial) -> None:
        """Leads with dims of size one: one row alone as lead (1,) and, for an op with two
        lead dims, (1, 1), (n, 1) (one token per sequence: a decode step) and (1, n): every
        output has exactly that lead's shape. A kernel that squeezes the gathered column
        with ``.squeeze()`` instead of ``.squeeze(-1)`` drops them, and a caller's
        ``logp * mask`` then broadcasts [B] against [B, 1] into [B, B]."""
        ctx, op = self.ctx, self.ctx.op
        head, (n,) = self._head(trial)
        leads = [(1,)] + (
            [(1, 1)] + ([(n, 1), (1, n)] if n > 1 else []) if len(op.lead) > 1 else []
        )
        before = len(self.problems)
        for lead in leads:
            rows = math.prod(lead)
            inputs = {
                k: v[:rows].reshape(*lead, *v.shape[1:]) if op.is_row_wise(op.input(k)) else v
                for k, v in head.items()
            }
            for i, o in enumerate(ctx.call(ctx.to_device(inputs))):
                want = ctx.expected_shape(i, lead)
                if tuple(o.shape) != want:
                    self.problems.append(
                        f"lead {lead}: output {op.outputs[i].name!r} shape {tuple(o.shape)} "
                        f"!= expected {want}"
                    )
        if len(self.problems) == before:
            self.passed.append(f"leads {', '.join(map(str, leads))}: output shapes")

    def _out_of_range(self, trial: Trial) -> None:
        rule = self.ctx.op.out_of_range
        if rule is None:
            return
        inputs, lead = self._head(trial)
        rows, values = plant_out_of_range(self.ctx, inputs)
        idx = inputs[rule.input].reshape(-1)
        before = len(self.problems)
        for inference in (False, True):  # a rollout's path may be a kernel of its own
            try:
                outs = self.ctx.call(self.ctx.to_device(inputs), inference)
            except CandidateFault as exc:
                if exc.out_of_memory:
                    raise
                raise CandidateFault(
                    f"{rule.input} in {values} (out of range) {exc}, where the contract asks "
                    f"for exactly {rule.output!r}"
                ) from None
            self._out_of_range_outputs(outs, idx, rows, " under inference_mode" * inference)
        outs, nonzero = self._nonzero_gradients(
            trial, inputs, lead, rows, rule.gradients, rule.outputs
        )
        self._out_of_range_outputs(outs, idx, rows, " (with grad)")
        for n in nonzero:
            src = f" (from {', '.join(rule.outputs)})" if rule.outputs is not None else ""
            self.problems.append(f"gradient:{n}{src} is not zero on out-of-range rows")
        if len(self.problems) == before:
            self.passed.append(f"out-of-range {rule.input} -> {rule.output}")

    def _out_of_range_outputs(self, outs: list, idx: torch.Tensor, rows: list, how: str) -> None:
        """A problem for the first output (in the rule's scope) that is not exactly the
        rule's value on the planted ``rows``; ``how`` names the call (a training path and
        a rollout's may check the range apart)."""
        rule = self.ctx.op.out_of_range
        want = torch.tensor(rule.output, dtype=torch.float32)
        for spec, o in zip(self.ctx.op.outputs, outs):
            if rule.outputs is not None and spec.name not in rule.outputs:
                continue  # the rule is scoped to other outputs
            flat = o.detach().cpu().reshape(-1)
            if flat.numel() != idx.numel():
                continue  # the shape problem is reported by _types
            got = flat[rows]
            bad = bits(got.to(torch.float32)) != bits(want.expand_as(got))
            if bool(bad.any()):
                k = int(bad.nonzero()[0])
                self.problems.append(
                    f"{spec.name}{how}: {rule.input}={int(idx[rows[k]])} (out of range) gave "
                    f"{got[k].item()!r}, expected exactly {rule.output!r}: "
                    + first_bit_difference(got[k : k + 1].float(), want.view(1))
                )

    def _nonzero_gradients(self, trial, inputs, lead, rows, only=None, source=None):
        """(outputs, names): a backward call's outputs on ``inputs`` and its row-wise
        gradients (of ``only``, None: all) not all zero on ``rows`` of the flat lead (no
        call when backward checks are off, or ``only`` is empty: ([], [])), the upstream
        gradient of each output not in ``source`` (None: all) zero, so what is judged is
        the gradient that flows from ``source`` alone."""
        if not self.ctx.grad or only == ():
            return [], []
        upstream = self.ctx.upstream(trial.seed, lead)
        if source is not None:
            names = [o.name for o in self.ctx.op.outputs]
            upstream = [u if n in source else torch.zeros_like(u) for n, u in zip(names, upstream)]
        outs, grads = self.ctx.call_backward(self.ctx.to_device(inputs), upstream)
        nrows = math.prod(lead)
        return outs, [
            n
            for n, g in grads.items()
            if self.ctx.op.is_row_wise(self.ctx.op.input(n))
            and (only is None or n in only)
            and bool((g.cpu().reshape(nrows, -1)[rows] != 0).any())
        ]

    def _masked(self, trial: Trial) -> None:
        """Every other row masked out (with out-of-range ids there, when the rule says any
        id goes): exactly the declared outputs there, a zero gradient, and the active rows
        as they are with the masked rows left as drawn. Again with NaN, -inf and +inf in
        the rule's ``any_value`` inputs there: a kernel that neutralises padding by
        multiplying with the mask (``(lp - old) * m``) is exact on every finite value and
        NaN on a rollout buffer's unwritten padding."""
        rule = self.ctx.op.masked
        if rule is None:
            return
        self._masked_once(trial, rule, garbage=False)
        if rule.any_value:
            self._masked_once(trial, rule, garbage=True)

    def _masked_once(self, trial: Trial, rule, garbage: bool) -> None:
        inputs, lead = self._head(trial)
        mask = inputs[rule.mask].reshape(-1)
        mask[:] = True
        mask[::2] = False
        masked = (~mask).nonzero().flatten()
        for name in rule.any_index:  # masked positions may hold any id: in range (a
            # kernel that ignores the mask reads it) or out of range (one must not raise)
            ids = inputs[name].reshape(-1)
            bound = self.ctx.sizes[self.ctx.op.input(name).index_of]
            for k, pos in enumerate(masked.tolist()):
                ids[pos] = (pos % bound, -1, bound + 7)[k % 3]
        held = ""
        if garbage:
            for name in rule.any_value:
                rows = inputs[name].reshape(len(mask), -1)
                for k, pos in enumerate(masked.tolist()):  # a value meets more than one id kind
                    rows[pos] = NON_FINITE[(k + k // 3) % len(NON_FINITE)]
            held = f" with {', '.join(rule.any_value)} NaN, -inf, +inf there"
        before = len(self.problems)
        for inference in (False, True):  # a rollout's path may be a kernel of its own
            outs = self.ctx.call(self.ctx.to_device(inputs), inference)
            self._masked_outputs(outs, masked, held + " under inference_mode" * inference)
        outs, nonzero = self._nonzero_gradients(trial, inputs, lead, masked)
        self._masked_outputs(outs, masked, held + " (with grad)")
        for n in nonzero:
            self.problems.append(f"gradient:{n} is not zero at masked positions{held}")
        if len(self.problems) == before:
            self.passed.append(f"masked ({rule.mask} false) -> exact outputs{held}")

    def _masked_outputs(self, outs: list, masked: torch.Tensor, how: str) -> None:
        """A problem for each declared output of ``outs`` (one call's, named by ``how``)
        that is not exactly its value at the ``masked`` positions."""
        names = [o.name for o in self.ctx.op.outputs]
        for name, value in self.ctx.op.masked.outputs if outs else ():
            got = outs[names.index(name)].detach().cpu().reshape(-1)[masked].float()
            want = torch.full_like(got, value)
            bad = bits(got) != bits(want)
            if bool(bad.any()):
                k = int(bad.nonzero()[0])
                self.problems.append(
                    f"{name}{how}: masked position {int(masked[k])} gave {got[k].item()!r}, "
                    f"expected exactly {value!r}: " + first_bit_difference(got[k : k + 1], want[:1])
                )

    def _all_true_mask(self, trial: Trial) -> None:
        """A mask true everywhere gives the bits of no mask at all, outputs and gradients,
        where an attribute switches the mask on: the rollout's old logps are often taken
        without one and the training step's with one, and their PPO ratio must be exactly
        1 (a kernel that sums in another order once a mask is passed is off by ulps)."""
        rule = self.ctx.op.masked
        if rule is None or rule.mask not in self.ctx.op.switched_on:
            return
        inputs, lead = self._head(trial)
        inputs[rule.mask].fill_(True)
        without = {k: v for k, v in inputs.items() if k != rule.mask}
        upstream = self.ctx.upstream(trial.seed, lead) if self.ctx.grad else None
        masked = self._labelled_call(inputs, upstream)()
        plain = dict(self._labelled_call(without, upstream)())
        before = len(self.problems)
        for label, got in masked:
            want = plain.get(label)
            if want is None or got.shape != want.shape or got.dtype != want.dtype:
                self.problems.append(f"all-true {rule.mask}: {label} unlike the call without it")
            elif not bool((bits(got) == bits(want)).all()):
                self.problems.append(
                    f"all-true {rule.mask}: {label} differs from the call without "
                    f"{rule.mask}: {first_bit_difference(got, want)}"
                )
        if len(self.problems) == before:
            self.passed.append(f"all-true {rule.mask} == no {rule.mask}, in every bit")

    def _must_raise(self, trial: Trial) -> None:
        """Each declared value at an active position must make the candidate raise, in
        each call mode: no grad, under ``inference_mode`` (a rollout's) and with grad (a
        training step's), which may be kernels of their own, each with its own check; in
        the trial's first rows, in a packed batch of up to PACKED_ROWS rows (within
        PACKED_ELEMENTS products of a row's dims, at least the head's), and, in the cases
        of :meth:`_big_batch_rows`, in one of up to 65,537 rows: every position active
        (the rule's mask all true: sequence packing leaves no padding), and in the first
        dtype at a huge batch past ``must_raise_huge_elements`` (:meth:`_huge_must_raise_rows`).
        A kernel may take a fast path for an all-true mask or many rows that skips the
        masked selects and its range check (a host sync)."""
        rule = self.ctx.op.must_raise
        if rule is None:
            return
        before = len(self.problems)
        self._raises_in(trial, *self._head(trial), "")
        packed = min(
            PACKED_ROWS, max(int(self.params["rows"]), PACKED_ELEMENTS // self.ctx.row_work)
        )
        big = self._big_batch_rows("must_raise_rows", "must_raise_elements")
        for rows, salt, batch in (
            (packed, "packed", "a packed batch"),
            (big, "must raise", "a batch"),
        ):
            if rows and len(self.problems) == before:
                drawn = self.ctx.draw(trial.seed, trial.distribution, lead=(rows,), salt=salt)
                if rule.where:
                    drawn[rule.where] = torch.ones_like(drawn[rule.where])
                self._raises_in(trial, drawn, (rows,), f" in {batch} of {rows} rows")
        huge = self._huge_must_raise_rows(big)
        if huge and len(self.problems) == before:
            inputs = self._repeated_head(trial, huge)
            if rule.where:
                inputs[rule.where] = torch.ones_like(inputs[rule.where])
            self._raises_in(trial, inputs, (huge,), f" in a batch of {huge} rows", once=True)
        if len(self.problems) == before:
            self.passed.append(f"{rule.input} out of range -> raises")

    def _huge_must_raise_rows(self, big: int) -> int:
        """The must-raise calls' huge batch's rows (0: none): in the first dtype's cases of
        the big batches, just past ``must_raise_huge_elements`` of the widest row-wise
        input, within ``in_flight_work`` of a row's products, more than ``big``."""
        ctx, elements = self.ctx, int(self.params["must_raise_huge_elements"])
        if not elements or not big or not ctx.at_first_dtype():
            return 0
        rows = elements // ctx.widest_row() + 1
        fits = rows <= int(self.params["in_flight_work"]) // ctx.row_work
        return rows if fits and rows > big else 0

    def _repeated_head(self, trial: Trial, rows: int) -> dict:
        """The head's row-wise inputs repeated to ``rows`` rows (no draw: the calls are
        to raise before their work), the shared ones as they are."""
        op = self.ctx.op
        head, lead = self._head(trial)
        reps = -(-rows // lead[0])
        return {
            k: v.repeat(reps, *[1] * (v.dim() - 1))[:rows] if op.is_row_wise(op.input(k)) else v
            for k, v in head.items()
        }

    def _raises_in(self, trial: Trial, drawn: dict, lead, batch: str, once=False) -> None:
        """The must-raise calls on ``drawn`` (each value planted at the first position and
        at the last, active), each failing one a problem; ``batch`` names the batch.
        ``once``: the float inputs copied to the device once for every call (a huge batch;
        their writes are integrity's to judge)."""
        rule, ctx = self.ctx.op.must_raise, self.ctx
        floats = {k: v for k, v in drawn.items() if v.is_floating_point()} if once else {}
        floats = ctx.to_device(floats)
        modes = {
            "": lambda d, lead: ctx.call(d),
            " under inference_mode": lambda d, lead: ctx.call(d, True),
        }
        if ctx.grad:
            modes[" with grad"] = lambda d, lead: ctx.call_backward(
                d, ctx.upstream(trial.seed, lead)
            )
        # at the first position and at the last: a check over the first rows (a block's,
        # a first tile's) alone misses the rest
        for value, at in itertools.product(rule.values, (0, -1)):
            inputs = {k: v.clone() for k, v in drawn.items() if k not in floats}
            if rule.where:
                inputs[rule.where].reshape(-1)[at] = True
            v = eval_dim_expr(value, self.ctx.sizes)
            inputs[rule.input].reshape(-1)[at] = v
            for how, call in modes.items():
                try:
                    call({**ctx.to_device(inputs), **floats}, lead)
                except CandidateFault as exc:
                    if exc.out_of_memory:
                        raise
                    continue  # raised, as the contract asks
                where = f" at an active position ({rule.where} true)" if rule.where else ""
                last = " (the last position)" if at else ""
                self.problems.append(f"{rule.input}={v}{where}{last}{batch} did not raise{how}")
                break

    def _empty(self, trial: Trial) -> None:
        if not self.ctx.op.lead:
            return
        lead = (0,) + self.ctx.lead[1:]
        inputs = self.ctx.draw(trial.seed, trial.distribution, lead=lead, salt="empty")
        outs = self.ctx.call(self.ctx.to_device(inputs))
        before = len(self.problems)
        for i, o in enumerate(outs):
            want = self.ctx.expected_shape(i, lead)
            if tuple(o.shape) != want or o.dtype != self.ctx.expected_dtype(i):
                self.problems.append(
                    f"empty input: got {tuple(o.shape)} {o.dtype}, "
                    f"expected {want} {self.ctx.expected_dtype(i)}"
                )
        if self.ctx.grad:
            _, grads = self.ctx.call_backward(
                self.ctx.to_device(inputs), self.ctx.upstream(trial.seed, lead)
            )
            self._empty_gradients(inputs, grads)
        if len(self.problems) == before:
            self.passed.append("empty input")

    def _empty_gradients(self, inputs: dict, grads: dict) -> None:
        """Each gradient of an input of no rows has its input's shape, and a shared
        input's (a weight's: a sum over no rows) is exactly zero: an MoE expert that got no
        tokens still gets a gradient, and a kernel that only stores its partial sums
        when it has rows leaves it unwritten."""
        for name, g in grads.items():
            g = g.detach().cpu()
            if tuple(g.shape) != tuple(inputs[name].shape):
                self.problems.append(
                    f"empty input: gradient {name!r} shape {tuple(g.shape)} != its input's "
                    f"{tuple(inputs[name].shape)}"
                )
            elif g.numel() and not bool((g == 0).all()):
                k = int((g != 0).reshape(-1).nonzero()[0])
                self.problems.append(
                    f"empty input: gradient {name!r} is not zero (a sum over no rows): "
                    f"{int((g != 0).sum())} of {g.numel()} elements, first at flat index {k}: "
                    f"{g.reshape(-1)[k].item()!r}"
                )

    def _strided(
        self, trial: Trial, head: dict | None = None, batch: str = "", wide: bool = False
    ) -> None:
        """Non-contiguous inputs give the bits of their contiguous copies, forward and
        backward: rows padded (all row-wise inputs, then each alone), every other column,
        every input (ids and weights too) contiguous but one element into its storage,
        two inputs as the halves of one buffer, every other row, the shifted-token views
        of RL (``logits[:, :-1]`` with ``ids[:, 1:]``), whose lead dims do not flatten
        into one stride, and lead dims permuted in memory (dense, not contiguous:
        [s, b, h] seen as [b, s, h]): a kernel that addresses rows as
        ``row * stride(-2)``, or every operand by one operand's strides, reads other rows.
        Each view on its own: one that raises (a ``fail``, named) never hides the next.
        Of the trial's first rows, or of ``head`` (one lead dim), ``batch`` naming it;
        ``wide``: the views that move rows (:meth:`_strided_views`), forward only."""
        before = len(self.problems)
        head = self._head(trial)[0] if head is None else head
        for label, views, lead in self._strided_views(trial, head, wide):
            label += batch
            # fresh copies: a view that is contiguous already gets one at offset 0 too
            contiguous = {
                k: v.clone(memory_format=torch.contiguous_format) for k, v in views.items()
            }
            try:
                self._same_bits(label, views, contiguous)
                if not wide:
                    upstream = self.ctx.upstream(trial.seed, lead)
                    self._same_gradient_bits(label, upstream, views, contiguous)
            except CandidateFault as exc:
                if exc.out_of_memory:
                    raise
                self.problems.append(f"{label}: {exc}")
        if len(self.problems) == before:
            self.passed.append(f"non-contiguous == contiguous{batch}")

    def _strided_at_training_batch(self, trial: Trial) -> None:
        """The layout views (:meth:`_strided`) again at a training batch of up to 4,096 rows
        (:meth:`_big_batch_rows`): a kernel may walk rows by one pitch only past some row
        count, where the grid's 16-row probes never go."""
        rows = self._big_batch_rows("training_rows", "training_elements")
        if rows:
            drawn = self.ctx.draw(trial.seed, trial.distribution, lead=(rows,), salt="training")
            self._strided(trial, drawn, f" in a training batch of {rows} rows")

    def _strided_at_wide_batch(self, trial: Trial) -> None:
        """The layout views that move rows (:meth:`_strided_views`), forward only, at a
        wide batch of up to ``wide_elements`` (2^26) elements of the widest row-wise input,
        in every dtype: a kernel may skip the copy of a big non-contiguous input (walking
        its rows by one pitch) or write its result over an input buffer only past a size
        the training batch never reaches, and on its 16-bit path alone (a round-27 red
        team's rms_norm passed when this ran in the first dtype only)."""
        rows = self._wide_batch_rows()
        if rows:
            drawn = self.ctx.draw(trial.seed, trial.distribution, lead=(rows,), salt="wide")
            self._strided(trial, drawn, f" in a wide batch of {rows} rows", wide=True)

    def _wide_batch_rows(self) -> int:
        """The wide batch's rows (0: none in this case): up to ``wide_rows`` within
        ``wide_elements`` of the widest row-wise input and ``wide_work`` of a row's
        products, if more than the training batch's."""
        rows = self._big_batch_rows("wide_rows", "wide_elements", "wide_work")
        return rows if rows > self._big_batch_rows("training_rows", "training_elements") else 0

    def _big_batch_rows(self, most: str, elements: str, work: str = "in_flight_work") -> int:
        """``CaseContext.big_batch_rows`` at the params ``most``, ``elements`` and
        ``work``, if more than the head's rows (else 0)."""
        p = self.params
        rows = self.ctx.big_batch_rows(int(p[most]), int(p[elements]), int(p[work]))
        return rows if rows > int(p["rows"]) else 0

    def _strided_views(
        self, trial: Trial, head: dict, wide: bool = False
    ) -> Iterator[tuple[str, dict, tuple[int, ...]]]:
        """(label, device inputs, lead shape) of each non-contiguous layout the op takes,
        of ``head``'s rows (one lead dim); the shifted and permuted views as many rows in
        sequences of up to 8 (at least 2 sequences). ``wide``: only the views whose rows
        no one pitch finds from the first, or that share one buffer (row-padded, halves of
        one buffer, decode step, shifted-token, lead-permuted): each a big copy to skip."""
        op = self.ctx.op
        row_wise = {i.name: op.is_row_wise(i) for i in op.inputs}
        n = next((v.shape[0] for k, v in head.items() if row_wise[k] and v.dim()), 1)
        padded = self._widened(head, row_wise, 3, slice(None))
        yield "row-padded view", padded, (n,)
        # each alone, the others contiguous: a kernel that addresses every operand by one
        # operand's strides (a fused activation's up by gate's) reads other rows
        floats = [
            k for k, v in head.items() if row_wise[k] and v.is_floating_point() and v.dim() > 1
        ]
        for k in floats if len(floats) > 1 and not wide else []:
            yield f"row-padded {k} alone", {**self.ctx.to_device(head), k: padded[k]}, (n,)
        del padded
        if not wide:  # every other column of rows twice as wide: stride(-1) == 2
            yield (
                "column-strided view",
                self._widened(head, row_wise, 0, slice(None, None, 2)),
                (n,),
            )
        if halves := _halves_of_one_buffer(self.ctx.to_device(head), floats):
            yield halves
        if not wide:
            past = {k: _past_storage_start(v) for k, v in self.ctx.to_device(head).items()}
            yield "contiguous views past their storage's start", past, (n,)
        if not op.lead:
            return
        if not wide:
            double = self.ctx.draw(trial.seed, trial.distribution, lead=(2 * n,), salt="strided")
            dev = self.ctx.to_device(double)
            yield (
                "lead-strided view",
                {k: (v[::2] if row_wise[k] else v) for k, v in dev.items()},
                (n,),
            )
        yield from self._views_moving_rows(trial, head, row_wise, n)

    def _widened(self, head: dict, row_wise: dict, pad: int, columns: slice) -> dict:
        """``head`` on the device, its row-wise float inputs (2-D and up) as views of rows
        ``pad`` wider (``pad`` 0: twice as wide), their ``columns`` the values."""
        out = {}
        for k, v in self.ctx.to_device(head).items():
            if row_wise[k] and v.is_floating_point() and v.dim() > 1:
                width = v.shape[-1] + pad if pad else 2 * v.shape[-1]
                wide = torch.zeros(*v.shape[:-1], width, dtype=v.dtype, device=v.device)
                view = wide[..., columns][..., : v.shape[-1]]
                view.copy_(v)
                v = view
            out[k] = v
        return out

    def _views_moving_rows(
        self, trial: Trial, head: dict, row_wise: dict, n: int
    ) -> Iterator[tuple[str, dict, tuple[int, ...]]]:
        """The decode-step, shifted-token and lead-permuted views of :meth:`_strided_views`:
        rows where no one pitch finds them."""
        nlead = len(self.ctx.lead)
        if nlead == 2 and n > 1:
            # a decode step of sequence-first rows ([s, b, h] at one position, seen as
            # [b, 1, h]): packed in memory, but the unit dim's stride spans n rows, which
            # torch's is_contiguous ignores; a kernel whose row pitch is stride(-2) skips
            decode = {
                k: v.reshape(1, n, *v.shape[1:]).transpose(0, 1) if row_wise[k] else v
                for k, v in self.ctx.to_device(head).items()
            }
            yield "decode step of sequence-first rows (lead (n, 1))", decode, (n, 1)
        seq = min(self.ctx.lead[-1], 8) if nlead >= 2 else 0
        if not seq:
            return
        lead = (*[2] * (nlead - 2), max(2, n // seq), seq + 1)
        # normal rows: a masked row spares its own target, not its neighbour's
        longer = self.ctx.to_device(self.ctx.draw(trial.seed, "normal", lead, "shift"))
        cut = nlead - 1  # the last lead dim: logits drop the last token, ids the first
        shifted = {
            k: (v.narrow(cut, 0 if v.is_floating_point() else 1, seq) if row_wise[k] else v)
            for k, v in longer.items()
        }
        yield "shifted-token view", shifted, (*lead[:-1], seq)
        # Megatron's [s, b, h] activations seen as [b, s, h]: dense, rows contiguous, the
        # lead dims in reversed memory order (a kernel that reads a dense input in memory
        # order, without a copy, puts rows in other places)
        lead = (*lead[:-1], seq)
        drawn = self.ctx.to_device(self.ctx.draw(trial.seed, "normal", lead, "permuted"))
        permuted = {
            k: _lead_reversed_in_memory(v, nlead) if row_wise[k] else v for k, v in drawn.items()
        }
        yield "lead dims permuted in memory", permuted, lead

    def _shared_floats(self, head: dict) -> list[str]:
        """The shared float inputs of more than one element (a norm's weight, an lm_head,
        a bias): what a kernel may cache, read through a pointer or keep in fp32."""
        op = self.ctx.op
        return [
            k
            for k, v in head.items()
            if not op.is_row_wise(op.input(k)) and v.is_floating_point() and v.numel() > 1
        ]

    def _column_major_rows(self, trial: Trial) -> None:
        """The row-wise float inputs column-major (dense, every dim in reversed memory
        order: ``x.t()`` of a ``[H, N]`` buffer, logits computed as ``(W @ h.T).T``), all
        at once: outputs and gradients within twice the contract tolerance of the
        contiguous call's (values: an honest kernel may reduce a strided row in another
        order). A kernel that reads a dense input in memory order without a copy (its
        check ``is_non_overlapping_and_dense``, not ``is_contiguous``) mixes the rows;
        the lead-permuted view shows that at two lead dims only."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        names = [
            k
            for k, v in head.items()
            if op.is_row_wise(op.input(k)) and v.is_floating_point() and v.dim() > 1
        ]
        if not names or lead[0] < 2:
            return
        contiguous = ctx.to_device(head)
        views = dict(contiguous)
        for k in names:
            order = list(reversed(range(contiguous[k].dim())))  # its own inverse
            views[k] = contiguous[k].permute(order).contiguous().permute(order)
        self._near_contiguous(trial, f"column-major {', '.join(names)}", views, contiguous, lead)

    def _near_contiguous(self, trial: Trial, label: str, views: dict, contiguous: dict, lead):
        """Outputs and gradients of the call on ``views`` within twice the contract
        tolerance of the call on their ``contiguous`` copies."""
        before = len(self.problems)
        for what, tol, g, w in self._value_pairs(trial, views, contiguous, lead):
            self._close(f"{label}: {what}", "the contiguous call's", tol, g, w, scale=2.0)
        if len(self.problems) == before:
            self.passed.append(f"{label} == contiguous, within tolerance")

    def _shared_views(self, trial: Trial) -> None:
        """Each shared float input as a non-contiguous view: 2+ dims transposed in memory
        (an lm_head stored [H, V], as GPT-2's Conv1D keeps it, passed as ``w.t()``), 1 dim
        every other element of a NaN-padded tensor. Outputs and gradients within twice
        the contract tolerance of the contiguous call's (values, not bits: a transposed
        weight may take another GEMM path, and each path may be off the gold by the
        tolerance). A kernel that reads a weight through its pointer as contiguous reads
        the wrong order, or the NaNs."""
        ctx = self.ctx
        head, lead = self._head(trial)
        names = self._shared_floats(head)
        if not names:
            return
        contiguous = ctx.to_device(head)
        views = dict(contiguous)
        for k in names:
            v = contiguous[k]
            if v.dim() >= 2:
                views[k] = v.transpose(-1, -2).contiguous().transpose(-1, -2)
            else:
                views[k] = torch.stack([v, torch.full_like(v, math.nan)], dim=-1)[..., 0]
        self._near_contiguous(trial, f"non-contiguous {', '.join(names)}", views, contiguous, lead)

    def _close(self, what: str, whose: str, tol, got, want, scale: float = 1.0) -> None:
        """A problem where ``got`` is outside ``scale`` x ``tol`` of ``want`` (the accuracy
        checks' rule and statistics), naming the first element outside; no tolerance:
        not judged (``scale`` 2: two candidate calls, each within ``tol`` of the gold).
        NaN in both at an element agrees: two calls of the candidate (past half range, an
        honest kernel's NaN in one call is its NaN in the other); a gold's NaN is left out
        by its callers."""
        if tol is None:
            return
        g, w = got.detach().cpu(), want.detach().cpu().double()
        if g.shape != w.shape:
            self.problems.append(f"{what}: shape {tuple(g.shape)} != {whose} {tuple(w.shape)}")
            return
        both_nan = g.isnan() & w.isnan()
        if both_nan.any():
            g, w = g.masked_fill(both_nan, 0.0), w.masked_fill(both_nan, 0.0)
        st = ErrorStats(scale * tol.atol, scale * tol.rtol)
        st.update(g.reshape(1, -1), w.reshape(1, -1))
        if st.n_bad:
            c, ref = st.first_bad_values
            self.problems.append(
                f"{what}: {st.n_bad} of {st.n} elements outside atol={st.atol:g}"
                f"+rtol={st.rtol:g} of {whose}; first at flat index {st.first_bad[1]}: "
                f"{c!r} vs {ref!r}"
            )

    def _updated_in_place(self, trial: Trial) -> None:
        """The inputs updated in place between two calls, the same tensors with new values
        (:meth:`_refills`). Written through ``.data``, which leaves the version counter as
        it was (DeepSpeed's parameter refresh, a static input buffer). The second call's
        outputs must be within the contract tolerance of the gold of the new values. A
        kernel that caches something derived from an input (an fp32 copy of a weight, a
        packed layout, a result) keyed by its address, identity, version or a sample of
        its elements serves the old one. Then the same with grad, the grad inputs the
        same leaf tensors in both calls, as a training step's parameters are: outputs
        against the gold, gradients against a fresh call's (a cache kept on the training
        path only: a reference model's logps reused across PPO epochs)."""
        ctx = self.ctx
        head, lead = self._head(trial)
        for how, new in self._refills(head, lead):
            names = [k for k in head if not torch.equal(new[k], head[k])]
            if not names:
                continue
            label = f"{', '.join(names)} updated in place between calls, {how}"
            before = len(self.problems)
            dev = ctx.to_device(head)
            ctx.call(dev)
            _refill(dev, new, names)
            self._judge_outputs(f"{label}: output", ctx.call(dev), new, lead)
            if ctx.grad:
                self._updated_with_grad(trial, new, names, f"{label} (with grad)")
            if len(self.problems) == before:
                self.passed.append(label + (", also with grad" if ctx.grad else ""))

    def _updated_in_place_at_wide_batch(self, trial: Trial) -> None:
        """:meth:`_updated_in_place`'s first refill (rows rolled) at the wide batch of
        :meth:`_strided_at_wide_batch`, forward only, under no_grad and inference_mode:
        the refilled call's outputs within twice the contract tolerance of a fresh call's
        on the new values (the gold of so big a batch is not needed to see an old result).
        A rollout engine may keep a big batch's result by its inputs' address only past a
        size the case's rows never reach."""
        rows = self._wide_batch_rows()
        if not rows:
            return
        ctx = self.ctx
        head = ctx.draw(trial.seed, trial.distribution, lead=(rows,), salt="wide refill")
        how, new = next(self._refills(head, (rows,)))
        names = [k for k in head if not torch.equal(new[k], head[k])]
        before = len(self.problems)
        for mode, inference in (("", False), (" (inference_mode)", True)):
            label = f"{', '.join(names)} updated in place between calls, {how}, in a wide batch"
            label += f" of {rows} rows{mode}"
            dev = ctx.to_device(head)
            ctx.call(dev, inference)
            _refill(dev, new, names)
            got, want = ctx.call(dev, inference), ctx.call(ctx.to_device(new), inference)
            for o, g, w in zip(ctx.op.outputs, got, want):
                tol = ctx.tolerance("forward_accuracy", o.name)
                what = f"{label}: output {o.name!r}"
                self._close(what, "a fresh call's on the new values", tol, g, w, 2.0)
        if len(self.problems) == before:
            self.passed.append(f"inputs updated in place in a wide batch of {rows} rows")

    def _after_siblings(self, trial: Trial) -> None:
        """Each sibling (the candidate's module's function for another op, at each of its
        attribute values: ``CaseContext.siblings``) called first on the case's very
        tensors of each float input both ops take, its other inputs drawn: the
        candidate's output must then be within the contract tolerance of the gold, and
        again after its tensors are refilled in place (:meth:`_refills`' first). A
        library whose logp keeps row statistics for its entropy, keyed by the tensor,
        serves them at the wrong temperature or for old values."""
        ctx = self.ctx
        head, lead = self._head(trial)
        how, new = next(self._refills(head, lead))
        # every input the refill changes (the ids too, rows rolled with the logits): the
        # output is judged against the gold of what the candidate's tensors then hold
        changed = [k for k in head if not torch.equal(new[k], head[k])]
        for label, sib, fn in ctx.siblings:
            both = [k for k in head if head[k].is_floating_point() and _same_input(ctx.op, sib, k)]
            if not both:
                continue
            sizes = {d: ctx.sizes.get(d, dim.default) for d, dim in sib.dims.items()}
            theirs = make_inputs(sib, sizes, ctx.case.dtype, trial.seed, "normal", lead=lead)
            dev = ctx.to_device(head)
            args = {**ctx.to_device(theirs), **{k: dev[k] for k in both}}
            what = f"after {label} on the same {', '.join(both)}"
            if not _sibling_ran(fn, args):
                continue  # a sibling that refuses these inputs is its own op's to judge
            self._judge_outputs(f"{what}: output", ctx.call(dev), head, lead, whose="the gold")
            _sibling_ran(fn, args)
            _refill(dev, new, changed)
            self._judge_outputs(f"{what}, then {how}: output", ctx.call(dev), new, lead)
            if ctx.grad:
                self._after_sibling_with_grad(trial, (head, lead), fn, theirs, both, what)
            self.passed.append(what + (", also with grad" if ctx.grad else ""))

    def _after_sibling_with_grad(self, trial, at, fn, theirs: dict, both: list, what) -> None:
        """:meth:`_after_siblings` on the training path: the sibling's forward with grad on
        the case's grad inputs as leaves (a model's logits), then the candidate's forward
        and backward on them: outputs within the contract tolerance of the gold, gradients
        within twice it of a fresh call's (state kept by the training path only). ``at``:
        the case's (head, lead)."""
        ctx, (head, lead) = self.ctx, at
        dev = ctx.to_device(head)
        for name in ctx.op.grad_inputs:
            dev[name].requires_grad_(True)
        if not _sibling_ran(fn, {**ctx.to_device(theirs), **{k: dev[k] for k in both}}, True):
            return
        ups = ctx.upstream(trial.seed, lead)
        args, outs = ctx.forward_with_grad(dev, ups)
        label = f"{what} (with grad)"
        self._judge_outputs(f"{label}: output", outs, head, lead, whose="the gold")
        grads = ctx.backward_of(args, outs, ups)
        _, fresh = ctx.call_backward(ctx.to_device(head), ups)
        for n, want in fresh.items():
            tol = ctx.tolerance("backward_accuracy", n)
            self._close(f"{label}: gradient {n!r}", "a fresh call's", tol, grads[n], want, 2.0)

    def _refills(self, head: dict, lead) -> Iterator[tuple[str, dict]]:
        """(how, new values) of each in-place update: the shared floats negated (exact; an
        optimizer step writes the weights where they are) and the row-wise inputs' rows
        rolled by one (a static buffer refilled with the next batch); then the row-wise
        float inputs' last row alone, given the first row's values, every id, mask and
        other element kept (the same tokens scored again by a refreshed model): a key
        that samples the leading elements (a fingerprint of the first 64) sees no change."""
        op = self.ctx.op
        shared = self._shared_floats(head)
        new = {k: -v if k in shared else v for k, v in head.items()}
        if lead[0] > 1:
            new = {k: v.roll(1, 0) if op.is_row_wise(op.input(k)) else v for k, v in new.items()}
        yield "rows rolled, weights negated", new
        if lead[0] < 2:
            return
        tail = dict(head)
        for k, v in head.items():
            if op.is_row_wise(op.input(k)) and v.is_floating_point():
                tail[k] = v.clone()
                tail[k][-1] = v[0]
        yield "the last row's floats alone", tail

    def _updated_with_grad(self, trial: Trial, new: dict, names: list, label: str) -> None:
        """:meth:`_updated_in_place`'s second half: two forward and backward calls on the
        same tensors (grad inputs leaves that require grad), refilled in between."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        dev = ctx.to_device(head)
        for name in op.grad_inputs:
            dev[name].requires_grad_(True)  # fresh copies: leaves, kept across both calls
        ups = ctx.upstream(trial.seed, lead)
        ctx.backward_of(*ctx.forward_with_grad(dev, ups), ups)
        _refill(dev, new, names)
        args, outs = ctx.forward_with_grad(dev, ups)
        self._judge_outputs(f"{label}: output", outs, new, lead)
        grads = ctx.backward_of(args, outs, ups)
        # against a fresh call on the new values (two calls: twice the tolerance), not the
        # gold: whether each gradient is right is backward_accuracy's to say
        _, fresh = ctx.call_backward(ctx.to_device(new), ups)
        for n, want in fresh.items():
            tol = ctx.tolerance("backward_accuracy", n)
            what = f"{label}: gradient {n!r}"
            self._close(what, "a fresh call's on the new values", tol, grads[n], want, 2.0)

    def _judge_outputs(
        self, what, got, inputs, lead, gold_fn=None, whose="the gold of the new values"
    ) -> None:
        """Each output within the contract tolerance of the gold (``gold_fn``, default the
        case's) of ``inputs``."""
        ctx = self.ctx
        want = gold.forward(ctx.op, gold_fn or ctx.gold_fn, inputs, lead)
        for o, g, w in zip(ctx.op.outputs, got, want):
            tol = ctx.tolerance("forward_accuracy", o.name)
            self._close(f"{what} {o.name!r}", whose, tol, g, w)

    def _fp32_shared_inputs(self, trial: Trial) -> None:
        """In a 16-bit case, the shared float inputs (a norm's weight, an lm_head, a bias)
        in fp32 instead, the very same values upcast (norms kept in fp32 beside bf16
        activations, as apex's mixed fused norm takes them): the outputs and gradients
        within twice the contract tolerance of the same-dtype call's, or a raise (a
        kernel may refuse mixed dtypes, loudly). A kernel that reads the weight's memory
        as the activations' type reinterprets its bits, in its forward or its backward."""
        ctx = self.ctx
        if ctx.case.dtype == "fp32":
            return
        head, lead = self._head(trial)
        names = [k for k in self._shared_floats(head) if head[k].dtype != torch.float32]
        if not names:
            return
        wide = {k: v.float() if k in names else v for k, v in head.items()}
        label = f"fp32 {', '.join(names)} in a {ctx.case.dtype} case"
        pairs = self._unless_refused(
            label, lambda: self._value_pairs(trial, ctx.to_device(wide), ctx.to_device(head), lead)
        )
        if pairs is None:
            return
        before = len(self.problems)
        for what, tol, g, w in pairs:
            whose = f"the all-{ctx.case.dtype} call's"
            self._close(f"{label}: {what}", whose, tol, g, w, scale=2.0)
        self._gradients_against_gold(label, trial, wide, lead, list(ctx.op.grad_inputs))
        if len(self.problems) == before:
            self.passed.append(label)

    def _narrow_shared_inputs(self, trial: Trial) -> None:
        """In an fp32 case, the shared float inputs rounded to bf16 (16-bit norm weights
        beside an fp32 residual stream): each output in the dtype the spec gives it and
        within the contract tolerance of the gold of the rounded inputs, or a raise. A
        kernel that returns ``y.type_as(weight)`` rounds an fp32 output to 8 bits."""
        if self.ctx.case.dtype != "fp32":
            return
        head, _ = self._head(trial)
        names = self._shared_floats(head)
        if names:
            self._narrowed(trial, names, f"bf16 {', '.join(names)} in an fp32 case", True)

    def _narrow_row_inputs(self, trial: Trial) -> None:
        """In an fp32 case of an op with two row-wise float inputs or more (a policy's and
        a reference model's logits, swiglu's gate and up), each in turn rounded to bf16,
        the others fp32 (a trainer that upcasts its policy logits beside a bf16 reference
        model): each output within the contract tolerance of its own dtype of the gold of
        those inputs, or a raise. A kernel that computes in one input's dtype
        (``policy.to(ref.dtype)``) rounds the other's fp32 values to 8 bits."""
        ctx, op = self.ctx, self.ctx.op
        if ctx.case.dtype != "fp32":
            return
        head, _ = self._head(trial)
        rows = [k for k in ctx.case_dtype_inputs(head) if op.is_row_wise(op.input(k))]
        for name in rows if len(rows) > 1 else []:
            others = ", ".join(k for k in rows if k != name)
            self._narrowed(trial, [name], f"bf16 {name} beside fp32 {others}", False)

    def _integer_masks(self, trial: Trial) -> None:
        """Each mask input as int64 0/1 (what HF tokenizers and verl's response masks are):
        the outputs and gradients within the contract tolerance of the bool mask's calls,
        or a raise. ``x[~mask] = 0`` is right for a bool mask, but ``~`` of an int64 0/1
        is -1/-2, which indexes the last two rows instead of the masked positions."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        for name in (s.name for s in op.inputs if s.values == "mask" and s.name in head):
            label = f"{name} as int64 0/1"
            probe = {k: v.long() if k == name else v for k, v in head.items()}
            pairs = self._unless_refused(
                label,
                lambda probe=probe: self._value_pairs(
                    trial, ctx.to_device(probe), ctx.to_device(head), lead
                ),
            )
            before = len(self.problems)
            for what, tol, g, w in pairs or []:
                self._close(f"{label}: {what}", "the bool mask's", tol, g, w)
            if pairs is not None and len(self.problems) == before:
                self.passed.append(label)

    def _narrowed(self, trial: Trial, names: list[str], label: str, own_dtype: bool) -> None:
        """``names`` rounded to bf16: the outputs (each in the dtype the spec gives it,
        where ``own_dtype``) and gradients within the contract tolerance of the gold of
        the rounded inputs, or a raise."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        narrow = {k: v.bfloat16() if k in names else v for k, v in head.items()}
        outs = self._unless_refused(label, lambda: ctx.call(ctx.to_device(narrow)))
        if outs is None:
            return
        before = len(self.problems)
        for i, (o, g, w) in enumerate(
            zip(op.outputs, outs, gold.forward(op, ctx.gold_fn, narrow, lead))
        ):
            want_dtype = ctx.expected_dtype(i)
            if own_dtype and g.dtype != want_dtype:
                self.problems.append(f"{label}: output {o.name!r} dtype {g.dtype} != {want_dtype}")
                continue
            short = dtypes.short_name(g.dtype)
            tol = op.tolerance("forward_accuracy", short, o.name) if not own_dtype else None
            tol = tol or ctx.tolerance("forward_accuracy", o.name)
            self._close(f"{label}: output {o.name!r}", "the gold's", tol, g, w)
        # outputs in bf16 (the candidate's choice for mixed inputs) take a bf16 upstream:
        # the gradients are judged at bf16's tolerance then
        narrowed = any(g.dtype == torch.bfloat16 for g in outs) and not own_dtype
        at = "bf16" if narrowed else None
        self._gradients_against_gold(label, trial, narrow, lead, list(op.grad_inputs), at)
        if len(self.problems) == before:
            self.passed.append(label)

    def _under_autocast(self, trial: Trial) -> None:
        """The forward under ``torch.autocast`` at bf16 and at fp16 (a model's
        mixed-precision forward, where a fused loss is called), its backward outside it
        (``loss.backward()``), on the drawn rows and on them times ``scale_up``: the
        outputs and gradients within twice the contract tolerance of the same calls'
        without autocast. An op whose matmul autocast lowers (a ``torch.matmul`` in
        linear_logp's forward, without ``custom_fwd``) rounds its fp32 logits to 8 bits;
        a kernel that squares in the autocast dtype when its input already has it
        overflows fp16 past 256 (the scaled rows reach it)."""
        ctx = self.ctx
        kind = ctx.device.type
        if not torch.amp.is_autocast_available(kind):
            self.passed.append(f"no autocast on {kind}: not probed")
            return
        head, lead = self._head(trial)
        factor = float(self.params["scale_up"])
        names = self._drawn_float_rows(head) if factor > 1.0 else []
        big = {k: times_scale_up(v, factor) if k in names else v for k, v in head.items()}
        rows = [("", head)] + ([(f", {', '.join(names)} x{factor:g}", big)] if names else [])
        for amp in (torch.bfloat16, torch.float16):
            for scaled, inputs in rows:
                label = f"under torch.autocast({kind!r}, {str(amp).removeprefix('torch.')}){scaled}"
                pairs = self._value_pairs(
                    trial,
                    ctx.to_device(inputs),
                    ctx.to_device(inputs),
                    lead,
                    around=lambda amp=amp: torch.autocast(kind, dtype=amp),
                )
                before = len(self.problems)
                for what, tol, g, w in pairs:
                    self._close(f"{label}: {what}", "the call's without", tol, g, w, scale=2.0)
                if len(self.problems) == before:
                    self.passed.append(label)

    def _gradients_against_gold(
        self, label: str, trial: Trial, inputs: dict, lead, names: list[str], at=None
    ) -> None:
        """A backward on ``inputs`` of mixed dtypes: the gradients of ``names`` each within
        the contract tolerance of its own input's dtype of the float64 gold gradient of
        those very inputs, or a raise. A backward that computes in the weight's dtype
        (a dispatch on ``weight.dtype``, one GEMM dtype for both operands) rounds an
        fp32 gradient to 8 bits; one that reduces a weight's gradient in the activations'
        dtype rounds an fp32 weight's. ``at``: a dtype whose tolerance every gradient
        is judged at instead."""
        ctx = self.ctx
        if not ctx.grad:
            return
        upstream = ctx.upstream(trial.seed, lead)
        what = f"{label} (with grad)"
        got = self._unless_refused(
            what, lambda: ctx.call_backward(ctx.to_device(inputs), upstream)[1]
        )
        if got is None:
            return
        want = self._gold_gradients(inputs, [u.cpu() for u in upstream], lead)
        for name in (n for n in names if n in want):
            short = at or dtypes.short_name(inputs[name].dtype)
            tol = ctx.op.tolerance("backward_accuracy", short, name)
            g = got[name].reshape(-1)
            self._close(f"{what}: gradient {name!r} ({short})", "the gold's", tol, g, want[name])

    def _unless_refused(self, label: str, call):
        """``call()``'s result, or None where the candidate refused the call loudly (a raise,
        neither out of memory nor a wrong output), noted as passed: mixed dtypes may be
        refused, never misread."""
        try:
            return call()
        except WrongOutput:
            raise
        except CandidateFault as exc:
            if exc.out_of_memory:
                raise
            self.passed.append(f"{label} refused: {exc}")
            return None

    def _value_pairs(
        self, trial: Trial, probe: dict, plain: dict, lead, around=contextlib.nullcontext
    ) -> list[tuple]:
        """(what, tolerance, got, want) of each output (without and with grad) and gradient
        of the calls on ``probe`` against those on ``plain``; ``around()`` is entered
        around the probe's forwards alone, its backward outside (``loss.backward()``
        after an autocast forward). A raise in ``probe``'s calls propagates."""
        ctx, op = self.ctx, self.ctx.op
        with around():
            got = ctx.call(probe)
        pairs = [
            (f"output {o.name!r}", ctx.tolerance("forward_accuracy", o.name), g, w)
            for o, g, w in zip(op.outputs, got, ctx.call(plain))
        ]
        if ctx.grad:
            upstream = ctx.upstream(trial.seed, lead)
            with around():
                args, outs = ctx.forward_with_grad(probe, upstream)
            grads = ctx.backward_of(args, outs, upstream)
            plain_outs, want = ctx.call_backward(plain, upstream)
            pairs += [
                (f"output {o.name!r} (with grad)", ctx.tolerance("forward_accuracy", o.name), g, w)
                for o, g, w in zip(op.outputs, outs, plain_outs)
            ]
            pairs += [
                (f"gradient {n!r}", ctx.tolerance("backward_accuracy", n), grads[n], want[n])
                for n in want
            ]
        return pairs

    def _scaled_up(self, trial: Trial) -> None:
        """The drawn row-wise float inputs (the case's distribution and what is related to
        it) times ``scale_up``, where that stays finite: wherever the float64 gold of these
        inputs (an output, a gradient) is finite and within half its dtype's range, the
        candidate's must be finite. A softmax without its max subtraction (a fused
        lm_head's, whose computed logits never leave +-10 at the grid's scales; a
        backward's recomputed one) gives inf or NaN there. Judged for finiteness only:
        at these magnitudes an honest fp32 kernel errs past the contract tolerance. An op
        whose own math overflows there (ratio_kl's exp(d)) sets ``scale_up = 0``."""
        ctx, op, factor = self.ctx, self.ctx.op, float(self.params["scale_up"])
        if factor <= 1.0:
            return
        head, lead = self._head(trial)
        names = self._drawn_float_rows(head)
        if not names:
            return
        big = {k: times_scale_up(v, factor) if k in names else v for k, v in head.items()}
        label = f"{', '.join(names)} x{factor:g}"
        pairs = [
            (f"output {o.name!r}", got, want)
            for o, got, want in zip(
                op.outputs, ctx.call(ctx.to_device(big)), gold.forward(op, ctx.gold_fn, big, lead)
            )
        ]
        if ctx.grad:
            upstream = ctx.upstream(trial.seed, lead)
            _, got = ctx.call_backward(ctx.to_device(big), upstream)
            want = self._gold_gradients(big, [u.cpu() for u in upstream], lead)
            pairs += [(f"gradient {n!r}", got[n], want[n]) for n in want]
        before = len(self.problems)
        for what, got, want in pairs:
            self._finite_where_gold_is(f"{label}: {what}", got, want)
        if len(self.problems) == before:
            self.passed.append(f"{label}: finite where the gold is")

    def _drawn_float_rows(self, head: dict) -> list[str]:
        """The row-wise float inputs drawn from the case's distribution or related to it
        (logits, hidden states; not ids, masks, weights or old logps)."""
        op = self.ctx.op
        return [
            s.name
            for s in op.inputs
            if op.is_row_wise(s)
            and s.values in ("case", "related")
            and head[s.name].is_floating_point()
        ]

    def _nan_inputs(self, trial: Trial) -> None:
        """One NaN in every other row of each drawn row-wise float input (a diverging
        model's logits; an fp16 overflow before the kernel), rows that no out-of-range or
        mask rule fixes: wherever the float64 gold of these inputs (an output, a gradient)
        is NaN, the candidate's must not be finite, and the rows without a NaN must stay
        within the contract tolerance of the gold. A max taken with fmax (which drops a
        NaN) and a sum that skips entries not above -inf read a NaN as a masked entry: a
        finite entropy, and the trainer never sees its NaN."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        names = self._drawn_float_rows(head)
        owned = ctx.fixed_rows(head, len(lead))  # rows a rule fixes: their rule's value
        planted = process_inputs.every_other(~owned)
        if not names or not bool(planted.any()):
            return
        nan = process_inputs.with_nans(head, names, planted)
        triples = [
            (f"output {o.name!r}", o, got, want)
            for o, got, want in zip(
                op.outputs, ctx.call(ctx.to_device(nan)), gold.forward(op, ctx.gold_fn, nan, lead)
            )
        ]
        if ctx.grad:  # no zero upstream rows: a loss-masked row's gradient may skip its NaN
            upstream = [u.masked_fill(u == 0, 1.0) for u in ctx.upstream(trial.seed, lead)]
            _, got = ctx.call_backward(ctx.to_device(nan), upstream)
            want = self._gold_gradients(nan, [u.cpu() for u in upstream], lead)
            triples += [(f"gradient {n!r}", op.input(n), got[n], want[n]) for n in want]
        label = f"a NaN in every other row of {', '.join(names)}"
        before = len(self.problems)
        for what, spec, got, want in triples:
            self._judge_nan_rows(f"{label}: {what}", spec, got, want, planted | owned)
        if len(self.problems) == before:
            self.passed.append(f"{label}: NaN where the gold is, the other rows within it")

    def _judge_nan_rows(self, what: str, spec, got, want, unjudged) -> None:
        """:meth:`_nan_inputs`' rules on one output or gradient: NaN where the gold is, the
        rows not ``unjudged`` (with a NaN, or fixed by a rule) within the contract
        tolerance (the elements left out count as exact, so an index is the tensor's)."""
        g, w = got.detach().cpu(), want.detach().cpu().double()
        if g.numel() != w.numel():
            return  # the shape probes report those
        w = w.reshape(g.shape)
        hidden = process_inputs.hidden_nans(g, w)
        if hidden is not None:
            self.problems.append(f"{what}: {hidden}")
        self._close_to_gold(f"{what} (rows without a NaN)", spec, g, w, unjudged)

    def _close_to_gold(self, what: str, spec, got, want, unjudged) -> None:
        """``got`` within the contract tolerance of its gold ``want`` (shaped alike) at
        its finite elements, but in the rows ``unjudged`` of a row-wise one (the elements
        left out count as exact, so an index named is the tensor's)."""
        judgment = "backward_accuracy" if spec in self.ctx.op.inputs else "forward_accuracy"
        tol = self.ctx.tolerance(judgment, spec.name)
        clean = torch.isfinite(want)
        if self.ctx.op.is_row_wise(spec) and got.dim() and got.shape[0] == unjudged.shape[0]:
            clean &= ~process_inputs.row_elements(want, unjudged)
        zero = torch.zeros((), dtype=torch.float64)
        g, w = torch.where(clean, got.double(), zero), torch.where(clean, want, zero)
        self._close(what, "the gold's", tol, g, w)

    def _under_default_dtype(self, trial: Trial) -> None:
        """The calls (forward; forward and backward) in a process whose default dtype is
        bf16 (DeepSeek-V3's inference script sets it globally), on one row fewer than the
        other probes' (no kernel they left cached): outputs and gradients of the dtypes
        the contract names and within its tolerance of the gold, or a loud refusal. A
        kernel that makes its accumulator with ``torch.zeros(rows)`` takes the process's
        default dtype: its fp32 sum of squares runs in bf16."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        if lead[0] > 1:
            lead = (lead[0] - 1,)
            head = {k: v[: lead[0]] if op.is_row_wise(op.input(k)) else v for k, v in head.items()}
        upstream = ctx.upstream(trial.seed, lead) if ctx.grad else []

        def calls() -> list[tuple[str, str, torch.Tensor]]:
            outs = ctx.call(ctx.to_device(head))
            found = [(f"output {o.name!r}", o.name, c) for o, c in zip(op.outputs, outs)]
            if ctx.grad:
                outs, grads = ctx.call_backward(ctx.to_device(head), upstream)
                found += [
                    (f"output {o.name!r} (with grad)", o.name, c) for o, c in zip(op.outputs, outs)
                ]
                found += [(f"gradient {n!r}", n, grads[n]) for n in op.grad_inputs]
            return found

        label = "under torch.set_default_dtype(torch.bfloat16)"
        with process_inputs.default_dtype(torch.bfloat16):
            got = self._unless_refused(label, calls)
        if got is None:
            return
        want = dict(zip((o.name for o in op.outputs), gold.forward(op, ctx.gold_fn, head, lead)))
        if ctx.grad:
            want.update(self._gold_gradients(head, [u.cpu() for u in upstream], lead))
        specs = {o.name: (o, ctx.expected_dtype(i)) for i, o in enumerate(op.outputs)}
        specs.update({n: (op.input(n), head[n].dtype) for n in op.grad_inputs})
        owned = ctx.fixed_rows(head, len(lead))  # rows a rule fixes: its own probes judge them
        before = len(self.problems)
        for what, name, g in got:
            spec, dtype = specs[name]
            if g.dtype != dtype or g.numel() != want[name].numel():
                found = f"dtype {g.dtype}, {g.numel()} elements"
                expected = f"{dtype}, {want[name].numel()}"
                self.problems.append(f"{label}: {what}: {found}, expected {expected}")
                continue
            w = want[name].detach().cpu().double().reshape(g.shape)
            self._close_to_gold(f"{label}: {what}", spec, g.detach().cpu(), w, owned)
        if len(self.problems) == before:
            self.passed.append(label)

    def _loss_scaled(self, trial: Trial) -> None:
        """A backward handed the upstream gradient times ``loss_scale`` (2^12: a
        GradScaler's scale where fp16 training settles, the upstream still finite in
        fp16), the inputs as drawn: wherever the float64 gold gradient is finite and within
        half its dtype's range, the candidate's must be finite. A backward that multiplies
        two 16-bit operands in 16 bits before going to fp32 (``dy * up`` as a half2
        product) overflows there while the gradient it computes fits; at the drawn upstream
        of std 1 it is only a rounding off. Divided by the factor again, it must be within
        the contract tolerance of the gold gradient divided alike, wherever that is within
        half the dtype's range: a backward that saturates such a product to the 16-bit
        range instead (finite, and wrong by up to 90%) fails there."""
        ctx, factor = self.ctx, float(self.params["loss_scale"])
        if factor <= 1.0 or not ctx.grad:
            return
        head, lead = self._head(trial)
        upstream = [u * factor for u in ctx.upstream(trial.seed, lead)]
        if not all(bool(torch.isfinite(u).all()) for u in upstream):
            return  # past the upstream's own dtype: no training step hands that over
        _, got = ctx.call_backward(ctx.to_device(head), upstream)
        want = self._gold_gradients(head, [u.cpu() for u in upstream], lead)
        label = f"the upstream gradient x{factor:g} (a loss scale)"
        before = len(self.problems)
        for n in want:
            self._finite_where_gold_is(f"{label}: gradient {n!r}", got[n], want[n])
        if len(self.problems) == before:
            self.passed.append(f"{label}: finite where the gold is")
        self._scaled_upstream(trial, factor, label)

    def _scaled_down(self, trial: Trial) -> None:
        """A backward handed the upstream gradient times ``token_mean_scale`` (2^-30: a
        loss averaged over 2^20 tokens with a coefficient of 1e-3), judged as
        :meth:`_scaled_upstream`. A backward that skips a row whose upstream is below some
        eps (a loss-masked row's test written ``fabsf(g) < 1e-6f``) zeroes every row of
        such a step; at the drawn upstream of std 1 it is exact."""
        factor = float(self.params["token_mean_scale"])
        if 0.0 < factor < 1.0 and self.ctx.grad:
            self._scaled_upstream(
                trial, factor, f"the upstream gradient x{factor:g} (a token mean)"
            )

    def _scaled_upstream(self, trial: Trial, factor: float, label: str) -> None:
        """A backward of the in-range rows (the out-of-range rule owns the others'
        gradient) handed the upstream gradient times ``factor``, the inputs as drawn: its
        gradient divided by ``factor`` must be within the contract tolerance of the gold
        gradient of the drawn upstream, wherever the gold's scaled value is a normal number
        of the gradient's dtype within half its range (past it an honest rounding may
        overflow). Not where the upstream's own dtype cannot hold the scaled values exactly
        (an fp16 output's: they underflow or overflow)."""
        ctx = self.ctx
        head, lead = self._in_range_rows(*self._head(trial))
        if not lead[0]:
            return
        drawn = ctx.upstream(trial.seed, lead)
        scaled = [u * factor for u in drawn]
        if any(not torch.equal(s / factor, u) for s, u in zip(scaled, drawn)):
            return  # the upstream's dtype cannot hold it: no training step hands it over
        _, got = ctx.call_backward(ctx.to_device(head), scaled)
        want = self._gold_gradients(head, [u.cpu() for u in drawn], lead)
        before, judged = len(self.problems), 0
        for n in want:
            g = got[n].detach().cpu().reshape(-1)
            if g.shape != want[n].shape or not g.is_floating_point():
                continue  # the shape and dtype probes report those
            info, size = torch.finfo(g.dtype), want[n].abs() * factor
            held = (size >= info.tiny) & (size <= info.max / 2)
            unscaled = torch.where(held, g.double() / factor, want[n])
            tol = ctx.tolerance("backward_accuracy", n)
            what = f"{label}: gradient {n!r} / the factor"
            self._close(what, "the gold's", tol, unscaled, want[n])
            judged += int(held.sum())
        if judged and len(self.problems) == before:
            self.passed.append(f"{label}: the gradient scaled alike")

    def _in_range_rows(self, head: dict, lead: tuple[int, ...]) -> tuple[dict, tuple[int]]:
        """``head``'s rows whose index input is in range (the out-of-range rule owns the
        gradient of the others, which its spec may leave unjudged)."""
        op = self.ctx.op
        out = self.ctx.out_of_range_rows(head, len(lead))
        if out is None:
            return head, lead
        keep = ~out
        rows = {k: v[keep] if op.is_row_wise(op.input(k)) else v for k, v in head.items()}
        return rows, (int(keep.sum()),)

    def _other_dtypes(self, trial: Trial) -> None:
        """The same rows in each other dtype of the grid, one call after another in this
        process, then in the case's dtype again: each within its dtype's contract
        tolerance of the gold of its inputs, and the last call with the first call's
        bits. A kernel cache keyed without the dtype (a build for one element type
        reading another's memory) serves the wrong build; each case runs in a process of
        its own, which would never see a second dtype otherwise."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        cased, others = ctx.case_dtype_inputs(head), ctx.other_dtypes
        if not cased or not others:
            return

        def calls_in_other_dtypes() -> list[str]:
            for d in others:
                inputs = ctx.in_dtype(head, d)
                if any(_overflows(head[k], inputs[k]) for k in cased):
                    continue  # a value past the dtype's range: another input, not this probe's
                outs = ctx.call(ctx.to_device(inputs))
                want = gold.forward(op, ctx.gold_fn, inputs, lead)
                for o, g, w in zip(op.outputs, outs, want):
                    own = op.tolerance("forward_accuracy", d, o.name)
                    tol = _wider(own, ctx.tolerance("forward_accuracy", o.name))
                    what = f"{d} inputs after a {ctx.case.dtype} call: output {o.name!r}"
                    self._close(what, "the gold's", tol, g, w)
            return others

        self._same_bits_around(head, ctx.case.dtype, calls_in_other_dtypes)

    def _other_attributes(self, trial: Trial) -> None:
        """The same rows at each other value of each attribute the candidate takes (the
        grid's and the sweep's: temperature, eps), one call after another in this
        process, then at the case's values again: each within the contract tolerance of
        the gold at its values, and the last with the first call's bits. A kernel cache
        keyed without an attribute (eps compiled in as a constant, a temperature baked
        into a build) serves the first value's build to every later call; each case runs
        in a process of its own, which would never see a second value otherwise."""
        ctx = self.ctx
        if ctx.rebound is None or not ctx.other_attribute_values:
            return
        head, lead = self._head(trial)
        at = ", ".join(f"{k}={ctx.case.attributes[k]}" for k in ctx.other_attribute_values)

        def calls_at_other_values() -> list[str]:
            tried = []
            for name, values in ctx.other_attribute_values.items():
                for value in values:
                    other = ctx.at_attributes({name: value})
                    outs = other.call(ctx.to_device(head))
                    what = f"{name}={value} after a call at {at}: output"
                    self._judge_outputs(what, outs, head, lead, other.gold_fn, "the gold's")
                    self._in_flight_at_other_value(trial, other, f"{name}={value}", at)
                    tried.append(f"{name}={value}")
            return tried

        self._same_bits_around(head, at, calls_at_other_values)

    def _in_flight_at_other_value(self, trial: Trial, other: CaseContext, label, at) -> None:
        """A call at the case's values and one at ``label`` in flight (forwards in that
        order, then backwards in that order): the first call's gradient keeps the bits
        it gets alone, the second's is within the contract tolerance of the gold at its
        values. A backward that reads the attribute from state the latest forward set
        (an RL term at T = 1 and a distillation term at T = 2 in one loss), or from a
        backward kernel built at the process's first backward, takes the wrong one."""
        ctx = self.ctx
        if not ctx.grad:
            return
        head, lead = self._head(trial)
        ups = ctx.upstream(trial.seed, lead)
        alone = ctx.call_backward(ctx.to_device(head), ups)[1]
        first = ctx.forward_with_grad(ctx.to_device(head), ups)
        second = other.forward_with_grad(ctx.to_device(head), ups)
        got = ctx.backward_of(*first, ups)
        theirs = other.backward_of(*second, ups)
        flight = f"a call at {at} in flight with one at {label} (forwards, then backwards)"
        problem = f"{flight}: the first's gradient {{}} differs from the one it gets alone"
        self._same_gradients(problem, got, alone)
        want = self._gold_gradients(head, [u.cpu() for u in ups], lead, other)
        for name, g in want.items():
            tol = ctx.tolerance("backward_accuracy", name)
            what = f"{flight}: the second's gradient {name!r}"
            self._close(what, "the gold's at its values", tol, theirs[name].reshape(-1), g)

    def _other_switches(self, trial: Trial) -> None:
        """The same rows with each switch attribute the candidate takes at its other value
        (a mask drawn and passed where the case has none, left out where it has one),
        between two calls at the case's setting: within the contract tolerance of the
        gold, and the last call with the first call's bits. A kernel cache keyed without
        the switch (a mask compiled in or out as a constant) serves the first call's build
        to the other: a rollout's calls without a mask, then the trainer's with one."""
        ctx = self.ctx
        if not ctx.switched_ops:
            return
        head, lead = self._head(trial)
        switched = {n: f"{n}={str(v).lower()}" for n, (v, _) in ctx.switched_ops.items()}
        at = ", ".join(f"{n}={str(not v).lower()}" for n, (v, _) in ctx.switched_ops.items())

        def calls_switched() -> list[str]:
            for name, (_, other) in ctx.switched_ops.items():
                at_other = replace(ctx, op=other)  # the switched input drawn as a case draws it
                drawn = at_other.draw(trial.seed, trial.distribution, lead=lead)
                inputs = {i.name: head.get(i.name, drawn[i.name]) for i in other.inputs}
                outs = ctx.call(ctx.to_device(inputs))
                want = gold.forward(other, ctx.gold_fn, inputs, lead)
                for o, g, w in zip(other.outputs, outs, want):
                    what = f"{switched[name]} after a call at {at}: output {o.name!r}"
                    tol = ctx.tolerance("forward_accuracy", o.name)
                    self._close(what, "the gold's", tol, g, w)
            return list(switched.values())

        self._same_bits_around(head, at, calls_switched)

    def _same_bits_around(self, head: dict, at: str, others: Callable[[], list[str]]) -> None:
        """Call on ``head`` at the case's settings (``at``), make the other calls
        (``others``, which judges them and names them), then call again: the last call
        must give the first call's bits, as a cache keyed right gives them."""
        ctx = self.ctx
        first = ctx.call(ctx.to_device(head))
        before = len(self.problems)
        tried = ", ".join(others())
        for o, a, b in zip(ctx.op.outputs, first, ctx.call(ctx.to_device(head))):
            if not bool((bits(a.cpu()) == bits(b.cpu())).all()):
                self.problems.append(
                    f"output {o.name!r} at {at} after calls at {tried} differs from the same "
                    "call's before them: " + first_bit_difference(b.cpu(), a.cpu())
                )
        if len(self.problems) == before:
            self.passed.append(f"calls at {tried} between two at {at}")

    def _gold_gradients(
        self, inputs: dict, upstream: list, lead, at: CaseContext | None = None
    ) -> dict[str, torch.Tensor]:
        """The float64 gold gradient of each grad input, whole (rows flattened), of the
        case's gold (``at``: another context's, at other attribute values)."""
        ctx = at or self.ctx
        chunks = gold.backward_chunks(
            ctx.op, ctx.gold_fn, inputs, upstream, lead, ctx.gold_backward_fn
        )
        return {name: g.reshape(-1) for name, g in gold.gathered(chunks).items()}

    def _finite_where_gold_is(self, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
        """A problem where ``got`` is NaN or Inf at an element whose gold is finite and
        within half of ``got``'s dtype's range (past it, an honest rounding may overflow)."""
        g, w = got.detach().cpu().reshape(-1), want.detach().cpu().double().reshape(-1)
        if g.shape != w.shape or not g.is_floating_point():
            return  # the shape and dtype probes report those
        judged = torch.isfinite(w) & (w.abs() <= torch.finfo(g.dtype).max / 2)
        bad = judged & ~torch.isfinite(g)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            self.problems.append(
                f"{what}: {int(bad.sum())} of {int(judged.sum())} elements NaN/Inf where the "
                f"float64 gold is finite; first at flat index {i}: {g[i].item()!r} vs "
                f"{w[i].item()!r}"
            )

    def _same_gradient_bits(
        self, label: str, upstream: list[torch.Tensor], views: dict, contiguous: dict
    ) -> None:
        """A backward on ``views`` gives the gradient bits of one on their copies."""
        if not self.ctx.grad:
            return
        _, got = self.ctx.call_backward(views, upstream)
        _, want = self.ctx.call_backward(contiguous, upstream)
        problem = f"{label}: gradient {{}} differs from the contiguous copy's"
        self._same_gradients(problem, got, want)

    def _same_gradients(self, problem: str, got: dict, want: dict, zeros_signed=True) -> None:
        """A problem (``problem`` formatted with the name) per gradient whose bits differ
        (``zeros_signed=False``: +0.0 and -0.0 count as one value)."""
        for name in want:
            g, w = got[name].detach().cpu(), want[name].detach().cpu()
            if not zeros_signed and g.shape == w.shape:
                g = torch.where((g == 0) & (w == 0), w, g)  # x + 0 * y is -0 for x = -0
                g = torch.where(torch.isfinite(w), g, w)  # 0 * inf is NaN: the zeros' doing
            if g.shape != w.shape or not bool((bits(g) == bits(w)).all()):
                detail = "shape differs" if g.shape != w.shape else first_bit_difference(g, w)
                self.problems.append(f"{problem.format(repr(name))}: {detail}")

    def _strided_upstream(self, trial: Trial) -> None:
        """Backward with each upstream gradient expanded from one value (``out.sum()``:
        stride 0), as every other element of a longer tensor whose other elements are
        NaN, and (2+ dims) broadcast over one dim only: the gradients must have the bits
        of the same call with contiguous copies; (2+ dims) dense with two dims swapped in
        memory, values close. A kernel that reads the upstream as contiguous memory (or
        as flat memory once it is dense), or addresses it by one stride
        (``row * stride(-1)``, right for the first two), reads past it, the NaNs or the
        wrong values."""
        if not self.ctx.grad:
            return
        head, lead = self._head(trial)
        before = len(self.problems)
        ups = [u.to(self.ctx.device) for u in self.ctx.upstream(trial.seed, lead)]
        expanded = [u.reshape(-1)[:1].reshape((1,) * u.dim()).expand_as(u) for u in ups]
        strided = [torch.stack([u, torch.full_like(u, math.nan)], dim=-1)[..., 0] for u in ups]
        layouts = [("expanded upstream", head, expanded), ("strided upstream", head, strided)]
        layouts += self._broadcast_upstreams(trial, head, lead[0])
        for label, inputs, views in layouts:
            _, got = self.ctx.call_backward(self.ctx.to_device(inputs), views)
            copies = [v.contiguous() for v in views]
            _, want = self.ctx.call_backward(self.ctx.to_device(inputs), copies)
            problem = f"{label}: gradient {{}} differs from the one a contiguous upstream gives"
            self._same_gradients(problem, got, want)
        self._swapped_upstream(trial, head, lead)
        if len(self.problems) == before:
            self.passed.append("non-contiguous upstream == contiguous")

    def _swapped_upstream(self, trial: Trial, head: dict, lead: tuple[int, ...]) -> None:
        """Each upstream dense with its first two dims swapped in memory (a one-dim lead
        taken as two sequences first), what autograd hands back through a transpose to
        sequence-first ([s, b, h], Megatron's layout) after the op: gradients within
        twice the contract tolerance of the contiguous upstream's (values, not bits: an
        honest reduction over a row may follow the upstream's layout). A kernel that
        reads a dense upstream as flat memory (``data_ptr()`` once it is dense) mixes
        its rows."""
        if len(lead) < 2:
            if lead[0] < 4:
                return
            head, lead = self._as_two_sequences(head, lead[0] - lead[0] % 2)
        ups = [u.to(self.ctx.device) for u in self.ctx.upstream(trial.seed, lead)]
        swapped = [u.transpose(0, 1).contiguous().transpose(0, 1) for u in ups]
        _, got = self.ctx.call_backward(self.ctx.to_device(head), swapped)
        _, want = self.ctx.call_backward(self.ctx.to_device(head), ups)
        for n in want:
            tol = self.ctx.tolerance("backward_accuracy", n)
            what = f"upstream dense with its first two dims swapped in memory: gradient {n!r}"
            self._close(what, "the contiguous upstream's", tol, got[n], want[n], scale=2.0)

    def _unused_outputs(self, trial: Trial) -> None:
        """With several outputs, a loss that uses one alone (a KL-free PPO loss never
        touches ratio_kl's kl): the backward gets None for the others and must give the
        bits it gives with their upstream 0. A fused backward that assumes every output's
        gradient raises or misreads there. Signed zeros aside (``g * a + 0 * b`` is a
        zero of either sign where ``g * a`` is 0), and where the zeros give NaN (0 * inf);
        a grad input the used output does not reach gets a zero gradient, as with zeros."""
        outputs = self.ctx.op.outputs
        if not self.ctx.grad or len(outputs) < 2:
            return
        head, lead = self._head(trial)
        ups = self.ctx.upstream(trial.seed, lead)
        before = len(self.problems)
        for k, out in enumerate(outputs):
            alone = [u if i == k else None for i, u in enumerate(ups)]
            zeros = [u if i == k else torch.zeros_like(u) for i, u in enumerate(ups)]
            _, got = self.ctx.call_backward(self.ctx.to_device(head), alone, missing_ok=True)
            _, want = self.ctx.call_backward(self.ctx.to_device(head), zeros)
            problem = (
                f"only {out.name!r} used (the other outputs' upstream None): gradient {{}} "
                "differs from the one their upstream 0 gives"
            )
            self._same_gradients(problem, got, want, zeros_signed=False)
        if len(self.problems) == before:
            self.passed.append("one output used alone == the others' upstream 0")

    def _edited_outputs(self, trial: Trial) -> None:
        """Every output edited in place (``+= 1``, which leaves every gradient as it was)
        between forward and backward, as ``logp.mul_(mask)`` does: the gradients must keep
        their bits, or torch must refuse (autograd's version counter, or its ban on editing
        a custom Function's view output). A backward that kept the output outside
        ``save_for_backward`` (``ctx.h = h``) silently reads the edited values."""
        if not self.ctx.grad:
            return
        head, lead = self._head(trial)
        ups = self.ctx.upstream(trial.seed, lead)
        refused: list[str] = []

        def add_one(outs: list[torch.Tensor]) -> None:
            for o in outs:
                try:
                    o.add_(1.0)
                except RuntimeError as exc:  # torch refuses loudly: nothing silent to judge
                    refused.append(str(exc))

        _, want = self.ctx.call_backward(self.ctx.to_device(head), ups)

        def edited() -> dict:
            return self.ctx.call_backward(self.ctx.to_device(head), ups, edit=add_one)[1]

        self._edit_verdict("an output", "(+1)", edited, want, "torch refuses" if refused else "")

    def _edit_verdict(self, kind: str, how: str, edited, want: dict, note: str = "") -> None:
        """``edited()``'s gradients (a backward after ``kind``s were edited in place
        ``how``) must keep ``want``'s bits, or torch must refuse the backward loudly."""
        try:
            got = edited()
        except CandidateFault as exc:
            if not any(why in str(exc) for why in INPLACE_REFUSALS):
                raise
            self.passed.append(f"{kind} edited in place: autograd refuses")
            return
        before = len(self.problems)
        problem = (
            f"{kind.split()[-1]}s edited in place {how} before backward: gradient {{}} differs "
            f"from the unedited one's (the backward reads {kind} outside save_for_backward)"
        )
        self._same_gradients(problem, got, want)
        if len(self.problems) == before:
            self.passed.append(f"{kind} edited in place: {note or 'same gradients'}")

    def _edited_inputs(self, trial: Trial) -> None:
        """Every float input doubled in place (exact) between forward and backward, as a
        caller's ``logits.div_(T)`` or ``masked_fill_`` before a later loss term edits
        it: the gradients must keep their bits, or torch must refuse (autograd's version
        counter on a saved tensor). A backward that kept an input outside
        ``save_for_backward`` (``ctx.logits = logits``) silently reads the edited values."""

        def double(args: dict) -> None:
            for v in args.values():
                if v.is_floating_point():
                    v.mul_(2.0)

        self._edited_before_backward(trial, double, "an input", "(x2)")

    def _edited_indices(self, trial: Trial) -> None:
        """Every index input moved to the next index (where one is left) and every mask
        negated, in place between forward and backward, as a caller refills its ids or
        mask buffer for the next micro-batch: the gradients must keep their bits, or torch
        must refuse. Apart from the float inputs' edit, which a saved float would refuse
        first: a backward that kept the ids or the mask on ``ctx`` (they need no
        gradient) reads the edited ones."""
        ctx = self.ctx
        edits = {s.name: s for s in ctx.op.inputs if s.values in ("index", "mask")}
        if not edits:
            return

        def refill(args: dict) -> None:
            for name, spec in edits.items():
                v = args[name]
                if v.dtype == torch.bool:
                    v.logical_not_()
                elif spec.values == "index":
                    n = eval_dim_expr(spec.index_of, ctx.sizes)
                    v.copy_(torch.where((v >= 0) & (v < n - 1), v + 1, v))

        what = "an index or mask input"
        self._edited_before_backward(trial, refill, what, "(ids + 1, masks negated)")

    def _edited_before_backward(self, trial: Trial, edit, kind: str, how: str) -> None:
        """``edit(args)`` (under no_grad) between the forward and the backward of a call:
        the gradients must keep the unedited call's bits, or torch must refuse."""
        if not self.ctx.grad:
            return
        ctx = self.ctx
        head, lead = self._head(trial)
        ups = ctx.upstream(trial.seed, lead)
        _, want = ctx.call_backward(ctx.to_device(head), ups)

        def edited() -> dict:
            args, outs = ctx.forward_with_grad(ctx.to_device(head), ups)
            with torch.no_grad():
                edit(args)
            return ctx.backward_of(args, outs, ups)

        self._edit_verdict(kind, how, edited, want)

    def _calls_in_flight(self, trial: Trial) -> None:
        """``IN_FLIGHT`` (9) calls of one shape in flight (nine forwards, then the backwards
        in the order 2, 4, 6, 8, 1, 3, 5, 7, 9: pipeline micro-batches, DPO's chosen and
        rejected summed into one loss, whose backward takes them in neither the forwards'
        order nor its reverse) and a second backward through the first call's graph
        (retain_graph: a second loss over the same outputs): every gradient keeps the
        bits of its call alone, and the gradient a caller holds stays as it was. A
        backward reading a per-shape workspace (or a ring of up to eight) that a later
        forward overwrote, a queue or a stack of saved statistics, or one that scales a
        gradient kept from the forward in place and returns it, shows; a second backward
        that raises is torch's loud refusal, not a finding."""
        if not self.ctx.grad:
            return
        ctx = self.ctx
        batches, upstreams = self._reordered(trial, IN_FLIGHT)
        want = [ctx.call_backward(ctx.to_device(b), u)[1] for b, u in zip(batches, upstreams)]
        flight = [ctx.forward_with_grad(ctx.to_device(b), u) for b, u in zip(batches, upstreams)]
        got = {}
        order = [*range(1, IN_FLIGHT, 2), *range(0, IN_FLIGHT, 2)]
        for i in order:
            got[i] = ctx.backward_of(*flight[i], upstreams[i], retain=i == 0)
        label = ", ".join(str(i + 1) for i in order)
        before = len(self.problems)
        for i in sorted(got):
            problem = (
                f"{IN_FLIGHT} calls in flight ({IN_FLIGHT} forwards, then backwards {label}): "
                f"call {i + 1}'s gradient {{}} differs from the one it gets alone (or the "
                "backward is not deterministic: see determinism)"
            )
            self._same_gradients(problem, got[i], want[i])
        if len(self.problems) > before:  # the rest compares with the same gradients
            return
        (args_a, outs_a), got_a, want_a = flight[0], got[0], want[0]
        try:
            again = ctx.backward_of(args_a, outs_a, upstreams[0])
        except CandidateFault as exc:
            if exc.out_of_memory:
                raise
        else:
            problem = "a second backward through one graph (retain_graph): gradient {} differs"
            self._same_gradients(problem + " from the first's", again, want_a)
        problem = (
            "the gradient {} a caller holds changed when a second backward ran through its graph"
        )
        self._same_gradients(problem, got_a, want_a)
        if len(self.problems) == before:
            self.passed.append(f"{IN_FLIGHT} calls in flight, a second backward == calls alone")

    def _many_calls_in_flight(self, trial: Trial) -> None:
        """``MANY_IN_FLIGHT`` (33) calls of ``MANY_IN_FLIGHT_ROWS`` rows each in flight
        (the forwards, then the backwards first in, first out: micro-batches accumulated
        into one loss, a deep pipeline's stages): every gradient keeps the bits of its
        call alone. A ring of 16 or 32 workspaces that a later forward overwrote, which
        :meth:`_calls_in_flight`' nine calls never wrap, gives an early call another's."""
        if not self.ctx.grad:
            return
        ctx = self.ctx
        head, lead = self._head(trial)
        rows = (min(MANY_IN_FLIGHT_ROWS, lead[0]),)
        fresh = [
            self._fresh_batch(trial, head, rows, f"call {j + 1} of many in flight")
            for j in range(MANY_IN_FLIGHT)
        ]
        batches, upstreams = [b for b, _ in fresh], [u for _, u in fresh]
        want = [ctx.call_backward(ctx.to_device(b), u)[1] for b, u in zip(batches, upstreams)]
        flight = [ctx.forward_with_grad(ctx.to_device(b), u) for b, u in zip(batches, upstreams)]
        label = (
            f"{MANY_IN_FLIGHT} calls of {rows[0]} rows in flight (backwards first in, first out)"
        )
        before = len(self.problems)
        for i, (call, ups) in enumerate(zip(flight, upstreams)):
            got = ctx.backward_of(*call, ups)
            problem = (
                f"{label}: call {i + 1}'s gradient {{}} differs from the one it gets alone (or "
                "the backward is not deterministic: see determinism)"
            )
            self._same_gradients(problem, got, want[i])
            if len(self.problems) > before:
                return  # the first call that differs says it; the rest would repeat it
        self.passed.append(f"{label} == calls alone")

    def _calls_in_flight_at_scale(self, trial: Trial) -> None:
        """Two calls of a big batch in flight (two forwards, then the second call's
        backward and the first's), in the big-batch cases of the grid's first dtype: the
        first call's gradient keeps the bits of its call alone. A kernel may keep a
        per-shape buffer (the softmax its backward reads, a workspace) only past a size
        that the calls in flight at the case's shape never reach (a fused loss caching
        from 2^24 logits on: DPO's chosen and rejected, micro-batches summed into one
        loss): 1.5 x 2^24 elements in the widest row-wise input (each such call costs
        seconds here)."""
        ctx, op = self.ctx, self.ctx.op
        if not ctx.grad or not ctx.is_big_batch_case() or not ctx.at_first_dtype():
            return
        elements = -(-int(self.params["in_flight_elements"]) // self.ctx.widest_row())
        rows = min(elements, int(self.params["in_flight_work"]) // ctx.row_work)
        if rows <= math.prod(ctx.lead):
            return
        salt = "in flight at scale"
        first = ctx.draw(trial.seed, trial.distribution, lead=(rows,), salt=salt)
        ups = ctx.upstream(trial.seed, (rows,), salt=salt)
        # the second call: each row's values in another row's place
        second = {k: v.roll(1, 0) if op.is_row_wise(op.input(k)) else v for k, v in first.items()}
        batches, upstreams = [first, second], [ups, [u.roll(1, 0) if u.dim() else u for u in ups]]
        # the first call's gradient alone: the one a buffer that the second forward
        # overwrote gives wrong (its backward runs last)
        want = ctx.call_backward(ctx.to_device(first), ups)[1]
        flight = [ctx.forward_with_grad(ctx.to_device(b), u) for b, u in zip(batches, upstreams)]
        ctx.backward_of(*flight[1], upstreams[1])
        got = ctx.backward_of(*flight[0], upstreams[0])
        before = len(self.problems)
        problem = (
            f"2 calls of {rows} rows in flight (2 forwards, then backwards 2, 1): call 1's "
            "gradient {} differs from the one it gets alone"
        )
        self._same_gradients(problem, got, want)
        if len(self.problems) == before:
            self.passed.append(f"2 calls of {rows} rows in flight == calls alone")

    def _reordered(self, trial: Trial, n: int) -> tuple[list[dict], list[list]]:
        """The trial's first rows and upstream gradients, then ``n - 1`` more batches of the
        very same shape: those rows reversed, rolled by one, by two, then fresh draws
        (other values in each row's place, so a gradient read from another call's state
        shows); the shared inputs (a weight) the trial's in every batch."""
        ctx, op = self.ctx, self.ctx.op
        head, lead = self._head(trial)
        ups = ctx.upstream(trial.seed, lead)
        orders = [lambda t: t, lambda t: t.flip(0), lambda t: t.roll(1, 0), lambda t: t.roll(2, 0)]
        batches = [
            {k: f(v) if op.is_row_wise(op.input(k)) else v for k, v in head.items()}
            for f in orders[:n]
        ]
        upstreams = [[f(u) if u.dim() else u for u in ups] for f in orders[:n]]
        for j in range(len(orders), n):
            batch, ups = self._fresh_batch(trial, head, lead, f"call {j + 1} in flight")
            batches.append(batch)
            upstreams.append(ups)
        return batches, upstreams

    def _fresh_batch(self, trial: Trial, head: dict, lead, salt: str) -> tuple[dict, list]:
        """A batch of ``lead`` rows drawn afresh (``salt``), the shared inputs ``head``'s
        (one tensor for every call, as a weight is), and its upstream gradients."""
        ctx, op = self.ctx, self.ctx.op
        drawn = ctx.draw(trial.seed, trial.distribution, lead=lead, salt=salt)
        batch = {k: drawn[k] if op.is_row_wise(op.input(k)) else v for k, v in head.items()}
        return batch, ctx.upstream(trial.seed, lead, salt=salt)

    def _accumulated_grads(self, trial: Trial) -> None:
        """Two micro-batches through ``loss.backward()``, each grad input a leaf, the
        shared ones (a norm's weight, an lm_head) one leaf for both, as a training loop
        accumulates: each ``.grad`` must have the bits of the gradients of the calls
        alone, added (a row-wise input's: its own call's). A kernel that also adds its
        weight gradient into ``weight.grad`` itself (a fused accumulation) counts it twice;
        one that reads ``.grad`` as its workspace adds the first micro-batch's in."""
        ctx, op = self.ctx, self.ctx.op
        if not ctx.grad:
            return
        batches, upstreams = self._reordered(trial, 2)
        want = [ctx.call_backward(ctx.to_device(b), u)[1] for b, u in zip(batches, upstreams)]
        dev = ctx.to_device(batches[0])
        shared = {
            n: dev[n].detach().requires_grad_(True)
            for n in op.grad_inputs
            if not op.is_row_wise(op.input(n))
        }
        leaves = []
        for batch, u in zip((dev, ctx.to_device(batches[1])), upstreams):
            args, outs = ctx.forward_with_grad({**batch, **shared}, u)
            ctx.accumulate_backward(args, outs, u)
            leaves.append(args)
        before = len(self.problems)
        got = {n: (shared[n] if n in shared else leaves[0][n]).grad for n in op.grad_inputs}
        expect = {n: want[0][n] + want[1][n] if n in shared else want[0][n] for n in op.grad_inputs}
        for n, g in got.items():
            if g is None:
                self.problems.append(f"accumulated into .grad: {n!r} got no .grad")
                return
        problem = (
            "two micro-batches accumulated into .grad (loss.backward()): {} differs from the "
            "sum of their gradients alone"
        )
        self._same_gradients(problem, got, expect)
        if len(self.problems) == before:
            self.passed.append("two micro-batches accumulated into .grad == their sum")

    def _calls_from_threads(self, trial: Trial) -> None:
        """Two threads calling at once (:mod:`~kernelcheck.checks.concurrent_calls`) on two
        batches of one shape (the first rows, repeated to ``concurrent_calls.rows_for``'s
        count so that each op runs long enough to let the other thread in, and the
        same reversed with the shared floats times -0.5), forward only and, when on, forward
        and backward in turn: every output and gradient keeps the bits of its call alone.
        A scratch buffer kept per shape is written by both. In the attribute sweeps' cases
        too: a kernel may stage its inputs in a scratch buffer only for an attribute's
        other values (a temperature's scaled logits; T = 1 reads the logits as they are).
        Then again at a big batch of ``concurrent_elements`` (in the big-batch probes'
        cases, every dtype): a kernel may stage a 16-bit input in one fp32 buffer only
        past a size (a round-26 red team's rms_norm, from 2^22 elements, shared it by
        every caller; a round-27 one's swiglu, from 2^24)."""
        rows = concurrent_calls.rows_for(self.ctx.row_work)
        self._calls_from_threads_at(trial, rows, concurrent_calls.ROUNDS)
        big = self._big_batch_rows("concurrent_rows", "concurrent_elements", "wide_work")
        if big > rows:
            self._calls_from_threads_at(trial, big, CONCURRENT_ROUNDS)

    def _calls_from_threads_at(self, trial: Trial, rows: int, rounds: int) -> None:
        """:meth:`_calls_from_threads` at ``rows`` rows a call, ``rounds`` calls a thread."""
        ctx, op = self.ctx, self.ctx.op
        head, _ = self._head(trial)
        row = [k for k in head if op.is_row_wise(op.input(k))]
        mine = {
            k: v.repeat_interleave(-(-rows // len(v)), 0)[:rows] if k in row else v
            for k, v in head.items()
        }
        shared = self._shared_floats(head)
        # x -0.5 (exact), not the refill probe's negation: a cache keyed by a freed
        # tensor's id and address could then hand that probe these very values
        other = {
            k: v * -0.5 if k in shared else v.flip(0) if k in row else v for k, v in mine.items()
        }
        ups = ctx.upstream(trial.seed, (rows,)) if ctx.grad else None
        ups_b = [u.flip(0) if u.dim() else u for u in ups] if ups else None
        kinds = [(mine, None), (other, None)] + ([(mine, ups), (other, ups_b)] if ups else [])
        # each thread alternates its two kinds of call (forward, then forward and
        # backward), compares each with the same call alone at once and keeps the finding
        calls = [self._compared_calls(kinds[i::2]) for i in (0, 1)]
        with poisoned_allocations():  # the threads' own switching leaves it on throughout
            runs = concurrent_calls.together(calls, rounds)
        differ = [
            f"thread {i + 1}, call {r + 1}, {found}"
            for i, run in enumerate(runs)
            for r, found in enumerate(run)
            if found
        ]
        what = f"{rows} rows, forward" + (" and backward in turn" if ups else "")
        if differ:
            self.problems.append(
                f"two threads calling at once ({what}): {len(differ)} of "
                f"{sum(map(len, runs))} calls differ in bits from the same call alone (a "
                f"scratch buffer both write?); first: {differ[0]}"
            )
        else:
            self.passed.append(f"two threads calling at once ({what}) == calls alone")

    def _compared_calls(self, kinds: list[tuple[dict, list | None]]):
        """A call that makes each of ``kinds``' calls in turn and returns how its results
        differ from the same call's alone ('' when in every bit the same)."""
        turns = [self._labelled_call(x, u) for x, u in kinds]
        alone = [turn() for turn in turns]
        made = []

        def call() -> str:
            k = len(made) % len(turns)
            made.append(k)
            for (label, g), (_, w) in zip(turns[k](), alone[k]):
                if g.shape != w.shape or g.dtype != w.dtype:
                    return f"{label}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}"
                if not bool((bits(g) == bits(w)).all()):
                    return f"{label}: {first_bit_difference(g, w)}"
            return ""

        return call

    def _labelled_call(self, inputs: dict, upstream: list | None):
        """A call on fresh device copies of ``inputs``: [(label, CPU tensor)] of its
        outputs, and with ``upstream`` its gradients too."""
        ctx, op = self.ctx, self.ctx.op

        def call() -> list[tuple[str, torch.Tensor]]:
            if upstream is None:
                outs, grads = ctx.call(ctx.to_device(inputs)), {}
            else:
                outs, grads = ctx.call_backward(ctx.to_device(inputs), upstream)
            found = [(f"output {o.name!r}", t.detach().cpu()) for o, t in zip(op.outputs, outs)]
            return found + [(f"gradient {n!r}", grads[n].cpu()) for n in sorted(grads)]

        return call

    def _as_two_sequences(self, head: dict, rows: int) -> tuple[dict, tuple[int, int]]:
        """The head's first ``rows`` rows (even) as a ``(2, rows // 2)`` lead: two
        sequences, the row-wise inputs reshaped, the others as they are."""
        op, lead = self.ctx.op, (2, rows // 2)
        two = {
            s.name: head[s.name][: 2 * lead[1]].reshape(*lead, *head[s.name].shape[1:])
            if op.is_row_wise(s) else head[s.name]
            for s in op.inputs
        }  # fmt: skip
        return two, lead

    def _broadcast_upstreams(self, trial: Trial, head: dict, rows: int) -> list:
        """The head's ``rows`` rows as a ``(2, m)`` lead with upstreams broadcast over one
        dim: one value per sequence, strides (1, 0), as a sequence-level loss gives
        ((lp.sum(-1) * advantage).mean()), and one per position shared by the batch,
        strides (0, 1)."""
        if rows // 2 < 2:
            return []
        two, lead = self._as_two_sequences(head, rows)
        ups = [u.to(self.ctx.device) for u in self.ctx.upstream(trial.seed, lead)]
        # the very layouts autograd hands: (lp.sum(-1) * adv)'s strides are (1, 0)
        last = [u[:, 0].contiguous()[:, None].expand_as(u) if u.dim() >= 2 else u for u in ups]
        first = [u[0].contiguous()[None].expand_as(u) if u.dim() >= 2 else u for u in ups]
        return [
            ("upstream broadcast over the last dim", two, last),
            ("upstream broadcast over the first dim", two, first),
        ]

    def _same_bits(self, label: str, views: dict, contiguous: dict) -> None:
        """The outputs of a call on ``views`` against those of their ``contiguous`` copies
        (taken before it), bit for bit; and the views unchanged by the call (a kernel
        writing its result over an input it recognises, the gate half of one gate_up
        buffer, gives the right outputs)."""
        got = self.ctx.call(views)
        for k, v in views.items():
            written = changed_elements(contiguous[k].cpu(), v.detach())
            if written:
                self.problems.append(f"{label}: the call changed input {k!r} ({written} elements)")
        want = self.ctx.call({k: v.contiguous() for k, v in contiguous.items()})
        for i, (g, w) in enumerate(zip(got, want)):
            g, w = g.detach().cpu(), w.detach().cpu()
            if g.shape != w.shape or not bool((bits(g) == bits(w)).all()):
                detail = "shape differs" if g.shape != w.shape else first_bit_difference(g, w)
                self.problems.append(
                    f"{label}: output {self.ctx.op.outputs[i].name!r} differs from the contiguous "
                    f"copy: {detail}"
                )

    def outcome(self) -> Outcome:
        metrics = {"violations": len(self.problems), "verified": len(self.passed)}
        t = self.trial
        seed, dist = (t.seed, t.distribution) if t else (None, None)
        found = self.problems + self.errors
        if found:
            msg = "; ".join(found[:4]) + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")
            status = "fail" if self.problems else "error"
            return Outcome(status, msg, metrics, {"mode": "exact"}, seed, dist)
        return Outcome("pass", "", metrics, {"mode": "exact"}, seed, dist)


def _same_input(op, other, name: str) -> bool:
    """Whether ``other`` takes an input ``name`` of the same dims as ``op``'s."""
    theirs = [i for i in other.inputs if i.name == name]
    return bool(theirs) and tuple(theirs[0].shape) == tuple(op.input(name).shape)


def _sibling_ran(fn, args: dict, grad: bool = False) -> bool:
    """Call a sibling as a model would, before the candidate (``grad``: with its graph,
    as a training step's forward); False where it raised."""
    try:
        with torch.enable_grad() if grad else torch.no_grad(), poisoned_allocations():
            fn(**args)
    except Exception:  # noqa: BLE001 - the sibling's own op judges its refusals
        return False
    return True


def _refill(dev: dict, new: dict, names: list) -> None:
    """Write ``new``'s values of ``names`` into ``dev``'s tensors through ``.data``: the
    same tensors, their version counters as they were."""
    with torch.no_grad():
        for k in names:
            dev[k].data.copy_(new[k])
