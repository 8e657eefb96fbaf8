"""Stage 2b: seeded inputs, drawn on the CPU and only then moved to the device.

One seed gives the same values on cpu, cuda and npu and in every process: every float
tensor is drawn by :func:`draw_float` from CPU ``torch.Generator`` streams keyed by
(seed, distribution, input, salt), in float32, then rounded once to the case dtype. The
gold later upcasts exactly those rounded values. ``tests/cases/test_inputs.py`` pins the
generator's output.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from kernelcheck import dtypes
from kernelcheck.spec.model import InputSpec, OpSpec, eval_dim_expr

MASKED_FRACTION = 0.3
# an lm row's selected entry holds 1 - 10^-u of its softmax, u uniform in this range
CONFIDENT_LOG10_Q = (0.3, 3.0)
CONFIDENT_NEWTON_STEPS = 12  # from c = 0: ~40 nats to climb at most, quadratic near the root
CONFIDENT_MAX_C = 100.0  # a hidden row moved by at most 100 of its target's weight rows
# In a 16-bit case another lm row in four has its selected entry this many nats below the
# logsumexp, uniform: a probability subnormal in fp32 (e^-87.3 to e^-103.3). Its dtype
# rounds the logit by at most 0.25 there. Not in fp32 cases: there the contract's 1e-5 is
# 1.3 ulp of such a logp, which an honest kernel's roundings may exceed.
DEEP_NATS = (88.5, 102.5)
INDEX_IGNORED = -100
# A share of every index input's entries is set to edge columns (edge_columns), in
# order: a tiled kernel's bugs sit at a tile's first and last column and at the dim's
# last column, which uniform draws over a 151,936-entry vocab almost never select.
EDGE_INDEX_FRACTION = 0.25
# a trial's upstream gradient is exactly 0 on this share of its rows (at least one): the
# tokens a loss mask drops, whose gradient rows must come out 0, never unwritten
LOSS_MASK_FRACTION = 0.125
# In odd seeds most rows carry no loss, as an RL batch of long prompts and short responses
# has it: the loss mask drops this share of the allowed rows and a mask input is true on
# 1 - this share of rows. A kernel may take a compacted path when few rows are live
# (a backward that forgot the temperature there, a forward in another order).
SPARSE_DEAD_FRACTION = 15 / 16


def sparse_seed(seed: int) -> bool:
    """Whether trials of ``seed`` draw sparse loss masks and masks (odd seeds)."""
    return seed % 2 == 1


# Each distribution targets a class of bug. Their parameters keep |output| small enough
# that an fp32 output can meet the fp32 contract (atol 1e-5 needs |logp| < ~64).
DISTRIBUTIONS = {
    "normal": "standard normal",
    "large": "rows offset by +-1e4 (fp16: +-6e4, near its max) beyond exp's fp32 range: "
    "catches a missing max subtraction",
    "masked": "30% of entries masked (RL vocab masking) with -inf, or in every other row with "
    "the dtype's lowest finite value (HF's masked_fill), in a third of the rows half the row in "
    "one run (the first columns, a padded vocab's tail), never the target; a related input "
    "(a reference model's logits) finite at the base's -inf columns in rows 2 and 3 of every 4",
    "equal": "all entries of a row equal: catches off-by-one sums and bad tie handling",
    "heavy": "Student-t (2 dof), clipped to +-20: rare large entries dominate the sum",
    "lm": "LM-like logits: std 4-8 per row and a peaked head of 8 tokens near the tail's top; "
    "catches a lossy fp32 sum at real logit scales. In every other row the selected entry "
    "(an index input's) holds 50% to 99.9% of the softmax, as an RL rollout's own sampled "
    "token mostly does: its gradient g (1 - p) cancels there; in 16-bit cases one in four "
    "of the others holds e^-88.5 to e^-102.5 (subnormal in fp32)",
    "zero_rows": "every 4th row all zeros (padding), the rest standard normal: a norm "
    "without eps gives NaN there",
    "tiny_rows": "every 4th row scaled to about 1e-18 (fp16: 1e-4), the rest standard normal: "
    "where eps dominates a norm's mean square",
    "drifted": "standard normal; a related input (a reference model's logits) drifts 2 to 8 "
    "nats per entry from it (by row) instead of its spec's perturbation: KL estimates past "
    "10 nats in most rows, where a clamp (verl's low_var_kl at +-10) or a cut-off acts; "
    "its rows also sit 90 to 120 nats above or below the base's (in turn), an offset a "
    "softmax ignores and a kernel sharing one row max between the two does not",
    "spikes": "standard normal with one entry in 64 of each row (at least one) an outlier of "
    "+-100 to 200 at the same columns in every input of a shape: LLM activations' outlier "
    "channels, where an exp(x) overflows fp32 (past 88.7)",
    "bands": "each row at one level: normal of std 0.5 about an offset of +-1 to 64 (log-uniform, "
    "by row), so whole vectors sit in one regime of a nonlinearity (silu's tail, where fp32's "
    "sigmoid is still below 1 up to 17): a vector's early-out when all its lanes pass a "
    "threshold acts there, which scattered large values never trigger",
    "peaked": "a converged policy's rows: one entry (at a random column) holding all but q of the "
    "softmax, q from 1e-7 to 1e-2 (log-uniform), over a flat normal tail of std 0.05 to 2 "
    "(log-uniform): whole tiles then sit 20+ nats below the row's max yet hold mass, where a "
    "kernel that skips a tile as negligible drops what a logsumexp sums and an entropy weighs. "
    "In every other such row an index input selects the top entry (a converged policy's "
    "sampled token)",
    "edges": "normal rows of std 4 (a logit's scale) whose 128 largest |entries| sit at the "
    "row's ends, the largest in the last column, the next in the first, and so on inwards: "
    "a vector body's head (alignment peel) and tail, handled apart, hold the row's mass "
    "(shape_sweep draws it at every swept size)",
}
EDGE_ENTRIES = 128  # an edges row's largest entries, placed at its ends
# an edges row's std: its largest entries distinct (heavy's clip at 20 would tie them, and
# exp(0) = 1 rounds exactly in any dtype) and holding most of a softmax's mass
EDGE_STD = 4.0
TINY_SCALE = {"fp32": 1e-18, "bf16": 1e-18, "fp16": 1e-4}
# a weight of this many entries or more has one exactly 0 (at a third of its length): a
# backward that recovers x_hat as y / weight (a "memory-efficient" norm) divides by it
ZERO_WEIGHT_FROM = 4
BAND_OFFSETS = (1.0, 64.0)  # a bands row's |offset|, log-uniform by row
BAND_STD = 0.5  # a bands row's spread about its offset: 32 lanes stay within +-2
# a peaked row's top entry holds p = 1 - 10^-u, u uniform: from 1e-2 to 1e-7, where a
# Qwen3 row's tiles sit from within 20 nats of its max to all 20+ nats below it
PEAKED_LOG10_Q = (2.0, 7.0)
# a peaked row's tail std, log-uniform by row: the flatter a tail, the more mass its tiles
# hold at a given depth below the max (std 0.05: all of it; std 2: a few entries' worth)
PEAKED_TAIL_STD = (0.05, 2.0)
SPIKE_EVERY = 64  # one outlier column in 64; its place moves with the row
SPIKE_RANGE = (100.0, 200.0)  # past exp's fp32 range; a product of two stays below fp16's max
DRIFT_RANGE = (2.0, 8.0)  # a drifted row's perturbation std, uniform by row
# a drifted row's related input also sits this far from its base row, above and below in
# turn (uniform by row): a reference model's logits need not share the policy's row
# offset, which a softmax ignores, and a kernel that shifts both rows by one max
# overflows past 88.7 nats (or underflows below -87)
DRIFT_OFFSET = (90.0, 120.0)
LM_LOGP_FLOOR = 60.0  # the lm tail is clipped at logsumexp - 60: |logp| < 64 (fp32 contract)
# values = "logp": an old policy's log-probability of each selected token, the current
# policy's (its drawn logits') give or take a PPO step (OLD_LOGP_STEP nats, ratio ~1; never
# above 0, so at a near-certain token the step only lowers it: ratio >= 1 there);
# one row in STALE_EVERY (at least one per trial of 2+) STALE_NATS lower, a token the old
# policy had all but ruled out (stale or off-policy data): log-ratios past +20, where a
# clamp (verl's +-20) acts. Only at targets of p <= e^-STALE_FROM (a confident target's
# gradient term c (1 - p_t) cancels: an honest fp32 kernel errs c * 2^-24 there, 1e2 at
# c = e^30) and |logp| <= STALE_TO (an fp32 logp's ulp there is 4e-6, a fifth of the
# ratio's contract). 16-bit cases go 4 to 8 nats deep: fp16 holds c * p_j below 65504 only.
OLD_LOGP_STEP = 0.2
STALE_EVERY = 8
STALE_NATS = {"fp32": (20.0, 40.0), "bf16": (20.0, 40.0), "fp16": (4.0, 8.0)}
STALE_FROM, STALE_TO = 0.05, 30.0


MIX = "+"


def parts_of(dist: str) -> list[str]:
    """``"normal+large"`` -> ["normal", "large"]: a mixed trial deals rows round-robin."""
    return dist.split(MIX)


def first_rows(dist: str, rows: int) -> torch.Tensor:
    """Each distribution's first row of a trial of ``dist`` (``[rows]``, row r drawn from
    part r mod the parts): judged in full, its selected entry in range and its upstream
    gradient live, as the only row a distribution may have."""
    return torch.arange(rows) < len(parts_of(dist))


def selected_hazard_rows(dist: str, rows: int) -> torch.Tensor:
    """The rows of a trial of ``dist`` whose selected entry their distribution may set (the
    :func:`_set_rows` of each `lm` or `peaked` part: a confident token, a top token), where
    the hazard shows in the backward (g (1 - p) cancelling, a tail's mass that a skip
    drops): a zero upstream there leaves it unjudged. By distribution alone, so a superset
    where an op has no index input (entropy) or its draw sets none (linear_logp's fp32 lm
    rows): those rows only keep a live upstream."""
    parts = parts_of(dist)
    out = torch.zeros(rows, dtype=torch.bool)
    for k, part in enumerate(parts):
        if part in ("lm", "peaked"):
            _set_rows(out[k :: len(parts)]).fill_(True)
    return out


def _set_rows(part_rows: torch.Tensor) -> torch.Tensor:
    """The rows of one part (a view) whose selected entry an `lm` or `peaked` draw sets:
    every other row, its first included. The one home of that rule, for the draw and for
    :func:`selected_hazard_rows`."""
    return part_rows[::2]


def _unset_rows(part_rows: torch.Tensor) -> torch.Tensor:
    """The rows of one part that :func:`_set_rows` leaves out: a second rule of the draw
    (an lm part's deep targets) takes its rows from these, never overwriting the first's."""
    return part_rows[1::2]


def is_distribution(name: str) -> bool:
    return bool(name) and all(p in DISTRIBUTIONS for p in parts_of(name))


def row_distribution(dist: str, row: int) -> str:
    """The distribution that row ``row`` (of the flattened lead) was drawn from."""
    parts = parts_of(dist)
    return parts[row % len(parts)]


def _key(seed: int, *salt: str) -> int:
    """The 63-bit seed of one stream: (seed, distribution, input, salt, part)."""
    return (seed * 1_000_003 + zlib.crc32("/".join(salt).encode())) % (2**63)


def _generator(seed: int, *salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(_key(seed, *salt))


DRAW_CHUNK_ELEMENTS = 1 << 20  # one chunk of one stream: its own generator, 4 MiB of fp32
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max(1, min(8, torch.get_num_threads())))
    return _POOL


def draw_float(
    rows: int,
    inner: tuple[int, ...],
    dist: str,
    dtype: str,
    key: int,
    out: torch.Tensor | None = None,
):
    """``rows x inner`` values of a distribution, rounded once to ``dtype`` (CPU), written
    into ``out`` (``rows x inner`` of that dtype, rows may be strided) when given.

    The generator: fixed chunks of whole rows (about DRAW_CHUNK_ELEMENTS each), chunk c
    drawn by ``torch.Generator().manual_seed(hash(key, c))`` in float32 and rounded to
    ``dtype``. The chunking depends on the shape alone, so the values are the same in
    every process and on every machine whatever the thread count; chunks are drawn by
    a thread pool (torch releases the GIL), which makes the draw several times faster
    than one float64 stream.
    """
    tdt = dtypes.torch_dtype(dtype)
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if out is None:
        out = torch.empty((rows, *inner), dtype=tdt)
    elif out.dtype != tdt or tuple(out.shape) != (rows, *inner):
        raise ValueError(f"out is {out.dtype} {tuple(out.shape)}, not {tdt} {(rows, *inner)}")
    step = max(1, DRAW_CHUNK_ELEMENTS // max(1, math.prod(inner)))

    def fill(c: int) -> None:
        start = c * step
        n = min(step, rows - start)
        gen = torch.Generator().manual_seed((key * 0x9E3779B1 + c) % (2**63))
        out[start : start + n] = _draw_rows(n, inner, dist, dtype, gen)

    chunks = range((rows + step - 1) // step)
    if len(chunks) > 1:
        list(_pool().map(fill, chunks))
    elif rows:
        fill(0)
    return out


def _draw_rows(rows: int, inner: tuple[int, ...], dist: str, dtype: str, gen: torch.Generator):
    shape = (rows, *inner)
    per_row = (rows, *([1] * len(inner)))
    f32 = torch.float32
    if dist in ("normal", "masked", "drifted"):
        return torch.randn(shape, generator=gen, dtype=f32)
    if dist == "large":
        offset, spread = {"fp32": (1e4, 3.0), "bf16": (1e4, 200.0), "fp16": (6.0e4, 600.0)}[dtype]
        sign = torch.randint(0, 2, (rows,), generator=gen).to(f32) * 2 - 1
        x = torch.randn(shape, generator=gen, dtype=f32).mul_(spread)
        x.add_(sign.view(per_row) * offset)
        limit = torch.finfo(dtypes.torch_dtype(dtype)).max
        return x.clamp_(-limit, limit)
    if dist == "equal":
        c = torch.randn((rows,), generator=gen, dtype=f32) * 4
        return c.view(per_row).expand(shape)
    if dist == "lm":
        return _lm_rows(rows, inner, gen)
    if dist == "spikes":
        return _spike_rows(rows, inner, gen)
    if dist == "peaked":
        return _peaked_rows(rows, inner, gen)
    if dist == "bands":
        low, high = BAND_OFFSETS
        size = torch.rand((rows,), generator=gen, dtype=f32).mul_(math.log(high / low)).exp_()
        sign = torch.randint(0, 2, (rows,), generator=gen).to(f32) * 2 - 1
        offset = (sign * size * low).view(per_row)
        return torch.randn(shape, generator=gen, dtype=f32).mul_(BAND_STD).add_(offset)
    if dist == "edges":
        x = torch.randn(shape, generator=gen, dtype=f32).mul_(EDGE_STD)
        return _edge_rows(x, rows, inner)
    if dist in ("zero_rows", "tiny_rows"):
        x = torch.randn(shape, generator=gen, dtype=f32)
        scale = 0.0 if dist == "zero_rows" else TINY_SCALE[dtype]
        x[::4] *= scale  # rows 0, 4, 8, ... of each chunk: every trial of 1+ rows has one
        return x
    # heavy: Student-t with 2 degrees of freedom, z / sqrt(chi2_2 / 2), chi2_2 = -2 log u
    z = torch.randn(shape, generator=gen, dtype=f32)
    u = torch.rand(shape, generator=gen, dtype=f32).clamp_min_(1e-30)
    return z.div_(u.log_().neg_().sqrt_()).clamp_(-20, 20)


def _edge_rows(x: torch.Tensor, rows: int, inner: tuple[int, ...]) -> torch.Tensor:
    """``x``'s rows with their EDGE_ENTRIES largest |entries| moved to the ends, in
    turn the last column, the first, the one before the last, the second, ...; the
    other entries keep their order between."""
    width = math.prod(inner)
    flat = x.reshape(rows, width)
    k = min(EDGE_ENTRIES, width)
    if not rows or not k:
        return x
    top = flat.abs().topk(k, dim=1).indices  # largest first
    rank = torch.arange(k)
    ends = torch.where(rank % 2 == 0, width - 1 - rank // 2, rank // 2)
    middle = torch.ones(width, dtype=torch.bool)
    middle[ends] = False
    rest = torch.ones_like(flat, dtype=torch.bool).scatter_(1, top, False)
    out = torch.empty_like(flat)
    out[:, ends] = flat.gather(1, top)
    out[:, middle] = flat[rest].reshape(rows, width - k)
    return out.reshape(rows, *inner)


def _peaked_rows(rows: int, inner: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Flat normal rows (std by row in PEAKED_TAIL_STD), each with one entry (a random
    column) set to hold p = 1 - q of its softmax, q = 10^-u, u uniform in PEAKED_LOG10_Q."""
    width = math.prod(inner)
    low, high = PEAKED_TAIL_STD
    log_std = torch.rand((rows, 1), generator=gen, dtype=torch.float32) * math.log(high / low)
    x = torch.randn((rows, width), generator=gen, dtype=torch.float32).mul_(log_std.exp_() * low)
    cols = torch.randint(0, max(width, 1), (rows,), generator=gen)
    u_low, u_high = PEAKED_LOG10_Q
    if width > 1:
        _set_selected(x, cols, gen, lambda u: _log_odds_of_top(u, u_low, u_high))
    return x.reshape(rows, *inner)


def _spike_rows(rows: int, inner: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Standard normal rows with outliers at columns fixed by the shape: the inputs of an
    elementwise op (swiglu's gate and up) meet outlier to outlier, never an outlier
    ``up`` against an ordinary gate, whose gradient error grows with ``|up|``."""
    width = math.prod(inner)
    x = torch.randn((rows, width), generator=gen, dtype=torch.float32)
    row = torch.arange(rows)[:, None]
    # column c of row r spikes where (c + 37 r) % 64 == 0 (% width in a narrower row):
    # every row has one, and the spikes move across vector lanes and tails row to row
    at = (torch.arange(width)[None, :] + 37 * row) % min(SPIKE_EVERY, max(1, width)) == 0
    low, high = SPIKE_RANGE
    size = torch.rand((rows, width), generator=gen, dtype=torch.float32) * (high - low) + low
    sign = torch.randint(0, 2, (rows, width), generator=gen).to(torch.float32) * 2 - 1
    x[at] = (size * sign)[at]
    return x.reshape(rows, *inner)


def _lm_rows(rows: int, inner: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Logits as language models give them, at real scales.

    Per row: a Gaussian tail with std 4 + 4u^2 (u uniform: half the rows below 5, where
    a lossy fp32 sum over ~1e5 terms shows most), and a head of 8 tokens decaying by 1.5
    from a top level within +-4 of the tail's expected maximum, so sometimes the tail's
    mass dominates the sum and sometimes the head's. The tail is clipped at
    ``logsumexp - 60``: |logp| stays below 64, where the fp32 contract (1e-5, ~2.6 ulp)
    can be met at all.
    """
    width = math.prod(inner)
    f32 = torch.float32
    std = torch.rand((rows, 1), generator=gen, dtype=f32).square_().mul_(4).add_(4)
    x = torch.randn((rows, width), generator=gen, dtype=f32).mul_(std)
    tail_top = std * math.sqrt(2 * math.log(max(width, 2)))
    top = tail_top + torch.rand((rows, 1), generator=gen, dtype=f32) * 8 - 4
    heads = min(8, width)
    cols = torch.randint(0, width, (rows, heads), generator=gen)
    decay = torch.arange(heads, dtype=f32) * 1.5
    x.scatter_(1, cols, top - decay)
    floor = torch.logsumexp(x, dim=1, keepdim=True) - LM_LOGP_FLOOR
    return torch.maximum(x, floor).reshape(rows, *inner)


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
    empty: Callable[..., torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """All inputs of ``op`` for one trial, on the CPU.

    ``lead`` overrides the lead shape (the invariance checks build their own batches);
    ``salt`` gives an independent draw with the same parameters (filler rows); ``empty``
    (shape, dtype) makes the tensors the case-dtype inputs are drawn into (the shared
    store's files, so a Qwen3-sized input is written once, where it is kept).

    Related inputs (values = "related") are drawn last, from their input as the case's
    masking left it: a reference model's logits hide the tokens the policy's hide.
    """
    from kernelcheck.cases.grid import lead_shape

    op = op.for_attributes({})  # a switched input (logp's mask) only where switched on
    lead = lead_shape(op, sizes) if lead is None else lead
    draw = _Draw(op, sizes, dtype, seed, dist, math.prod(lead), salt, empty)
    out: dict[str, torch.Tensor] = {}
    for spec in op.inputs:
        if spec.values != "related":
            out[spec.name] = _shaped(op, spec, draw.one(spec), lead, sizes)
    parts = parts_of(dist)
    for k, part in enumerate(parts):
        if part == "masked":
            salted = salt + (str(k) if len(parts) > 1 else "")
            _mask(op, out, seed, salted, slice(k, None, len(parts)), dtype)
        if part == "lm":
            salted = salt + (str(k) if len(parts) > 1 else "")
            _confident(op, out, seed, salted, slice(k, None, len(parts)), dtype)
            if dtype in ("bf16", "fp16"):
                _confident_through(op, out, seed, salted, slice(k, None, len(parts)))
        if part == "peaked":
            _selected_at_top(op, out, slice(k, None, len(parts)))
    for spec in op.inputs:
        if spec.values == "related":
            drawn = draw.related(spec, out[spec.related_to])
            out[spec.name] = _shaped(op, spec, drawn, lead, sizes)
        if spec.values == "logp":
            out[spec.name] = _shaped(op, spec, draw.old_logps(spec, out), lead, sizes)
    return {spec.name: out[spec.name] for spec in op.inputs}  # in the spec's order


def _shaped(op: OpSpec, spec: InputSpec, t: torch.Tensor, lead, sizes) -> torch.Tensor:
    inner = inner_shape(op, spec, sizes)
    return t.reshape(*lead, *inner) if op.is_row_wise(spec) else t.reshape(inner)


@dataclass(frozen=True)
class _Draw:
    """One trial's draw parameters: each input comes from its own seeded streams."""

    op: OpSpec
    sizes: dict[str, int]
    dtype: str
    seed: int
    dist: str
    nrows: int
    salt: str
    empty: Callable[..., torch.Tensor] | None

    def dtype_of(self, spec: InputSpec) -> str:
        return self.dtype if spec.dtype == "case" else dtypes.canonical(spec.dtype) or self.dtype

    def rows_inner(self, spec: InputSpec) -> tuple[int, tuple[int, ...]]:
        """(rows, inner shape): a row-wise input has the trial's rows, a shared one one."""
        row_wise = self.op.is_row_wise(spec)
        return (self.nrows if row_wise else 1), inner_shape(self.op, spec, self.sizes)

    def one(self, spec: InputSpec) -> torch.Tensor:
        """``rows x inner`` values of one input that is not related to another."""
        gen = _generator(self.seed, self.dist, spec.name, self.salt)
        n, inner = self.rows_inner(spec)
        if spec.values == "mask":
            live = 1 - SPARSE_DEAD_FRACTION if sparse_seed(self.seed) else spec.true_fraction
            return torch.rand((n, *inner), generator=gen) < live
        if spec.values == "weight":
            w = torch.randn((n, *inner), generator=gen, dtype=torch.float32).mul_(0.1).add_(1.0)
            if w.numel() >= ZERO_WEIGHT_FROM:  # a pruned or zero-initialised channel
                w.view(-1)[w.numel() // 3] = 0.0
            return self.scaled(spec, w.to(dtypes.torch_dtype(self.dtype_of(spec))))
        if spec.values in DISTRIBUTIONS:  # a fixed distribution, whatever the case's
            key = _key(self.seed, spec.values, spec.name, self.salt)
            return self.scaled(spec, draw_float(n, inner, spec.values, self.dtype_of(spec), key))
        if spec.values == "index":
            return self.index(spec, gen, (n, *inner))
        return self.scaled(spec, self.case(spec, n, inner))

    def index(self, spec: InputSpec, gen: torch.Generator, shape: tuple[int, ...]):
        """Uniform in ``[0, size)``; a share at edge columns (at least one entry of a
        trial, the first edge first); some ignored (out of range) where the spec says,
        never in a distribution's first row while the trial has other rows: that row
        carries its distribution's hazard at the selected entry (lm's confident token,
        peaked's top one), and a Qwen3 case has one such row a distribution."""
        size = self.sizes[spec.index_of]
        t = torch.randint(0, size, shape, generator=gen, dtype=torch.int64)
        drop = torch.zeros(shape, dtype=torch.bool)
        if spec.out_of_range_fraction:
            drop = torch.rand(shape, generator=gen) < spec.out_of_range_fraction
            first = first_rows(self.dist, shape[0])
            first &= ~first.all()  # first rows alone (a one-row trial): the plain draw
            judged = first.view(-1, *[1] * (len(shape) - 1)).expand(shape)
            drop &= ~judged
            # every trial of 2+ rows holds an ignored index, whatever the draw gave
            _at_least_one(drop, ~judged, gen)
        at_edge = (torch.rand(shape, generator=gen) < EDGE_INDEX_FRACTION) & ~drop
        _at_least_one(at_edge, ~drop, gen)
        edges = torch.tensor(edge_columns(size), dtype=torch.int64)
        t[at_edge] = edges[torch.arange(int(at_edge.sum())) % len(edges)]  # in order
        dtype = torch.int64 if spec.dtype == "case" else dtypes.FIXED_DTYPES[spec.dtype]
        ignored = self.ignored_values(spec, dtype)
        start = int(torch.randint(0, len(ignored), (), generator=gen))
        t[drop] = ignored[(torch.arange(int(drop.sum())) + start) % len(ignored)]
        return t.to(dtype)

    def ignored_values(self, spec: InputSpec, dtype: torch.dtype) -> torch.Tensor:
        """The values an ignored entry of ``spec`` takes, in turn from a drawn start: the
        contract's out-of-range values where it has them for this input (a target past
        the vocab, as well as -100), so that every check, with grad and under
        ``inference_mode`` too, meets each; those ``dtype`` holds."""
        rule = self.op.out_of_range
        if rule is None or rule.input != spec.name:
            return torch.tensor([INDEX_IGNORED])
        info = torch.iinfo(dtype)
        values = [eval_dim_expr(v, self.sizes) for v in rule.values]
        return torch.tensor([v for v in values if info.min <= v <= info.max] or [INDEX_IGNORED])

    def case(self, spec: InputSpec, n: int, inner: tuple[int, ...]) -> torch.Tensor:
        """The case's distribution; a mixed one deals rows round-robin over its parts."""
        parts = parts_of(self.dist) if self.op.is_row_wise(spec) else parts_of(self.dist)[:1]
        tdt = dtypes.torch_dtype(self.dtype_of(spec))
        t = (self.empty or torch.empty)((n, *inner), dtype=tdt)
        for k, part in enumerate(parts):  # row r is drawn from parts[r % len(parts)]
            count = len(range(k, n, len(parts)))
            key = (
                _key(self.seed, self.dist, spec.name, self.salt)
                if len(parts) == 1
                else _key(self.seed, part, spec.name, self.salt, str(k))
            )
            # an lm_head's input (logits_with) is drawn normal: `lm` then moves its rows
            # (_confident_through), where logit-sized hidden states would make no sense
            part = "normal" if part == "lm" and spec.logits_with else part
            # straight into its rows: a Qwen3-sized trial is never held twice
            draw_float(count, inner, part, self.dtype_of(spec), key, out=t[k :: len(parts)])
        return t

    def related(self, spec: InputSpec, base: torch.Tensor) -> torch.Tensor:
        """``base + perturbation * N(0, 1)``: the noise drawn in float32 from the input's own
        stream, the sum rounded once to its dtype. Entries of ``base`` at +-inf (masked
        tokens) stay there. The perturbation is absolute (nats for logits), never relative
        to ``base``: a reference model's logits differ from the policy's by a fraction of
        a nat wherever the rows sit (a 16-bit `large` row's ulp of 32-64 takes it back
        to ``base``, the one honest value there)."""
        n, inner = self.rows_inner(spec)
        key = _key(self.seed, self.dist, spec.name, self.salt, "perturbation")
        noise = draw_float(n, inner, "normal", "fp32", key)
        noise.mul_(self.perturbation(spec, n).view(n, *([1] * len(inner))))
        noise.add_(self.offsets(spec, n).view(n, *([1] * len(inner))))
        t = (self.empty or torch.empty)((n, *inner), dtype=dtypes.torch_dtype(self.dtype_of(spec)))
        t.copy_(noise.add_(base.reshape(noise.shape).float()))
        if self.op.is_row_wise(spec):
            self.unmasked(spec, t.view(n, math.prod(inner)))
        return self.scaled(spec, t)

    def unmasked(self, spec: InputSpec, rows: torch.Tensor) -> None:
        """In rows 2 and 3 of every 4 of each `masked` part, entries that are +-inf in
        the base (half those rows: the others are masked with the lowest finite value)
        get a standard normal draw: a reference model without the policy's logits
        processor (a frozen reference, a vocab tail padded on the actor only) is finite
        where the policy is masked. A one-pass kernel that skips the policy's masked
        columns in the reference's logsumexp too is off by a tenth of a nat there."""
        parts = parts_of(self.dist)
        step = max(1, DRAW_CHUNK_ELEMENTS // max(1, rows.shape[1]))
        for k, part in enumerate(parts):
            if part != "masked":
                continue
            gen = _generator(self.seed, self.dist, spec.name, self.salt, "unmasked", str(k))
            mine = rows[k :: len(parts)]
            chosen = (torch.arange(mine.shape[0]) % 4 >= 2).nonzero().reshape(-1)
            for at in chosen.split(step):
                chunk = mine[at]  # a copy: filled, then written back
                hidden = torch.isinf(chunk)
                if bool(hidden.any()):
                    fill = torch.randn(chunk.shape, generator=gen).to(chunk.dtype)
                    mine[at] = torch.where(hidden, fill, chunk)

    def perturbation(self, spec: InputSpec, n: int) -> torch.Tensor:
        """Each row's perturbation std: the spec's, but DRIFT_RANGE (uniform by row) in
        the rows of a `drifted` part, a reference model far from the policy."""
        low, high = DRIFT_RANGE

        def draw(k: int, gen: torch.Generator) -> torch.Tensor:
            return torch.rand(k, generator=gen) * (high - low) + low

        return self._per_drifted_row(spec, n, spec.perturbation, "drift", draw)

    def offsets(self, spec: InputSpec, n: int) -> torch.Tensor:
        """Each row's constant offset from its base row: 0, but DRIFT_OFFSET (uniform by
        row, up and down in turn) in the rows of a `drifted` part."""
        low, high = DRIFT_OFFSET

        def draw(k: int, gen: torch.Generator) -> torch.Tensor:
            size = torch.rand(k, generator=gen) * (high - low) + low
            return size * (1 - 2 * (torch.arange(k) % 2))

        return self._per_drifted_row(spec, n, 0.0, "offset", draw)

    def _per_drifted_row(self, spec: InputSpec, n: int, value: float, salt: str, draw):
        """A float32 value per row: ``value``, but ``draw(count, generator)`` in the rows of
        each `drifted` part (its own stream, salted ``salt``)."""
        out = torch.full((n,), value, dtype=torch.float32)
        parts = parts_of(self.dist) if self.op.is_row_wise(spec) else parts_of(self.dist)[:1]
        for k, part in enumerate(parts):
            if part == "drifted":
                gen = _generator(self.seed, self.dist, spec.name, self.salt, salt, str(k))
                rows = out[k :: len(parts)]
                rows.copy_(draw(rows.numel(), gen))
        return out

    def old_logps(self, spec: InputSpec, out: dict[str, torch.Tensor]) -> torch.Tensor:
        """``values = "logp"``: the selected logps of ``related_to`` (float64, of the drawn
        logits, at the index input pointing into them) minus N(0, OLD_LOGP_STEP^2), the
        step reversed where it would lift the logp past 0; stale rows STALE_NATS lower
        (see there). -Exp(1) where no logp is selected (an index out of range) or it is
        past STALE_TO."""
        n = self.nrows
        base = out[spec.related_to]
        logits = base.reshape(n, base.shape[-1])
        index = next(i for i in self.op.inputs if i.index_into == spec.related_to)
        ids = out[index.name].reshape(n).long()
        valid = (ids >= 0) & (ids < logits.shape[1])
        lp = _selected_logps(logits, torch.where(valid, ids, 0))
        gen = _generator(self.seed, self.dist, spec.name, self.salt)
        step = torch.randn(n, generator=gen, dtype=torch.float64) * OLD_LOGP_STEP
        # a step that would lift a near-certain token's logp past 0 (p > 1) is taken the
        # other way: a real old policy's logp is never positive, and a kernel may rely on it
        old = torch.where(lp - step > 0, lp + step, lp - step)
        usable = valid & (lp >= -STALE_TO)
        free = torch.empty(n, dtype=torch.float64).exponential_(1.0, generator=gen).neg_()
        old = torch.where(usable, old, free)
        eligible = usable & (lp <= -STALE_FROM)
        stale = (torch.rand(n, generator=gen) < 1 / STALE_EVERY) & eligible
        _at_least_one(stale, eligible, gen)
        low, high = STALE_NATS[self.dtype]
        depth = torch.rand(n, generator=gen, dtype=torch.float64) * (high - low) + low
        old = torch.where(stale, lp - depth, old)
        fixed = dtypes.FIXED_DTYPES.get(spec.dtype)
        return self.scaled(spec, old.to(fixed or dtypes.torch_dtype(self.dtype)))

    def scaled(self, spec: InputSpec, t: torch.Tensor) -> torch.Tensor:
        scale = spec.scale_at(self.sizes)
        if scale != 1.0 and t.is_floating_point():  # drawn, scaled, rounded once more
            t.copy_((t.float() * scale).to(t.dtype))  # (in place: t may be a store file)
        return t


def _selected_logps(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[ids]`` per row in float64, a few MiB of rows at a time."""
    out = torch.empty(logits.shape[0], dtype=torch.float64)
    step = max(1, (1 << 20) // max(1, logits.shape[1]))
    for start in range(0, logits.shape[0], step):
        rows = logits[start : start + step].double()
        picked = rows.gather(1, ids[start : start + step, None]).squeeze(1)
        out[start : start + step] = picked - torch.logsumexp(rows, dim=1)
    return out


def _at_least_one(mask: torch.Tensor, allowed: torch.Tensor, gen: torch.Generator) -> None:
    """Set one random ``allowed`` entry of ``mask`` where none is set and ``mask`` holds
    two entries or more (a one-row trial keeps its one draw)."""
    free = allowed.reshape(-1).nonzero().reshape(-1)
    if mask.numel() >= 2 and not bool(mask.any()) and free.numel():
        mask.view(-1)[free[int(torch.randint(0, free.numel(), (1,), generator=gen))]] = True


def edge_columns(size: int) -> list[int]:
    """The edge indices of a dim of ``size``, most telling first: with 2^k the largest
    power of two below ``size``, 2^k (the first column of a second tile, for every
    power-of-two tile up to 2^k at once), the last column, 2^k - 1 (a tile's last
    column), 0, 2^k + 1, 1, the column before the last, and the other odd multiples of
    2^(k-1). Uniform draws over a 151,936-entry vocab almost never land on one."""
    if size < 2:
        return [0]
    top = 1 << ((size - 1).bit_length() - 1)
    half = max(1, top // 2)
    found = [top, size - 1, top - 1, 0, top + 1, 1, size - 2]
    found += list(range(half, size, 2 * half))
    return [c for k, c in enumerate(found) if 0 <= c < size and c not in found[:k]]


def _mask(
    op: OpSpec, tensors: dict[str, torch.Tensor], seed: int, salt: str, rows_of: slice, dtype: str
) -> None:
    """Mask float entries of the rows ``rows_of``, sparing entries an index input selects:
    the rows take :func:`masked_runs`' patterns in turn, and every other row is masked
    with the case dtype's lowest finite value instead of -inf, as HF's
    ``masked_fill(mask, finfo.min)`` masks: a block of those has a finite maximum, so a
    kernel's online merge that only handles -inf (exp(0) for every masked entry, then
    0 x -inf) goes wrong there."""
    lowest = torch.finfo(dtypes.torch_dtype(dtype)).min
    for spec in op.inputs:
        if spec.values != "case":
            continue
        x = tensors[spec.name]
        if x.dim() == 0 or x.numel() == 0:
            continue
        gen = _generator(seed, "mask", spec.name, salt)
        width = x.shape[-1]
        rows = x.view(-1, width)[rows_of]
        selectors = [
            tensors[i.name].reshape(-1)[rows_of] for i in op.inputs if i.index_into == spec.name
        ]
        step = max(1, DRAW_CHUNK_ELEMENTS // width)
        for start in range(0, rows.shape[0], step):
            chunk = rows[start : start + step]
            mask = torch.rand(chunk.shape, generator=gen) < MASKED_FRACTION
            mask[:, 0] = False  # never a fully masked row
            selected = [t[start : start + step] for t in selectors if t.numel() == rows.shape[0]]
            masked_runs(mask, start + seed + width, selected)
            for sel in selected:
                valid = (sel >= 0) & (sel < width)
                spare = torch.zeros_like(mask)
                spare.scatter_(-1, sel.clamp(0, width - 1).unsqueeze(-1), valid.unsqueeze(-1))
                mask &= ~spare
            finite = (torch.arange(chunk.shape[0]) + start + seed) % 2 == 1
            chunk.masked_fill_(mask & ~finite[:, None], float("-inf"))
            chunk.masked_fill_(mask & finite[:, None], lowest)


def _confident(
    op: OpSpec, tensors: dict[str, torch.Tensor], seed: int, salt: str, rows_of: slice, dtype: str
) -> None:
    """In every other row of ``rows_of``, the entry an index input selects set to hold
    p = 1 - 10^-u of the row's softmax (u uniform in CONFIDENT_LOG10_Q: p from 0.5 to
    0.999), as an RL rollout's own sampled token mostly is. Its gradient g (1 - p)
    cancels there: a backward that forms it from a 16-bit p (Liger's cross-entropy adds
    g to the stored 16-bit -g p) loses its digits, unseen at uniformly drawn targets.
    In a 16-bit case, one row in four of the others holds p = e^-d instead (d uniform
    in DEEP_NATS): subnormal in fp32, where a logp read off a stored softmax as
    ``log(p)`` keeps a few bits (or -inf), unseen where every p is normal."""
    low, high = CONFIDENT_LOG10_Q
    deep_low, deep_high = DEEP_NATS

    def confident(u: torch.Tensor) -> torch.Tensor:
        return _log_odds_of_top(u, low, high)

    def deep(u: torch.Tensor) -> torch.Tensor:  # log(p / (1 - p)), p = e^-d
        d = u * (deep_high - deep_low) + deep_low
        return -d - torch.log1p(-torch.exp(-d))

    for name, rows, selected in _selected_rows(op, tensors, rows_of):
        gen = _generator(seed, "confident", name, salt)
        _set_selected(_set_rows(rows), _set_rows(selected), gen, confident)
        if dtype in ("bf16", "fp16"):
            gen = _generator(seed, "deep", name, salt)
            others, their_ids = _unset_rows(rows), _unset_rows(selected)
            _set_selected(_set_rows(others), _set_rows(their_ids), gen, deep)


def _selected_rows(op: OpSpec, tensors: dict[str, torch.Tensor], rows_of: slice):
    """(name, rows ``rows_of`` as an [n, V] view, the ids selected in them) of each drawn
    float input an index input selects into (logp's logits, ratio_kl's policy logits)."""
    for spec in op.inputs:
        selectors = [i.name for i in op.inputs if i.index_into == spec.name]
        if spec.values != "case" or not selectors:
            continue
        x = tensors[spec.name]
        if x.dim() == 0 or x.numel() == 0:
            continue
        yield (
            spec.name,
            x.view(-1, x.shape[-1])[rows_of],
            tensors[selectors[0]].reshape(-1)[rows_of],
        )


def _selected_at_top(op: OpSpec, tensors: dict[str, torch.Tensor], rows_of: slice) -> None:
    """In every other row of ``rows_of`` (the first of them included), the entry an index
    input selects swapped with the row's largest: a converged policy samples its top
    token (p = 1 - q), whose logp of about -q an honest kernel gets to ulps of 1, so that
    the whole error is what a kernel loses of the tail's q (a skipped tile's mass)."""
    for _, all_rows, all_selected in _selected_rows(op, tensors, rows_of):
        rows, selected = _set_rows(all_rows), _set_rows(all_selected)
        width = all_rows.shape[-1]
        if selected.numel() != rows.shape[0]:  # not one id per row: nothing to swap
            continue
        at = ((selected >= 0) & (selected < width)).nonzero().reshape(-1)
        top, cols = rows.argmax(-1)[at], selected[at]
        largest, chosen = rows[at, top].clone(), rows[at, cols].clone()
        rows[at, top] = chosen
        rows[at, cols] = largest


def _confident_through(
    op: OpSpec, tensors: dict[str, torch.Tensor], seed: int, salt: str, rows_of: slice
) -> None:
    """`lm` rows of an input whose logits are ``x @ weight.T`` (``logits_with``: an
    lm_head's hidden states): every other row moved along the selected token's weight
    row, ``x + c w_t``, until that token holds p = 1 - 10^-u of the logits' softmax (u
    uniform in CONFIDENT_LOG10_Q), as :func:`_confident` sets a logits row's entry: an RL
    rollout's own sampled token mostly is that confident, and a backward that forms its
    gradient g (1 - p) from a 16-bit p (Liger's fused linear cross-entropy adds g to the
    stored 16-bit -g p) loses its digits there. In 16-bit cases only: in fp32 an honest
    gradient there is as far off as its logits' rounding amplified by 1 / (1 - p) (the
    shipped `torch` candidate's fixed-order dot products: up to 25x a BLAS reference's
    error at p = 0.999), where no precision judgment holds. c by Newton's method in float64 (the
    log-odds are concave in c: the steps rise to the root), the row rounded once; a bias
    (where on) shifts the logits by its own draws after this."""
    low, high = CONFIDENT_LOG10_Q
    for spec in op.inputs:
        if spec.logits_with is None or spec.values != "case":
            continue
        weight = tensors[spec.logits_with].double()
        vocab = op.input(spec.logits_with).shape[0]
        index = next(i for i in op.inputs if i.values == "index" and i.index_of == vocab)
        x = tensors[spec.name]
        rows = _set_rows(x.view(-1, x.shape[-1])[rows_of])
        ids = _set_rows(tensors[index.name].reshape(-1)[rows_of])
        gen = _generator(seed, "confident", spec.name, salt)
        u = torch.rand(rows.shape[0], generator=gen, dtype=torch.float64)
        q = torch.pow(10.0, -(u * (high - low) + low))
        odds = torch.log((1 - q) / q)
        step = max(1, DRAW_CHUNK_ELEMENTS // max(1, weight.shape[0]))
        for start in range(0, rows.shape[0], step):
            at = slice(start, start + step)
            _moved_to_odds(rows[at], ids[at], weight, odds[at])


def _moved_to_odds(rows: torch.Tensor, ids: torch.Tensor, weight: torch.Tensor, odds) -> None:
    """``rows`` (in place) moved along ``weight[ids]`` until each selected logit's
    log-odds against the others' logsumexp is ``odds``; rows of an id out of range stay."""
    ok = (ids >= 0) & (ids < weight.shape[0])
    t = torch.where(ok, ids, 0).long()
    h, toward = rows.double(), weight[t]
    logits, along = h @ weight.T, toward @ weight.T  # the logits, and their rate in c
    c = torch.zeros(h.shape[0], dtype=torch.float64)
    other = torch.ones_like(logits, dtype=torch.bool).scatter_(1, t[:, None], False)
    for _ in range(CONFIDENT_NEWTON_STEPS):
        z = logits + c[:, None] * along
        zt, rate_t = z.gather(1, t[:, None])[:, 0], along.gather(1, t[:, None])[:, 0]
        zo = z.masked_fill(~other, float("-inf"))
        f = zt - torch.logsumexp(zo, 1) - odds
        rate = rate_t - (torch.softmax(zo, 1) * along).sum(1)
        step = f / rate
        # a row whose other weight rows outgrow the target's (tiny hidden sizes) may never
        # get there: its c stops where the rate does, and the row stays unmoved
        go = (rate > 0) & torch.isfinite(step)
        c = torch.where(go, (c - step).clamp(0.0, CONFIDENT_MAX_C), c)
    done = ok & go & (f.abs() < 0.5) & torch.isfinite(f)
    moved = h + torch.where(done, c, 0.0)[:, None] * toward
    rows.copy_(torch.where(torch.isfinite(moved).all(1, keepdim=True), moved, h).to(rows.dtype))


def _log_odds_of_top(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """log(p / (1 - p)) of an entry holding p = 1 - q, q = 10^-(low + u (high - low))."""
    q = torch.pow(10.0, -(u * (high - low) + low))
    return torch.log((1 - q) / q)


def _set_selected(rows: torch.Tensor, selected: torch.Tensor, gen, log_odds) -> None:
    """Each row's selected entry (in range) set to the logsumexp of its other entries plus
    ``log_odds(u)``, u uniform per row: the entry then holds p with log(p / (1 - p)) that."""
    width = rows.shape[-1]
    step = max(1, DRAW_CHUNK_ELEMENTS // width)
    for start in range(0, rows.shape[0], step):
        chunk, t = rows[start : start + step], selected[start : start + step]
        u = torch.rand(chunk.shape[0], generator=gen, dtype=torch.float64)
        at = ((t >= 0) & (t < width)).nonzero().reshape(-1)
        if not at.numel():
            continue
        cols = t[at].unsqueeze(-1)
        rest = chunk[at].double().scatter_(-1, cols, float("-inf")).logsumexp(-1)
        value = (rest + log_odds(u[at])).to(rows.dtype)
        keep = torch.isfinite(value)  # a row of one entry (p is 1) keeps its draw
        chunk[at[keep], cols.squeeze(-1)[keep]] = value[keep]


def masked_runs(mask: torch.Tensor, first: int, selected: list[torch.Tensor]) -> None:
    """Rows ``[n, V]`` of ``mask`` (scattered) in three patterns, row r's by
    ``(first + r) % 3``: scattered as they are; the first half of the row masked in one
    run (column 0 and, from V = 4, 1; a kernel's first tile, a first thread's share), the
    column after it kept; the last half (a padded vocab's tail, the last tile). A run
    never covers a selected entry: it takes the other half then. A kernel whose partial
    maximum of a fully masked block is -inf computes exp(-inf - -inf) = NaN there;
    scattered masks never fill a block."""
    n, width = mask.shape
    half = width // 2
    if not half:
        return
    pattern = (first + torch.arange(n)) % 3
    for t in selected:  # at most one half holds the entry: the run takes the other
        inside = torch.where(pattern == 1, t < half, (t >= width - half) & (t < width))
        pattern = torch.where((pattern > 0) & (t >= 0) & inside, 3 - pattern, pattern)
    cols = torch.arange(width)
    first_half, last_half = (pattern == 1)[:, None], (pattern == 2)[:, None]
    mask |= (first_half & (cols < half)) | (last_half & (cols >= width - half))
    mask[pattern == 1, half] = False  # never a fully masked row (column 0 is in the run)


def make_upstream(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    salt: str = "",
    zero_rows: torch.Tensor | None = None,
):
    """The upstream gradient for backward checks: standard normal, drawn on the CPU;
    exactly 0 on the rows (of the lead, flattened) where ``zero_rows`` is set."""
    gen = _generator(seed, "upstream", salt)
    t = torch.randn(shape, generator=gen, dtype=torch.float32)
    if zero_rows is not None and t.numel():
        t.view(zero_rows.numel(), -1)[zero_rows] = 0.0
    return t.to(dtype)


def loss_mask_rows(allowed: torch.Tensor, seed: int, salt: str = "") -> torch.Tensor:
    """The rows a loss mask drops (``LOSS_MASK_FRACTION`` of the ``allowed`` rows, or in
    odd seeds ``SPARSE_DEAD_FRACTION``; at least one where one is allowed): a model
    multiplies a per-token loss by its mask, so those tokens' upstream gradient is
    exactly 0, and a kernel that skips them must still write their zero gradient (an
    unwritten row reads NaN here: fresh memory is poisoned). One set for every output."""
    gen = _generator(seed, "loss-mask", salt)
    share = SPARSE_DEAD_FRACTION if sparse_seed(seed) else LOSS_MASK_FRACTION
    zero = (torch.rand(allowed.numel(), generator=gen) < share) & allowed
    _at_least_one(zero, allowed, gen)
    return zero
