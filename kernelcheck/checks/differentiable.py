"""Calling a reference under autograd, whatever it does in place."""

from __future__ import annotations

from collections.abc import Callable

import torch


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def differentiable_call(fn: Callable, args: dict) -> list[torch.Tensor]:
    """``fn(**args)`` as a list of outputs, recorded for autograd with every saved tensor
    copied when saved: a reference that works in place on a tensor autograd saved (logp's
    flushed ``exp_`` for 16-bit logits thresholds exp's output in place) stays
    differentiable, with the gradient of what it computed."""
    with torch.autograd.graph.saved_tensors_hooks(_copy, _same):
        out = fn(**args)
    return list(out) if isinstance(out, (tuple, list)) else [out]
