"""``forward_invariance`` and ``backward_invariance``: bitwise batch invariance.

A pool of R distinct rows (default 300) is run in three layouts, and every row must
give the same bits in each:

- ``alone``: each row in a batch of its own (batch 1), the reference;
- ``batches``: the rows in a seeded random order, dealt into consecutive batches whose
  sizes cycle through ``batch_sizes`` (2, 4, 16), each batch's storage starting one
  element past its allocation (``misaligned``), so rows sit at other positions, in
  small batches, at other address alignments;
- ``one batch``: all R rows in one batch, in another seeded order, with a 3-D lead
  shape (``lead_3d``) when R factors.

A kernel whose reduction order depends on N, on the block that took the row, on the
lead shape or on the row's address alignment gives some row other bits in some layout.

The guarantee: every pool row is compared between batch 1 and multi-row batches, so a
kernel that changes a fraction p of rows when the batch composition changes escapes
with probability (1 - p)^R at most; at p = 5% and R = 300 that is 2.1e-7. The metric
``miss_probability_5pct`` states it for the R actually used.
"""

from __future__ import annotations

import math

import torch

from kernelcheck.cases.inputs import row_distribution
from kernelcheck.checks.base import Check, Outcome, Trial
from kernelcheck.checks.metrics import first_bit_difference, row_digests

POOL_BYTES = 1 << 30  # the pool's inputs at most ~1 GiB: R shrinks only for huge rows
POSITION_BUCKETS = 16  # the invariance grid's columns: positions in a batch, bucketed


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


def placed_rows(
    pool: torch.Tensor, index: list[int], lead: tuple[int, ...], device, misalign: bool
) -> torch.Tensor:
    """Rows ``index`` of ``pool`` as a fresh contiguous ``[*lead, ...]`` tensor on ``device``;
    ``misalign`` starts its storage one element past an allocation. One copy: the rows are
    gathered straight into place on the CPU (host-side, then one transfer, elsewhere)."""
    inner = tuple(pool.shape[1:])
    buf = torch.empty(math.prod((*lead, *inner)) + int(misalign), dtype=pool.dtype, device=device)
    dst = buf[int(misalign) :].view(len(index), *inner)
    if len(index) == 1:
        dst.copy_(pool[index[0] : index[0] + 1])
    elif dst.device.type == "cpu":
        torch.index_select(pool, 0, torch.tensor(index), out=dst)
    else:
        dst.copy_(pool.index_select(0, torch.tensor(index)))
    return dst.view(*lead, *inner)


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
    PARAMS = {
        "rows": 300,
        "batch_sizes": [1, 2, 4, 16, 300],
        "max_seeds": 1,
        "lead_3d": True,
        "misaligned": True,
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

    def skip_reason(self) -> str | None:
        op = self.ctx.op
        if not any(op.is_row_wise(i) for i in op.inputs) or not op.lead:
            return f"op {op.name} has no row-wise inputs"
        return super().skip_reason()

    def _results(self, dev: dict, upstream: list, lead: tuple[int, ...]):
        """Row-wise results of a call on ``dev`` (fresh device inputs), as ``[rows, ...]``
        on the CPU."""
        raise NotImplementedError

    def pool_rows(self) -> int:
        """R: the ``rows`` parameter (at least the largest batch size), within POOL_BYTES."""
        sizes = [int(n) for n in self.params["batch_sizes"]]
        want = max([int(self.params["rows"]), *sizes])
        ctx, op = self.ctx, self.ctx.op
        per_row = 0
        for spec in op.inputs:
            if op.is_row_wise(spec):
                inner = [ctx.sizes[d] for d in spec.shape[len(op.lead) :] if d in ctx.sizes]
                per_row += 8 * math.prod(inner)
        return max(1, min(want, POOL_BYTES // max(1, per_row)))

    def observe(self, trial: Trial) -> None:
        ctx, op = self.ctx, self.ctx.op
        rows = self.pool_rows()
        pool, pool_up = ctx.pool(trial.seed, trial.distribution, rows)
        row_wise = {i.name: op.is_row_wise(i) for i in op.inputs}
        gen = torch.Generator().manual_seed(trial.seed * 7919 + rows)

        def run(index: list[int], lead: tuple[int, ...], misalign: bool) -> list[torch.Tensor]:
            # fresh device inputs, so a candidate that writes them spoils nothing; only float
            # inputs are misaligned ("misalign" is about vector loads of the data)
            dev = {
                k: (
                    placed_rows(v, index, lead, ctx.device, misalign and v.is_floating_point())
                    if row_wise[k]
                    else v.to(ctx.device, copy=True)
                )
                for k, v in pool.items()
            }
            ups = [placed_rows(u, index, lead, "cpu", False) for u in pool_up]
            return self._results(dev, ups, lead)

        # alone: the reference bits of every row
        self.progress("alone (batch 1)")
        alone = [run([r], (1,), False) for r in range(rows)]
        # each row's bits alone, as 32-bit row digests (a single changed element always
        # shows); the rows themselves stay for the first difference's message
        digests = [torch.cat([row_digests(a[k]) for a in alone]) for k in range(len(alone[0]))]
        reference = (alone, digests)
        self.distinct += rows

        small = [int(n) for n in self.params["batch_sizes"] if 1 < int(n) < rows] or [2]
        misalign = bool(self.params["misaligned"])
        order = torch.randperm(rows, generator=gen).tolist()
        label = f"batches of {'/'.join(map(str, small))}" + (" misaligned" if misalign else "")
        self.progress(label)
        for batch in deal(order, small):
            self._compare(trial, label, batch, run(batch, (len(batch),), misalign), reference)

        order = torch.randperm(rows, generator=gen).tolist()
        shape_label, lead = lead_layouts(rows, bool(self.params["lead_3d"]))[-1]
        label = f"one batch of {rows} ({shape_label})"
        self.progress(label)
        self._compare(trial, label, order, run(order, lead, False), reference)

    def _compare(self, trial, label, index, results, reference) -> None:
        """Count the rows of one batch whose bits differ from the same rows alone."""
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
            self.first_trial = trial
            self.first_dist = row_distribution(trial.distribution, row)
            self.first = (
                f"{label}, position {pos} of {len(index)} (pool row {row}): "
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
    summary = "a row's output bits do not depend on batch size, position, lead shape or alignment"

    def _results(self, dev, upstream, lead):
        outs = self.ctx.call(dev)
        return [o.detach().cpu().reshape(-1, *o.shape[len(lead) :]) for o in outs]


class BackwardInvariance(_Invariance):
    name = "backward_invariance"
    needs_grad = True
    summary = "identical (inputs, upstream grad) rows get bit-identical gradient rows anywhere"

    def _results(self, dev, upstream, lead):
        _, grads = self.ctx.call_backward(dev, upstream)
        op = self.ctx.op
        return [
            g.cpu().reshape(-1, *g.shape[len(lead) :])
            for n, g in grads.items()
            if op.is_row_wise(op.input(n))
        ]
