"""A tensor as rows, and a row's index as the user reads it."""

from __future__ import annotations

import math

import torch

from kernelcheck.checks.metrics import unravel


def flat_rows(t: torch.Tensor, nlead: int) -> torch.Tensor:
    """``[*lead, *inner]`` -> ``[rows, *inner]``."""
    return t.reshape(math.prod(t.shape[:nlead]), *t.shape[nlead:])


def fmt_index(row: int, rest: tuple, lead: tuple[int, ...]) -> str:
    return str(list(unravel(row, lead) + tuple(rest)))
