"""Evaluate an op's gold in float64, in row chunks so its extra memory stays bounded.

The gold sees exactly the values the candidate saw: the already-rounded inputs, upcast
to float64 (exact for fp32, bf16 and fp16). Only row-wise inputs are chunked; shared
inputs (a norm weight, say) go whole to every chunk and their gradients are summed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from kernelcheck.spec.model import OpSpec

CHUNK_BYTES = 256 * 2**20
# float64 working set per input byte: the upcast copy plus autograd's saved tensors.
_WORKING_SET = 4


def _flat_rows(op: OpSpec, inputs: dict[str, torch.Tensor], nlead: int):
    row_wise = {s.name: op.is_row_wise(s) for s in op.inputs}
    nrows = None
    flat = {}
    for name, t in inputs.items():
        if row_wise[name]:
            nrows = math.prod(t.shape[:nlead])
            flat[name] = t.reshape(nrows, *t.shape[nlead:])
        else:
            flat[name] = t
    return flat, row_wise, nrows or 0


def _chunk_rows(flat: dict, row_wise: dict, nrows: int, chunk_bytes: int) -> int:
    per_row = sum(
        8 * math.prod(t.shape[1:])
        for name, t in flat.items()
        if row_wise[name] and t.is_floating_point()
    )
    return max(1, min(max(nrows, 1), chunk_bytes // max(1, per_row * _WORKING_SET)))


def _as_list(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _upcast(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64) if t.is_floating_point() else t


def forward(
    op: OpSpec,
    gold_fn: Callable,
    inputs: dict[str, torch.Tensor],
    lead: tuple[int, ...],
    chunk_bytes: int = CHUNK_BYTES,
) -> list[torch.Tensor]:
    """Gold outputs in float64 on the CPU, shaped like the candidate's outputs."""
    flat, row_wise, nrows = _flat_rows(op, inputs, len(lead))
    step = _chunk_rows(flat, row_wise, nrows, chunk_bytes)
    pieces: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for start in range(0, max(nrows, 1), step):
            args = {
                n: _upcast(t[start : start + step] if row_wise[n] else t) for n, t in flat.items()
            }
            pieces.append([o.cpu() for o in _as_list(gold_fn(**args))])
            if nrows == 0:
                break
    outs = [torch.cat([p[i] for p in pieces]) for i in range(len(pieces[0]))]
    return [o.reshape(*lead, *o.shape[1:]) for o in outs]


def backward_chunks(
    op: OpSpec,
    gold_fn: Callable,
    inputs: dict[str, torch.Tensor],
    upstream: list[torch.Tensor],
    lead: tuple[int, ...],
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[tuple[slice | None, dict[str, torch.Tensor]]]:
    """Yield ``(row slice, {input: float64 gradient rows})`` chunk by chunk.

    Gradients of shared inputs are summed over all chunks and yielded last with slice None.
    """
    flat, row_wise, nrows = _flat_rows(op, inputs, len(lead))
    ups = [u.reshape(nrows, *u.shape[len(lead) :]).to(torch.float64) for u in upstream]
    step = _chunk_rows(flat, row_wise, nrows, chunk_bytes)
    shared: dict[str, torch.Tensor] = {}
    for start in range(0, nrows, step):
        sl = slice(start, start + step)
        args = {n: _upcast(t[sl] if row_wise[n] else t).detach() for n, t in flat.items()}
        wrt = [n for n in op.grad_inputs]
        for n in wrt:
            args[n].requires_grad_(True)
        outs = _as_list(gold_fn(**args))
        grads = torch.autograd.grad(
            outs, [args[n] for n in wrt], [u[sl] for u in ups], allow_unused=True
        )
        rows_out = {}
        for n, g in zip(wrt, grads):
            g = torch.zeros_like(args[n]) if g is None else g.detach()
            if row_wise[n]:
                rows_out[n] = g
            else:
                shared[n] = shared.get(n, 0) + g
        yield sl, rows_out
    if shared:
        yield None, shared
