"""Stage 2b: seeded inputs, drawn on the CPU and only then moved to the device.

One seed gives the same values on cpu, cuda and npu: every tensor is drawn from a CPU
``torch.Generator`` seeded from (seed, distribution, input), in float64, then rounded
once to the case dtype. The gold later upcasts exactly those rounded values.
"""

from __future__ import annotations

import math
import zlib

import torch

from kernelcheck import dtypes
from kernelcheck.spec.model import InputSpec, OpSpec

MASKED_FRACTION = 0.3
INDEX_IGNORED = -100

# Each distribution targets a class of bug. Their parameters keep |output| small enough
# that an fp32 output can meet the fp32 contract (atol 1e-5 needs |logp| < ~64).
DISTRIBUTIONS = {
    "normal": "standard normal",
    "large": "rows offset by +-1e4 (fp16: +-6e4, near its max) beyond exp's fp32 range: "
    "catches a missing max subtraction",
    "masked": "30% of entries -inf (RL vocab masking), never the target",
    "equal": "all entries of a row equal: catches off-by-one sums and bad tie handling",
    "heavy": "Student-t (2 dof), clipped to +-20: rare large entries dominate the sum",
}


def _generator(seed: int, *salt: str) -> torch.Generator:
    key = zlib.crc32("/".join(salt).encode())
    return torch.Generator().manual_seed((seed * 1_000_003 + key) % (2**63))


def draw_float(rows: int, inner: tuple[int, ...], dist: str, dtype: str, gen: torch.Generator):
    """``rows x inner`` values of a distribution, rounded once to ``dtype`` (CPU)."""
    shape = (rows, *inner)
    tdt = dtypes.torch_dtype(dtype)
    if dist in ("normal", "masked"):
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif dist == "large":
        offset, spread = {"fp32": (1e4, 3.0), "bf16": (1e4, 200.0), "fp16": (6.0e4, 600.0)}[dtype]
        sign = torch.randint(0, 2, (rows,), generator=gen).to(torch.float64) * 2 - 1
        noise = torch.randn(shape, generator=gen, dtype=torch.float64) * spread
        x = sign.view(rows, *([1] * len(inner))) * offset + noise
        limit = torch.finfo(tdt).max
        x = x.clamp(-limit, limit)
    elif dist == "equal":
        c = torch.randn((rows,), generator=gen, dtype=torch.float64) * 4
        x = c.view(rows, *([1] * len(inner))).expand(shape).clone()
    elif dist == "heavy":
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        u = torch.rand(shape, generator=gen, dtype=torch.float64).clamp_min(1e-300)
        x = (z / torch.sqrt(-torch.log(u))).clamp(-20, 20)
    else:
        raise ValueError(f"unknown distribution {dist!r}; valid: {', '.join(DISTRIBUTIONS)}")
    return x.to(tdt)


def inner_shape(op: OpSpec, spec: InputSpec, sizes: dict[str, int]) -> tuple[int, ...]:
    dims = spec.shape[len(op.lead) :] if op.is_row_wise(spec) else spec.shape
    return tuple(sizes[d] for d in dims if d in sizes)


def make_inputs(
    op: OpSpec,
    sizes: dict[str, int],
    dtype: str,
    seed: int,
    dist: str,
    lead: tuple[int, ...] | None = None,
    salt: str = "",
) -> dict[str, torch.Tensor]:
    """All inputs of ``op`` for one trial, on the CPU.

    ``lead`` overrides the lead shape (the invariance checks build their own batches);
    ``salt`` gives an independent draw with the same parameters (filler rows).
    """
    from kernelcheck.cases.grid import lead_shape

    lead = lead_shape(op, sizes) if lead is None else lead
    nrows = math.prod(lead)
    out: dict[str, torch.Tensor] = {}
    for spec in op.inputs:
        gen = _generator(seed, dist, spec.name, salt)
        inner = inner_shape(op, spec, sizes)
        row_wise = op.is_row_wise(spec)
        n = nrows if row_wise else 1
        if spec.values == "index":
            bound = sizes[spec.index_of]
            t = torch.randint(0, bound, (n, *inner), generator=gen, dtype=torch.int64)
            if spec.out_of_range_fraction:
                drop = torch.rand((n, *inner), generator=gen) < spec.out_of_range_fraction
                t[drop] = INDEX_IGNORED
            if spec.dtype != "case":
                t = t.to(dtypes.FIXED_DTYPES[spec.dtype])
        else:
            case_dtype = dtype if spec.dtype == "case" else dtypes.canonical(spec.dtype) or dtype
            t = draw_float(n, inner, dist, case_dtype, gen)
        out[spec.name] = t.reshape(*lead, *inner) if row_wise else t.reshape(inner)
    if dist == "masked":
        _mask(op, out, seed, salt)
    return out


def _mask(op: OpSpec, tensors: dict[str, torch.Tensor], seed: int, salt: str) -> None:
    """Set a fraction of float entries to -inf, sparing entries an index input selects."""
    for spec in op.inputs:
        if spec.values != "case":
            continue
        x = tensors[spec.name]
        gen = _generator(seed, "mask", spec.name, salt)
        mask = torch.rand(x.shape, generator=gen) < MASKED_FRACTION
        mask[..., 0] = False  # never a fully masked row
        for idx in op.inputs:
            if idx.index_into == spec.name:
                t = tensors[idx.name]
                valid = (t >= 0) & (t < x.shape[-1])
                spare = torch.zeros_like(mask)
                spare.scatter_(-1, t.clamp(0, x.shape[-1] - 1).unsqueeze(-1), valid.unsqueeze(-1))
                mask &= ~spare
        x[mask] = float("-inf")


def make_upstream(shape: tuple[int, ...], dtype: torch.dtype, seed: int, salt: str = ""):
    """The upstream gradient for backward checks: standard normal, drawn on the CPU."""
    gen = _generator(seed, "upstream", salt)
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
