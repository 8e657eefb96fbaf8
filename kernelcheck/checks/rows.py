"""A tensor as rows, a row's index as the user reads it, and rows placed into a batch."""

from __future__ import annotations

import math

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
