"""``forward_invariance`` and ``backward_invariance``: bitwise batch invariance.

A row's bits may depend on its length (V) alone. A pool of distinct rows is drawn, R of
them (default 300) are run alone, and every one of those must give the same bits in
each of these layouts:

- ``alone``: each row in a batch of its own (batch 1), the reference, at all cores' worth
  of threads and at least 8;
- ``batches``: the R rows in a seeded random order, dealt into consecutive batches whose
  sizes cycle through ``batch_sizes`` and the odd sizes 3, 5, 7 (one real kernel differs
  only in batches of 3), each batch's storage starting one element past its allocation
  (``misaligned``: by 1, 2, 3, ... elements in turn, every offset within 64 bytes),
  every other batch at **one** CPU thread (alone runs at all cores, at
  least 8 threads, whatever the case's own count): rows at other positions, in small batches, at
  other address alignments, with another thread count than alone;
- ``one batch``: the R rows, each several times over, in one batch of ``big_rows``
  (98,304 at short rows, half again past a grid dimension's 65,535 blocks; 16,384 or more at
  longer ones: an RL micro-batch of 8k-96k tokens) rows, or at long rows of as many as hold
  ``big_elements`` (80M, 320 MiB of fp32: 553 rows at the Qwen3 vocab), or of as many
  as take ``big_work`` (2^31) products of the row's dims (linear_logp's tokens x hidden
  x vocab), with a 3-D lead shape (``lead_3d``) when it factors, at an odd thread count
  (13 where it can) that splits the batch's elements off 64-byte boundaries
  (:func:`split_threads`): the scale where a kernel switches strategy (split
  reductions, another block count, a size threshold, a flat elementwise pass whose
  split points fall inside a vector);
- ``at other values``: in a case at the grid's attributes, ``OTHER_VALUE_ROWS`` pool rows
  alone and in one batch of ``OTHER_VALUE_BATCH`` (each row twice or more) at each other
  value of each attribute the candidate takes (the grid's and the sweep's: temperature,
  eps): the attribute sweeps judge the other layouts at the first shape only, and a
  kernel may take a split path for few rows only off an attribute's default and only
  on long rows (a tempered logsumexp split over the vocab for fewer than 16 rows past
  V = 16,384);
- ``own batch``: up to ``own_rows`` rows of the case's own trial, whose batch call the
  accuracy checks made, against the same rows alone: the case's real shape, at every
  seed of the case (the pool at the first ``max_seeds``): an odd seed masks 15 rows in
  16, where a kernel may compact the live rows into another path. A case whose pool an
  earlier case of the plan judges (``Case.pool_judged_in``: only the lead shape
  differs) compares this layout only.

A kernel whose reduction order depends on N, N*V, the block that took the row, the lead
shape, the thread count or the row's address alignment gives some row other bits in some
layout.

The guarantee: every one of the R rows is compared between batch 1 and multi-row
batches, so a kernel that changes a fraction p of rows when the batch composition
changes escapes with probability (1 - p)^R at most; at p = 5% and R = 300 that is
2.1e-7. The metric ``miss_probability_5pct`` states it for the R actually used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch

from kernelcheck import dtypes
from kernelcheck.cases.inputs import row_distribution
from kernelcheck.checks.check import Check
from kernelcheck.checks.metrics import first_bit_difference, row_digests
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.rows import placed_rows
from kernelcheck.checks.threads import torch_threads
from kernelcheck.checks.trial import Trial

POOL_BYTES = 1 << 30  # the compared rows' inputs at most ~1 GiB: R shrinks only for huge rows
ODD_SIZES = (3, 5, 7)  # always among the small batches
POSITION_BUCKETS = 16  # the invariance grid's columns: positions in a batch, bucketed


FEW_THREADS = 1  # the other small batches' count: no reduction is split at one thread
# rows alone run at all cores, but at least this many threads (oversubscribed on a small
# machine): a kernel that splits a long row across idle threads only when rows * 8 <=
# threads (split-K for a small batch) splits nothing at 2 threads, and a server's 64
# cores would split it
MANY_THREADS_AT_LEAST = 8
# a few rows alone again at each of these many threads (a server's cores, a dual-socket
# one's; a GPU's SMs): a kernel may split a row across threads only past a count (more
# threads than 8 and than rows; 64, a big machine's), which all the pool at WIDE_THREADS
# would cost too much to show (1.6x the default run at 32)
WIDE_THREADS, WIDE_ROWS = (32, 128), 16
# then one batch whose rows leave a big remainder over many threads: 127 rows at 64 (63
# left over; 31 over 32 workers), where a kernel splitting rows over min(threads, rows)
# workers may give the remainder to a fixed tail tile (of 16: a round-26 red team's
# swiglu wrote no row past it at 48 threads, a server's cores; 16 rows alone never left one)
REMAINDER_THREADS, REMAINDER_BATCH = 64, 127
# the rows alone, and their batch, at each other attribute value (an odd batch past 16)
OTHER_VALUE_ROWS, OTHER_VALUE_BATCH = 48, 97


def thread_counts() -> tuple[int, int]:
    """(many, few): rows alone (and every other small batch) run at ``many`` CPU threads,
    all cores and at least MANY_THREADS_AT_LEAST, where a reduction over a long row is
    split across threads when rows are fewer than threads (PyTorch's CPU ``sum`` does);
    the other small batches at ``few``, 1; the one batch at the case's own count. Fixed
    by the machine, never by the case's own share of the cores: side by side a case runs
    at 1 thread, where alone would split nothing and such a kernel would pass."""
    return max(MANY_THREADS_AT_LEAST, os.cpu_count() or 1), FEW_THREADS


def position_counts(bad: torch.Tensor, buckets: int = POSITION_BUCKETS) -> tuple[int, list, list]:
    """(width, compared, mismatched) of one batch's ``bad`` (per position: differs from the
    row alone) over at most ``buckets`` position buckets of ``width`` positions each."""
    n = bad.numel()
    width = max(1, -(-n // buckets))
    bucket = torch.arange(n) // width
    compared = torch.bincount(bucket, minlength=-(-n // width))
    mismatched = torch.bincount(bucket, weights=bad.double(), minlength=len(compared))
    return width, compared.tolist(), [int(x) for x in mismatched]


def lead_layouts(n: int, lead_3d: bool) -> list[tuple[str, tuple[int, ...]]]:
    """2-D ``(n,)`` and, when n factors, 3-D ``(b, n // b)`` with the smallest b >= 2."""
    layouts = [("2-D", (n,))]
    if lead_3d:
        b = next((b for b in range(2, n) if n % b == 0), None)
        if b is not None:
            layouts.append(("3-D", (b, n // b)))
    return layouts


def small_leads(lead_dims: int) -> list[tuple[str, Callable[[int], tuple[int, ...]]]]:
    """The lead shapes of the small batches, as functions of the batch's rows: ``(n,)``,
    and with two lead dims ``(n, 1)`` and ``(1, n)`` too (a decode step's one token per
    sequence, a packed sequence): a kernel may take another path at a unit dim."""
    flat = [("(n,)", lambda n: (n,))]
    if lead_dims < 2:
        return flat
    return [*flat, ("(n, 1)", lambda n: (n, 1)), ("(1, n)", lambda n: (1, n))]


def batch_layout(k: int, sizes: int, shapes: int) -> tuple[int, int]:
    """(thread count: 0 few, 1 many; lead shape) of the k-th small batch. Constant within
    a round of the ``sizes`` batch sizes and cycling over rounds, so every size meets
    every combination (alternating batch by batch, an even number of sizes would pin
    each size to one thread count)."""
    combo = (k // sizes) % (2 * shapes)
    return combo % 2, combo // 2


ALIGNMENT = 64  # bytes: the widest vector load (AVX-512, a GPU's 4 x float4 per lane)


def misaligned_by(shift: int, element_size: int) -> int:
    """Elements to start rows past an allocation at ``shift`` (0: none): shifts 1, 2, ...
    cycle through every element offset within ``ALIGNMENT`` bytes, so row starts meet each
    vector width a kernel may pick from the address (a float2 path at 8 bytes, a float4
    one at 16), not only an odd one."""
    if shift <= 0:
        return 0
    return 1 + (shift - 1) % max(1, ALIGNMENT // element_size - 1)


# the one batch's thread counts to choose from, most first: each split point between two
# threads' shares is a chance for a vector's scalar tail (13: twelve of them)
SPLIT_THREADS = (13, 11, 9, 7, 5, 3)


def split_threads(elements: int, itemsize: int) -> int:
    """The one batch's CPU thread count: the first of SPLIT_THREADS at which a flat pass
    over ``elements`` split evenly across threads (PyTorch's ``parallel_for``: ceil(n /
    threads) each) starts a thread's share inside a 64-byte vector. A kernel that runs
    an elementwise step over the whole batch as one flat array (no per-row padding)
    computes the elements at such a split with its scalar tail, other bits; at 2 or 8
    threads, or at a round batch, every split falls on a vector boundary."""
    lanes = max(1, ALIGNMENT // itemsize)
    for threads in SPLIT_THREADS:
        if -(-elements // threads) % lanes:
            return threads
    return SPLIT_THREADS[0]


def deal(order: list[int], sizes: list[int]) -> list[list[int]]:
    """Consecutive batches of ``order`` whose sizes cycle through ``sizes`` (last partial)."""
    batches, start, k = [], 0, 0
    while start < len(order):
        n = sizes[k % len(sizes)]
        batches.append(order[start : start + n])
        start, k = start + n, k + 1
    return batches


def miss_probability(rows: int, fraction: float = 0.05) -> float:
    """Chance that none of ``rows`` independent rows shows a bug hitting ``fraction`` of rows."""
    return (1.0 - fraction) ** rows


class _Invariance(Check):
    small_inputs = True
    draws_own = True
    sweep_first_dtype_only = True
    PARAMS = {
        "rows": 300,
        "batch_sizes": [1, 2, 4, 16, 300],
        "max_seeds": 1,
        "lead_3d": True,
        "misaligned": True,
        # rows past ``big_rows_floor`` only while the batch holds at most
        # ``big_rows_elements`` row-wise elements (short rows: logp at V = 257 takes 98,304)
        "big_rows": 98304,
        "big_rows_floor": 16384,
        "big_rows_elements": 1 << 25,
        "big_elements": 5 << 24,
        "big_work": 1 << 31,
        "own_rows": 32,
    }

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.distinct = 0
        self.comparisons = 0
        self.mismatched = 0
        self.by_layout: dict[str, int] = {}
        self.first: str | None = None
        self.first_trial: Trial | None = None
        self.first_dist: str | None = None
        # the invariance grid: (layout, batch size) -> [position width, compared, mismatched]
        self.grid: dict[tuple[str, int], list] = {}
        # the trials whose pool is judged (None: every trial, where no plan chose them)
        self._pool_trials: set[int] | None = None

    def skip_reason(self) -> str | None:
        op = self.ctx.op
        if not any(op.is_row_wise(i) for i in op.inputs) or not op.lead:
            return f"op {op.name} has no row-wise inputs"
        return super().skip_reason()

    def _results(self, dev: dict, upstream: list, lead: tuple[int, ...], ctx=None):
        """Row-wise results of a call on ``dev`` (fresh device inputs), as ``[rows, ...]``
        on the CPU; ``ctx``: the candidate bound to other attribute values."""
        raise NotImplementedError

    def _own_results(self, trial: Trial) -> list[torch.Tensor]:
        """The trial's own row-wise results, ``[rows, ...]`` (shared with accuracy)."""
        raise NotImplementedError

    def pool_rows(self) -> int:
        """R: the ``rows`` parameter (at least the largest batch size), within POOL_BYTES."""
        sizes = [int(n) for n in self.params["batch_sizes"]]
        want = max([int(self.params["rows"]), *sizes])
        return max(1, min(want, POOL_BYTES // self.ctx.row_bytes(8)))

    def big_rows(self, rows: int) -> int:
        """The one batch's rows: ``big_rows`` (98,304: 32,768 rows past a grid dimension's
        65,535 blocks; an RL micro-batch of 8k-96k tokens) at short rows, as many as hold
        ``big_rows_elements`` (2^25) but at least ``big_rows_floor`` (16,384) at longer
        ones, fewer at long rows, as many as hold ``big_elements`` (80M: 320 MiB of fp32,
        past the 256 MiB where kernels commonly switch strategy), within POOL_BYTES of
        inputs; never fewer than the R rows. The op's big-batch case
        (``CaseContext.is_big_batch_case``) takes ``big_elements`` at short rows too: the
        grid's long-row shapes reach it at the grid's attributes only. At most
        ``big_work`` (2^31) products of the non-lead dims: linear_logp's 16,384 tokens at
        hidden 1,024 and vocab 1,000 would be 17 G multiply-adds, 2,048 are 2 G."""
        itemsize = dtypes.torch_dtype(self.ctx.case.dtype).itemsize
        elements = int(self.params["big_elements"])
        work, row_elements = self.ctx.row_work, self.ctx.row_bytes(1)
        short = int(self.params["big_rows_elements"]) // row_elements
        many = min(int(self.params["big_rows"]), max(int(self.params["big_rows_floor"]), short))
        want = min(many, -(-elements // row_elements))
        if self.ctx.is_big_batch_case():  # by the work per row (linear_logp's hidden x vocab)
            want = max(want, elements // work)
        want = min(want, int(self.params["big_work"]) // work)
        return max(rows, min(want, POOL_BYTES // self.ctx.row_bytes(itemsize)))

    def trials_wanted(self, trials: list[Trial]) -> list[Trial]:
        """Every trial: its own batch is compared at every seed (a sparse seed's batch of
        mostly masked rows is where a kernel compacts the live ones); the pool only on
        the trials ``max_seeds`` picks, as any check's trials are picked."""
        self._pool_trials = {id(t) for t in super().trials_wanted(trials)}
        return trials

    def observe(self, trial: Trial) -> None:
        own = self._own_rows(trial)  # before the pool: a Qwen3 trial's results go first
        pooled = self._pool_trials is None or id(trial) in self._pool_trials
        if self.ctx.case.pool_judged_in is None and pooled:
            self._judge_pool(trial)
        if own is not None:
            self._compare_own(trial, own)

    def _run(self, source, index, lead, shift=0, ctx=None) -> list[torch.Tensor]:
        """The row-wise results of one call on rows ``index`` of ``source`` placed in
        ``lead``, float inputs misaligned at ``shift`` (:func:`misaligned_by`)."""
        return self._results(*self._placed(source, index, lead, shift), lead, ctx)

    def _judge_pool(self, trial: Trial) -> None:
        """The R pool rows alone, in small batches and in one large batch. Skipped where an
        earlier case of the plan judged the very same pool (``Case.pool_judged_in``)."""
        rows = self.pool_rows()
        big = self.big_rows(rows)
        pool = self.ctx.pool(trial.seed, trial.distribution, rows)

        def run(index, lead, shift=0):
            return self._run(pool, index, lead, shift)

        gen = torch.Generator().manual_seed(trial.seed * 7919 + rows)
        many, few = thread_counts()
        # alone: the reference bits of every compared row, at all threads
        self.progress("alone (batch 1)")
        with torch_threads(many):
            alone = [run([r], (1,)) for r in range(rows)]
        self.distinct += rows
        reference = self._reference(alone)

        small = [int(n) for n in self.params["batch_sizes"] if 1 < int(n) < rows]
        small = sorted({*small, *(n for n in ODD_SIZES if n < rows)}) or [2]
        misalign = bool(self.params["misaligned"])
        order = torch.randperm(rows, generator=gen).tolist()
        shapes = small_leads(len(self.ctx.op.lead))
        label = f"batches of {'/'.join(map(str, small))}" + (" misaligned" if misalign else "")
        if len(shapes) > 1:
            label += ", as " + ", ".join(name for name, _ in shapes)
        label += f", half at {few} thread" + ("s" if few > 1 else "")
        self.progress(label)
        for k, batch in enumerate(deal(order, small)):
            threads, shape = batch_layout(k, len(small), len(shapes))
            lead = shapes[shape][1](len(batch))
            with torch_threads((few, many)[threads]):
                got = run(batch, lead, k + 1 if misalign else 0)
            placed = self._offset_bytes(k + 1 if misalign else 0)
            self._compare(trial, label, batch, got, reference, lead=lead, placed=placed)

        self._wide_alone(trial, run, rows, reference)
        self._at_other_values(trial, pool, rows)
        # the R rows again and again (copies cost nothing to draw), in a seeded order
        order = [r % rows for r in torch.randperm(big, generator=gen).tolist()]
        shape_label, lead = lead_layouts(big, bool(self.params["lead_3d"]))[-1]
        itemsize = dtypes.torch_dtype(self.ctx.case.dtype).itemsize
        threads = split_threads(big * self._row_elements(), itemsize)
        label = f"one batch of {big} ({shape_label}) at {threads} threads"
        self.progress(label)
        # rows outnumber threads here: a thread's share of rows, never a split row
        with torch_threads(threads):
            got = run(order, lead)
        self._compare(trial, label, order, got, reference)

    def _row_elements(self) -> int:
        """The elements of one lead row of the widest row-wise input."""
        op, sizes = self.ctx.op, self.ctx.sizes
        nlead = len(op.lead)
        return max(
            math.prod(sizes[d] for d in spec.shape[nlead:] if d in sizes)
            for spec in op.inputs
            if op.is_row_wise(spec)
        )

    def _placed(self, source, index, lead, shift):
        """Fresh device inputs holding rows ``index`` of ``source`` (pool, upstream) in
        ``lead``: a candidate that writes them spoils nothing; only float inputs are
        misaligned, at ``shift`` (it is about vector loads of the data)."""
        ctx, op = self.ctx, self.ctx.op
        inputs, ups = source

        def offset(v: torch.Tensor) -> int:
            return misaligned_by(shift, v.element_size()) if v.is_floating_point() else 0

        dev = {
            k: (
                placed_rows(v, index, lead, ctx.device, offset(v))
                if op.is_row_wise(op.input(k))
                else v.to(ctx.device, copy=True)
            )
            for k, v in inputs.items()
        }
        return dev, [placed_rows(u, index, lead, "cpu") for u in ups]

    def _offset_bytes(self, shift: int) -> str:
        """Where the case-dtype inputs start at ``shift``, for a message ('' at none)."""
        size = dtypes.torch_dtype(self.ctx.case.dtype).itemsize
        return f"rows {misaligned_by(shift, size) * size} bytes past an allocation" if shift else ""

    @staticmethod
    def _reference(alone: list) -> tuple:
        """(alone results, per output their 32-bit row digests): a single changed element
        always shows; the rows themselves stay for the first difference's message."""
        digests = [torch.cat([row_digests(a[k]) for a in alone]) for k in range(len(alone[0]))]
        return alone, digests

    def _own_rows(self, trial: Trial):
        """(sampled row indices, the trial's own results at those rows), or None where the
        case has a single row; then this check reads the trial's results no more. Rows
        with a nonzero result are sampled first: a masked row's exact zeros say little,
        and at a sparse seed the few live rows are the ones a compacting kernel moves."""
        ctx = self.ctx
        n = math.prod(ctx.lead)
        if n < 2:
            return None
        own = self._own_results(trial)
        gen = torch.Generator().manual_seed(trial.seed * 104729 + n)
        order = torch.randperm(n, generator=gen)
        live = torch.stack([r.reshape(n, -1).ne(0).any(dim=1) for r in own]).any(dim=0)
        order = order[torch.argsort((~live[order]).to(torch.int8), stable=True)]
        take = order[: int(self.params["own_rows"])].sort().values
        results = [r[take].clone() for r in own]
        trial.finished(self.name)  # a Qwen3 trial's gradient is freed before the pool is drawn
        return take, results

    def _wide_alone(self, trial: Trial, run, rows: int, reference) -> None:
        """``WIDE_ROWS`` pool rows, spread over the pool (its distributions), alone again
        at each of ``WIDE_THREADS``; then the pool's rows in turn as one batch of
        ``REMAINDER_BATCH`` at ``REMAINDER_THREADS``."""
        for threads in WIDE_THREADS:
            label = f"rows alone at {threads} threads"
            self.progress(label)
            with torch_threads(threads):
                for r in sorted({i * rows // WIDE_ROWS for i in range(WIDE_ROWS)}):
                    self._compare(trial, label, [r], run([r], (1,)), reference, lead=(1,))
        label = f"one batch of {REMAINDER_BATCH} at {REMAINDER_THREADS} threads"
        self.progress(label)
        order = [k % rows for k in range(REMAINDER_BATCH)]
        with torch_threads(REMAINDER_THREADS):
            got = run(order, (REMAINDER_BATCH,))
        self._compare(trial, label, order, got, reference)

    def _at_other_values(self, trial: Trial, pool, rows: int) -> None:
        """The first OTHER_VALUE_ROWS pool rows (every distribution) alone, at all cores,
        and in one batch of OTHER_VALUE_BATCH, at each other value of each attribute the
        candidate takes; in a case at the grid's attributes (a sweep's case judges its
        own values in every layout)."""
        ctx = self.ctx
        if ctx.rebound is None or ctx.op.off_grid(ctx.case.attributes):
            return
        index = list(range(min(OTHER_VALUE_ROWS, rows)))
        order = [index[k % len(index)] for k in range(OTHER_VALUE_BATCH)]
        for name, values in ctx.other_attribute_values.items():
            for value in values:
                other = ctx.at_attributes({name: value})
                label = f"at {name}={value}: one batch of {OTHER_VALUE_BATCH}"
                self.progress(label)
                with torch_threads(thread_counts()[0]):
                    alone = [self._run(pool, [r], (1,), ctx=other) for r in index]
                got = self._run(pool, order, (OTHER_VALUE_BATCH,), ctx=other)
                self._compare(trial, label, order, got, self._reference(alone))

    def _compare_own(self, trial: Trial, own) -> None:
        """The sampled rows of the case's own batch against the same rows alone."""
        take, results = own
        ctx = self.ctx
        inputs = {
            k: ctx.input_rows(k, v) if ctx.op.is_row_wise(ctx.op.input(k)) else v
            for k, v in trial.cpu_inputs.items()
        }
        ups = [u.reshape(math.prod(ctx.lead), *u.shape[len(ctx.lead) :]) for u in trial.upstream]
        label = f"own batch of {math.prod(ctx.lead)}"
        self.progress(label)
        with torch_threads(thread_counts()[0]):  # alone as in the pool: split if ever
            alone = [self._run((inputs, ups), [int(r)], (1,)) for r in take]
        reference = self._reference(alone)
        self._compare(trial, label, list(range(len(take))), results, reference, take.tolist())

    def _compare(
        self, trial, label, index, results, reference, names=None, lead=None, placed=""
    ) -> None:
        """Count the rows of one batch whose bits differ from the same rows alone;
        ``names`` (default ``index``) say which rows those are in the message, ``lead``
        the batch's lead shape where the label does not, ``placed`` its rows' placement."""
        alone, digests = reference
        at = torch.tensor(index)
        per_output = [row_digests(got) != want[at] for got, want in zip(results, digests)]
        bad = torch.stack(per_output).any(dim=0)
        self._place(label, bad)
        self.comparisons += len(index)
        n_bad = int(bad.sum())
        if not n_bad:
            return
        self.mismatched += n_bad
        self.by_layout[label] = self.by_layout.get(label, 0) + n_bad
        if self.first is None:
            pos = int(bad.nonzero()[0])
            k = next(k for k, m in enumerate(per_output) if bool(m[pos]))
            row = index[pos]
            which = "pool row" if names is None else "trial row"
            self.first_trial = trial
            self.first_dist = row_distribution(trial.distribution, (names or index)[pos])
            shape = f" as lead {lead}" if lead is not None and len(lead) > 1 else ""
            shape += f", {placed}" if placed else ""
            name = (names or index)[pos]
            self.first = (
                f"{label}, position {pos} of {len(index)}{shape} ({which} {name}): "
                f"{first_bit_difference(results[k][pos], alone[row][k][0])} vs alone"
            )

    def _place(self, label: str, bad: torch.Tensor) -> None:
        """Count one batch into the grid of (layout, batch size) x position bucket."""
        width, compared, mismatched = position_counts(bad)
        cell = self.grid.setdefault((label, len(bad)), [width, [0] * len(compared), None])
        cell[1] = [a + b for a, b in zip(cell[1], compared)]
        if any(mismatched):
            cell[2] = [a + b for a, b in zip(cell[2] or [0] * len(mismatched), mismatched)]

    def plots(self) -> dict:
        """The grid: per layout, one row per batch size (smallest first); ``mismatched``
        only where some row differs."""
        grid: dict[str, list] = {}
        for label, _ in self.grid:  # layouts in the order they ran
            grid.setdefault(label, [])
        for (label, n), (width, compared, mismatched) in sorted(self.grid.items()):
            row = {"batch": n, "position_width": width, "compared": compared}
            if mismatched:
                row["mismatched"] = mismatched
            grid[label].append(row)
        return {"invariance": grid}

    def outcome(self) -> Outcome:
        metrics = {
            "compared_rows": self.distinct,
            "comparisons": self.comparisons,
            "mismatched_rows": self.mismatched,
            "miss_probability_5pct": miss_probability(self.distinct),
        }
        if self.ctx.case.pool_judged_in is not None:  # the bound is that case's
            metrics["pool_judged_in"] = self.ctx.case.pool_judged_in
            del metrics["miss_probability_5pct"]
        if self.by_layout:
            metrics["mismatched_by_layout"] = dict(self.by_layout)
        tol = {"mode": "bitwise"}
        if self.mismatched:
            t = self.first_trial
            msg = (
                f"{self.mismatched} of {self.comparisons} row placements differ in bits from the "
                f"same row alone; first: {self.first} [seed {t.seed}, {self.first_dist}]"
            )
            return Outcome(
                "fail", msg, metrics, tol, t.seed, self.first_dist, t.distribution, self.plots()
            )
        return Outcome("pass", "", metrics, tol, plots=self.plots())


class ForwardInvariance(_Invariance):
    name = "forward_invariance"
    uses = frozenset({"outputs"})
    summary = "a row's output bits do not depend on batch size, position, lead shape or alignment"

    def _own_results(self, trial):
        nlead = len(self.ctx.lead)
        return [o.reshape(-1, *o.shape[nlead:]) for o in trial.outputs]

    def _results(self, dev, upstream, lead, ctx=None):
        outs = (ctx or self.ctx).call(dev)
        return [o.detach().cpu().reshape(-1, *o.shape[len(lead) :]) for o in outs]


class BackwardInvariance(_Invariance):
    """The gradient rows, and the rows of the outputs of the same call (made with grad:
    a fused kernel's training path, which ``forward_invariance``'s no-grad calls never
    take)."""

    name = "backward_invariance"
    needs_grad = True
    uses = frozenset({"grads", "grad_outputs"})
    summary = (
        "identical (inputs, upstream grad) rows get bit-identical gradient rows, and "
        "output rows of that call, anywhere"
    )

    def _own_results(self, trial):
        op, nlead = self.ctx.op, len(self.ctx.lead)
        grads = [
            self.ctx.input_rows(n, g) for n, g in trial.grads.items() if op.is_row_wise(op.input(n))
        ]
        return grads + [o.reshape(-1, *o.shape[nlead:]) for o in trial.grad_outputs]

    def _results(self, dev, upstream, lead, ctx=None):
        outs, grads = (ctx or self.ctx).call_backward(dev, upstream)
        op = self.ctx.op
        rows = [
            g.cpu().reshape(-1, *g.shape[len(lead) :])
            for n, g in grads.items()
            if op.is_row_wise(op.input(n))
        ]
        return rows + [o.cpu().reshape(-1, *o.shape[len(lead) :]) for o in outs]
