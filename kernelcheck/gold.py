"""Evaluate an op's gold in float64, in row chunks so its extra memory stays bounded.

The gold sees exactly the values the candidate saw: the already-rounded inputs, upcast
to float64 (exact for fp32, bf16 and fp16). Only row-wise inputs are chunked; shared
inputs (a norm weight, say) go whole to every chunk and their gradients are summed.

One code path for every device: ``device`` says where the float64 arithmetic runs. On
CUDA that is the GPU (float64 is fine for a reduction there); the NPU has no usable
float64, so its gold stays on the host (``gold_device``). Results come back to the CPU.

Chunks are small (``CHUNK_BYTES`` of float64 per input) so that the temporaries of one
chunk stay in cache: the gold is a few cheap passes per element, not a few trips to
memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from kernelcheck.spec.model import OpSpec

CHUNK_BYTES = 8 * 2**20


def gold_device(case_device: str) -> torch.device:
    """Where the float64 gold runs for a case on ``case_device``: the GPU, else the host."""
    if case_device == "cuda" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


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
    per_row = max(
        [8 * math.prod(t.shape[1:]) for n, t in flat.items() if row_wise[n]] or [8],
    )
    return max(1, min(max(nrows, 1), chunk_bytes // max(1, per_row)))


def _as_list(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _upcast(t: torch.Tensor, device: torch.device, upcast: bool = True) -> torch.Tensor:
    t = t.to(device, non_blocking=True)
    return t.to(torch.float64) if upcast and t.is_floating_point() else t


def forward(
    op: OpSpec,
    gold_fn: Callable,
    inputs: dict[str, torch.Tensor],
    lead: tuple[int, ...],
    chunk_bytes: int = CHUNK_BYTES,
    device: torch.device | str = "cpu",
    upcast: bool = True,
) -> list[torch.Tensor]:
    """Gold outputs in float64 on the CPU, shaped like the candidate's outputs.

    ``upcast=False`` evaluates another row-wise function (the fp32 reference) on the
    inputs as they are, in the same bounded chunks.
    """
    device = torch.device(device)
    flat, row_wise, nrows = _flat_rows(op, inputs, len(lead))
    step = _chunk_rows(flat, row_wise, nrows, chunk_bytes)
    pieces: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for start in range(0, max(nrows, 1), step):
            args = {
                n: _upcast(t[start : start + step] if row_wise[n] else t, device, upcast)
                for n, t in flat.items()
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
    gold_backward: Callable | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    device: torch.device | str = "cpu",
    upcast: bool = True,
) -> Iterator[tuple[slice | None, dict[str, torch.Tensor]]]:
    """Yield ``(row slice, {input: float64 gradient rows})`` chunk by chunk, on the CPU.

    ``gold_backward(upstream, **inputs)``, when the op has one, gives the gradient
    analytically; otherwise it is autograd of the gold. Gradients of shared inputs are
    summed over all chunks and yielded last with slice None.

    ``upcast=False`` differentiates another row-wise function (the fp32 reference) on
    the inputs and upstream gradients as they are, in the very same chunks (same slices,
    same order), so its gradient can be compared chunk by chunk with the gold's. Its
    gradients come in the inputs' dtypes; a shared input's are summed in float64 and
    rounded to its dtype once at the end.
    """
    device = torch.device(device)
    flat, row_wise, nrows = _flat_rows(op, inputs, len(lead))
    ups = [u.reshape(nrows, *u.shape[len(lead) :]) for u in upstream]
    step = _chunk_rows(flat, row_wise, nrows, chunk_bytes)
    wrt = list(op.grad_inputs)
    shared: dict[str, torch.Tensor] = {}
    for start in range(0, nrows, step):
        sl = slice(start, start + step)
        args = {n: _upcast(t[sl] if row_wise[n] else t, device, upcast) for n, t in flat.items()}
        chunk_ups = [_upcast(u[sl], device, upcast) for u in ups]
        if gold_backward is not None:
            with torch.no_grad():
                found = gold_backward(chunk_ups, **args)
            grads = [found.get(n) for n in wrt]
        else:
            for n in wrt:
                args[n] = args[n].detach().requires_grad_(True)
            outs = _as_list(gold_fn(**args))
            grads = torch.autograd.grad(outs, [args[n] for n in wrt], chunk_ups, allow_unused=True)
        rows_out = {}
        for n, g in zip(wrt, grads):
            g = torch.zeros_like(args[n]) if g is None else g.detach()
            if row_wise[n]:
                rows_out[n] = g.cpu()
            else:
                shared[n] = shared.get(n, 0) + g.to(torch.float64)
        yield sl, rows_out
    if shared:
        yield None, {n: (g if upcast else g.to(flat[n].dtype)).cpu() for n, g in shared.items()}


def gathered(chunks: Iterator[tuple[slice | None, dict[str, torch.Tensor]]]) -> dict:
    """The gradients of :func:`backward_chunks` whole: a row-wise input's chunks joined
    (rows flattened), a shared input's as yielded once at the end."""
    parts: dict[str, list[torch.Tensor]] = {}
    for _, grads in chunks:
        for name, g in grads.items():
            parts.setdefault(name, []).append(g)
    return {name: torch.cat(gs) for name, gs in parts.items()}
