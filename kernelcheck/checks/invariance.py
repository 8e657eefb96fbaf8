"""``forward_invariance`` and ``backward_invariance``: bitwise batch invariance.

A few fixed rows are run alone (batch 1), then embedded in batches of other sizes, at
the first, middle and last position; at one batch size (``variants_at``) also with a
3-D lead shape and at a storage offset of one element (so every row starts misaligned).
Each embedded row must give exactly the bits it gave alone: a kernel whose reduction
order depends on N, on the block that took the row, or on the row's address alignment
fails here.
"""

from __future__ import annotations

import torch

from kernelcheck.cases.inputs import parts_of, row_distribution
from kernelcheck.checks.base import Check, Outcome, Trial
from kernelcheck.checks.metrics import first_bit_difference, row_mismatches


def lead_layouts(n: int, lead_3d: bool) -> list[tuple[str, tuple[int, ...]]]:
    """2-D ``(n,)`` and, when n factors, 3-D ``(b, n // b)`` with the smallest b >= 2."""
    layouts = [("2-D", (n,))]
    if lead_3d:
        b = next((b for b in range(2, n) if n % b == 0), None)
        if b is not None:
            layouts.append(("3-D", (b, n // b)))
    return layouts


def misaligned_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy whose data pointer sits one element past an allocation."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


class _Invariance(Check):
    PARAMS = {
        "batch_sizes": [1, 2, 4, 16, 300],
        "fixed_rows": 2,
        "max_seeds": 1,
        "lead_3d": True,
        "misaligned": True,
        "variants_at": 16,
    }

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.compared = 0
        self.mismatched = 0
        self.first: str | None = None
        self.first_trial: Trial | None = None
        self.first_dist: str | None = None
        self.layouts_run: set[str] = set()

    def skip_reason(self) -> str | None:
        op = self.ctx.op
        if not any(op.is_row_wise(i) for i in op.inputs) or not op.lead:
            return f"op {op.name} has no row-wise inputs"
        return super().skip_reason()

    def _results(self, inputs: dict, upstream: list, lead: tuple[int, ...]) -> list[torch.Tensor]:
        """Row-wise results, flattened to ``[rows, ...]``, on the CPU."""
        raise NotImplementedError

    def observe(self, trial: Trial) -> None:
        ctx, op = self.ctx, self.ctx.op
        # a mixed trial draws row f from its f-th distribution: one fixed row for each
        nfix = max(1, int(self.params["fixed_rows"]), len(parts_of(trial.distribution)))
        fixed = ctx.draw(trial.seed, trial.distribution, lead=(nfix,), salt="fixed")
        fixed_up = ctx.upstream(trial.seed, lead=(nfix,), salt="fixed")
        row_wise = {i.name: op.is_row_wise(i) for i in op.inputs}

        def rows_of(tensors: dict, ups: list, index: list[int]):
            sub = {n: (t[index] if row_wise[n] else t) for n, t in tensors.items()}
            return sub, [u[index] for u in ups]

        canonical = []
        for f in range(nfix):
            sub, ups = rows_of(fixed, fixed_up, [f])
            canonical.append([r[0] for r in self._results(sub, ups, (1,))])

        sizes = [int(n) for n in self.params["batch_sizes"] if int(n) >= 1]
        most = max(sizes, default=1)
        # One pool of filler rows serves every batch size: the biggest draw dominates anyway.
        pool = ctx.draw(trial.seed, trial.distribution, lead=(most,), salt="fill")
        pool_up = ctx.upstream(trial.seed, lead=(most,), salt="fill")
        for n in sizes:
            filler = {k: (v[:n] if row_wise[k] else v) for k, v in pool.items()}
            filler_up = [u[:n] for u in pool_up]
            positions = sorted({0, n // 2, n - 1})
            batch = {k: (v.clone() if row_wise[k] else fixed[k]) for k, v in filler.items()}
            ups = [u.clone() for u in filler_up]
            owner = {}
            for j, pos in enumerate(positions):
                f = j % nfix
                owner[pos] = f
                for k in batch:
                    if row_wise[k]:
                        batch[k][pos] = fixed[k][f]
                for u, fu in zip(ups, fixed_up):
                    u[pos] = fu[f]
            variants = [
                (label, lead, False) for label, lead in lead_layouts(n, self.params["lead_3d"])
            ]
            if self.params["misaligned"]:
                variants.append(("2-D misaligned", (n,), True))
            for label, lead, misalign in variants:
                self.layouts_run.add(label)
                shaped = {
                    k: (v.reshape(*lead, *v.shape[1:]) if row_wise[k] else v)
                    for k, v in batch.items()
                }
                shaped_up = [u.reshape(*lead, *u.shape[1:]) for u in ups]
                results = self._results(shaped, shaped_up, lead, misalign=misalign)
                for pos, f in owner.items():
                    for got, want in zip(results, canonical[f]):
                        self.compared += 1
                        if bool(row_mismatches(got[pos : pos + 1], want.unsqueeze(0))[0]):
                            self.mismatched += 1
                            if self.first is None:
                                self.first_trial = trial
                                self.first_dist = row_distribution(trial.distribution, f)
                                self.first = (
                                    f"batch {n} ({label}) row {pos}: "
                                    f"{first_bit_difference(got[pos], want)} vs batch 1"
                                )

    def outcome(self) -> Outcome:
        metrics = {"compared_rows": self.compared, "mismatched_rows": self.mismatched}
        tol = {"mode": "bitwise"}
        if self.mismatched:
            t = self.first_trial
            msg = (
                f"{self.mismatched} of {self.compared} rows differ in bits from the same row "
                "alone; "
                f"first: {self.first} [seed {t.seed}, {self.first_dist}]"
            )
            return Outcome("fail", msg, metrics, tol, t.seed, self.first_dist)
        return Outcome("pass", "", metrics, tol)


class ForwardInvariance(_Invariance):
    name = "forward_invariance"
    summary = "a row's output bits do not depend on batch size, position, lead shape or alignment"

    def _results(self, inputs, upstream, lead, misalign=False):
        dev = self.ctx.to_device(inputs)
        if misalign:
            dev = {k: (misaligned_copy(v) if v.is_floating_point() else v) for k, v in dev.items()}
        outs = self.ctx.call(dev)
        return [o.detach().cpu().reshape(-1, *o.shape[len(lead) :]) for o in outs]


class BackwardInvariance(_Invariance):
    name = "backward_invariance"
    needs_grad = True
    summary = "identical (inputs, upstream grad) rows get bit-identical gradient rows anywhere"

    def _results(self, inputs, upstream, lead, misalign=False):
        dev = self.ctx.to_device(inputs)
        if misalign:
            dev = {k: (misaligned_copy(v) if v.is_floating_point() else v) for k, v in dev.items()}
        _, grads = self.ctx.call_backward(dev, upstream)
        op = self.ctx.op
        return [
            g.cpu().reshape(-1, *g.shape[len(lead) :])
            for n, g in grads.items()
            if op.is_row_wise(op.input(n))
        ]
