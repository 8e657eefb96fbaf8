"""A tensor as rows, a row's index as the user reads it, and rows placed into a batch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelcheck.checks.metrics import unravel


def flat_rows(t: torch.Tensor, nlead: int) -> torch.Tensor:
    """``[*lead, *inner]`` -> ``[rows, *inner]``."""
    return t.reshape(math.prod(t.shape[:nlead]), *t.shape[nlead:])


def fmt_index(row: int, rest: tuple, lead: tuple[int, ...]) -> str:
    return str(list(unravel(row, lead) + tuple(rest)))


def placed_rows(
    pool: torch.Tensor, index: list[int], lead: tuple[int, ...], device, offset: int = 0
) -> torch.Tensor:
    """Rows ``index`` of ``pool`` as a fresh contiguous ``[*lead, ...]`` tensor on ``device``,
    its storage starting ``offset`` elements past an allocation. One copy: the rows are
    gathered straight into place on the CPU (host-side, then one transfer, elsewhere)."""
    inner = tuple(pool.shape[1:])
    buf = torch.empty(math.prod((*lead, *inner)) + offset, dtype=pool.dtype, device=device)
    if offset and pool.is_floating_point():  # a read before the rows reads NaN
        buf[:offset].fill_(float("nan"))
    dst = buf[offset:].view(len(index), *inner)
    if len(index) == 1:
        dst.copy_(pool[index[0] : index[0] + 1])
    elif dst.device.type == "cpu":
        torch.index_select(pool, 0, torch.tensor(index), out=dst)
    else:
        dst.copy_(pool.index_select(0, torch.tensor(index)))
    return dst.view(*lead, *inner)


def shifted_rows(
    pool: torch.Tensor, index: list[int], lead: tuple[int, ...], device
) -> torch.Tensor:
    """Rows ``index`` of ``pool`` as ``[*lead, ...]`` (two lead dims: sequences of
    ``lead[1]`` rows), a view ``[:, :-1]`` of a buffer one position longer in each
    sequence, as RL's ``logits[:, :-1]`` and a static cache's ``buf[:, :S]`` are: rows one
    pitch apart within a sequence and a pitch more between sequences, so no one pitch
    walks them from the first. The position past each sequence holds NaN (floats), else
    a copy of its first row."""
    seqs, length = lead
    longer = [i for k in range(seqs) for i in (*index[k * length : (k + 1) * length], index[0])]
    buf = placed_rows(pool, longer, (seqs, length + 1), device)
    if buf.is_floating_point():
        buf[:, -1] = float("nan")
    return buf[:, :-1]


@dataclass(frozen=True)
class RowSelection:
    """The rows of a mixed trial that a check judges: a trial deals its rows round-robin
    from ``period`` distributions, and the judged ones sit at ``kept`` in each period.
    Judged rows are compacted (their statistics count them alone); :meth:`original`
    names a compacted row by its place in the trial, as the user reads it."""

    period: int
    kept: tuple[int, ...]

    def local(self, start: int, stop: int) -> torch.Tensor:
        """The judged rows of ``[start, stop)``, counted from ``start``."""
        rows = torch.arange(start, stop)
        keep = torch.zeros(self.period, dtype=torch.bool)
        keep[list(self.kept)] = True
        return (rows - start)[keep[rows % self.period]]

    def compact(self, row: int) -> int:
        """How many judged rows come before trial row ``row``."""
        whole, part = divmod(row, self.period)
        return whole * len(self.kept) + sum(1 for k in self.kept if k < part)

    def original(self, compact: int) -> int:
        """The trial row of compacted row ``compact``."""
        whole, k = divmod(compact, len(self.kept))
        return whole * self.period + self.kept[k]


def row_selection(parts: list[str], only: tuple[str, ...]) -> RowSelection | None:
    """The rows of ``parts``' distributions in ``only`` (None: every row is judged). An
    ``only`` naming none of ``parts`` judges every row: never a check that judges none."""
    kept = tuple(k for k, p in enumerate(parts) if p in only)
    if not kept or len(kept) == len(parts):
        return None
    return RowSelection(len(parts), kept)
