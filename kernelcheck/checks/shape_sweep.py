"""``shape_sweep``: the contract tolerance and the precision rules at the sizes where tails
and index widths break.

A kernel is written for a vector width, a tile and an index type, and its bugs sit at
the edges of those: a remainder loop that handles one element, a tile boundary, a 16-bit
column index, a row offset that stops advancing after 65,535 launches. The grid's few
shapes rarely land there, so this check goes there on purpose, with a few rows each:

- every inner dim (each dim that is not a lead dim: logp's vocab, rms_norm's hidden) at
  every residue twice: at ``SWEEP_BASE + r`` (r = 0..127, every residue mod 128: a
  vector body runs several times before the tail, in one tile) and at ``TILED_BASE + r``
  (r = 0..63, every residue mod 64; 24,576 = 3 x 8,192: rows of several tiles of any
  power-of-two size up to 8,192, whose last tile holds exactly r elements; a kernel's
  tiled path has a tail of its own) and at ``TILED_BASE + 64 m`` (m = 1..64: the last
  partial tile of each power-of-two size up to 4,096 holds every count of sub-tiles of
  64 and more, which a ring of sub-tile buffers drains), at 1..16 (the body never runs),
  next to each power of two up to 2^17 (2^k - 1, 2^k, 2^k + 1: one tile and one index
  width short, exact, one over), at 3, 5, 7 and 9 x 2^k from 96 to 2^17 (multiples of a
  fine alignment but of no larger power-of-two tile: a tile count floored, ``n // 2048``
  at a hidden of 2,560, 3,072, 3,584, 5,120 or 7,168, drops the last partial tile of a
  path meant for aligned widths) and, for a vocabulary, at real models' vocabularies up
  to Gemma 3's 262,208 (a table of 64 tiles of 4,096 ends at 2^18), for another dim at
  real models' hidden and MLP widths whose odd factor is past 9 (Gemma 3 12B's 3,840,
  Llama 2's 11,008: ``MODEL_WIDTHS``); the other inner dims at the op's defaults;
- wide batches: each inner dim at 2^k + 1 for k in ``WIDE_POWERS`` and at its widest
  swept size, with ``WIDE_ELEMENTS`` (2^26) elements' worth of rows, between 64 and
  4,096 (Gemma's vocabulary: 255 rows; each dim's widest again with
  ``WIDEST_BATCH_ELEMENTS``, 2^28, at the grid's attributes in every dtype and in an
  attribute sweep's case at the narrowest, judged as the far rows are, each call alone
  within its memory budget, then again as two shifted sequences, ``[:, :-1]`` views:
  ``shifted_batch``): a kernel may pick its path by width and rows together (a
  GEMM with TF32 operands from K >= 2,048 at 32 tokens; a streaming pass over a wide row
  for a training batch), which neither the sweep's few rows nor the grid's narrower
  shapes reach;
- hot shapes: each residue shape past ``SWEEP_BASE`` (every residue mod ``HOT_RESIDUES``,
  128) is called 32, 64, 128 or 256 more times (:func:`hot_calls`), and 8,191
  (``LONG_HOT_SIZE``) and 8,320 (``ALIGNED_HOT_SIZE``), and 32,767 and 32,896 past a
  long-row path's 16,384 (``LONG_ROW_HOT_SIZES``) 2,048 more, on the same inputs,
  then the backward (with grad) ``HOT_BACKWARD_CALLS`` (32) more times (8,191: 2,048);
  each call whose bits differ from
  the first's is judged like it (``checks/repeated_calls.py``): a kernel cache that
  specialises a shape after some calls (a tracing JIT, a CUDA graph captured after
  warm-up, an autotuner trying configurations) runs other code from then on, with tails
  and tiles of its own (an unrolled-by-128 body, a floored tile count), and a real model
  calls every shape thousands of times;
- one lead of ``LONG_ROWS`` (65,537) rows at the op's default inner sizes (the widest at
  most 257: 2^24 elements in all): one grid dimension of 65,535 blocks, 16-bit row counts, and
  chunked passes over many rows. Its inputs and gold are shared by the run's candidates
  like a trial's;
- one lead of ``LONG_ROWS`` rows at a real hidden size: the widest inner dim at
  ``FAR_INNER`` (2,560, Qwen3-4B's hidden; the others at most ``OTHER_INNER``), 168M
  elements: a launcher of 65,535 blocks of ``4096 // next_pow2(hidden)`` rows (one row
  a block from 2,049 on) that never reaches the last rows, or stops advancing its row
  pointer, shows nowhere narrower. Too large for a full gold, it is judged at its first
  and last rows only, each against the gold of that row alone (``checks/far_rows.py``).
  Also in the op's big-batch case at the grid's first dtype (the swept attributes at
  their first values): a path for the rows past 65,535 blocks may forget an attribute.
  In the grid's narrowest dtype's case (``narrowest_dtype``) it has ``WIDE_BLOCK_ROWS``
  (131,071) rows: past 65,535 blocks of two rows, as a launcher that packs 8,192
  elements a block puts two rows of 2,560 in one (a round-16 red team's rms_norm).
  Its judged rows' bits must equal the same rows' in a small batch (``far_rows``: a
  switch of reduction order past 2^27 elements), its calls at 3 threads; at 65,537 rows
  the backward runs again with the shared grad inputs frozen (a dx-only kernel), and
  with each row-wise one alone where there are two (swiglu's ``up`` frozen);
- one lead past 2^31 elements (``huge_rows_shape``: logp 14,234 rows at 151,552), and one
  of 524,352 rows at 2,048 (past 65,535 blocks of 16,384 elements, however many rows a
  launcher packs in one: eight of 2,048), once per candidate, in the grid's narrowest
  dtype's case (``narrowest_dtype``: bf16): a flat element offset kept in a signed 32-bit
  int wraps at the first, a launch of 65,535 blocks never reaches the second's last rows.
  Judged as the far-rows lead, but mirrored in virtual memory (``cases/mirrored.py``: 4
  GiB read, a few hundred rows held); a call past its memory budget (a third of the
  memory available) is retried forward only, then left unjudged, and the result's
  ``not_judged`` says so. Then, in the same case, one of 2,097,216 rows of 128
  (``short_rows_shape``: 2^28 elements, in memory, judged as a widest batch): a launcher
  that packs 32 short rows to a block passes 65,535 blocks there, and a kernel may sum
  short rows another way past 2^17 of them. After each call of these leads (and the
  far rows and widest batches) their row-wise inputs must hold the rows they copy
  (``far_rows.first_input_write``), judged as ``integrity``;

Each shape is judged like ``forward_accuracy`` and ``backward_accuracy`` (the same
contract tolerance, against the float64 gold), then like ``forward_precision`` and
``backward_precision``, on inputs drawn exactly as a case of that shape draws them
(same seed and distributions) plus one ``edges`` row (the row's largest entries at its
ends: the columns a vector body's head and tail handle apart hold its mass), so the
failing shape named in the message reruns as an ordinary case. The accuracy judges
leave the edges row out (the spec's contract is for its own distributions: an honest
fp32 log_softmax gradient over 16,385 entries errs 4.6e-5 on it, past a 1e-5 contract),
and so does the far-rows lead; the precision judges, relative to the honest reference,
judge it. A tail path that rounds
its exp terms to bf16 errs 2e-4 at vocab 24,578, 900x an honest one's and far inside
bf16's contract. On a trial of a few rows the honest reference's own error is an
unsteady yardstick (the shipped ``torch`` linear_logp, honest, was 19.8x it at
hidden=24,618), so the floor carries the limit there: ``backward_precision``'s is
``SWEEP_FLOOR_ULP`` (16 fp32 ulps, twice the grid's); ``forward_precision`` judges the
edges row alone, its floor in ulps of the row's largest input where that is larger than
its output (an entropy of 0.07 from logits of 20 errs in ulps of 20). An op's spec may
turn the precision judges off (``precision_floor_ulp = 0``: linear_logp, whose honest
fixed-order dot products reach twice a BLAS reference's error on a few tokens). The
sweep does not depend on the case's own shape: it runs once per (candidate, dtype,
attributes), in the grid's first shape's case.

An attribute sweep (a value off the grid's: a temperature, an eps) runs it too, without
the residues, the multiples of 64 past the tiled base, the hot shapes, the wide batches
and the long leads (with the real vocabularies and widths) (but the narrowest dtype's
2^28-element batch at each dim's widest size): a kernel's wide or tiled path that forgets
the attribute (an eps hard-coded past hidden 4,096, a temperature dropped on the long-row
path) shows at the size edges, where those paths begin. At the grid's
first dtype every edge; at the others (a 16-bit path of its own) the edges wider than
the sweeps' own shapes (``cases.grid.swept_widths``), which judge the narrower sizes.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

from kernelcheck import dtypes
from kernelcheck.cases.grid import at_first_dtype, lead_sizes, swept_widths
from kernelcheck.cases.inputs import MIX, parts_of
from kernelcheck.cases.mirrored import PAGE_ELEMENTS_16, mirroring_available
from kernelcheck.checks.accuracy import BackwardAccuracy, ForwardAccuracy
from kernelcheck.checks.backward_precision import BackwardPrecision
from kernelcheck.checks.check import Check
from kernelcheck.checks.far_rows import JUDGED, far_rows_unjudged, judge_far_rows
from kernelcheck.checks.huge_rows import (
    HugeRowsUnjudged,
    call_alone_within_budget,
    mirrored_placement,
)
from kernelcheck.checks.outcome import CandidateFault, Outcome
from kernelcheck.checks.precision import ForwardPrecision
from kernelcheck.checks.repeated_calls import call_label, differing_calls
from kernelcheck.checks.rows import placed_rows, shifted_rows
from kernelcheck.checks.trial import Trial
from kernelcheck.spec.model import OpSpec

SWEEP_BASE = 256
TILED_BASE = 3 * 8192  # several tiles of every power-of-two size up to 8,192
RESIDUES = 64
SMALL_SIZES = 16
MAX_POWER = 17
ODD_FACTORS = (3, 5, 7, 9)  # times 2^k (>= 2^5, <= 2^MAX_POWER): widths of no power-of-two tile
# a dim named "vocab" also at real models' vocabularies: Llama 2, GPT-2, Llama 3, and
# Gemma 3's (262,144 and its embedding's 262,208 = 2^18 + 64: a table of 64 tiles of
# 4,096 columns ends at 2^18; Qwen's 151,936 is logp's grid's own). Not other dims: a
# plain fp32 matmul over a 2^18 hidden dim errs past linear_logp's contract, and no
# model is that wide.
VOCAB_DIM = "vocab"
MODEL_VOCABS = (32_000, 50_257, 100_352, 128_256, 152_064, 256_000, 262_144, 262_208)
# any other dim also at real models' hidden and MLP widths whose odd factor is past 9,
# which the sweep's 2^k and 3, 5, 7, 9 x 2^k miss: Qwen2.5's 4,864 (0.5B), 8,960
# (1.5B), 18,944 (7B) and 29,568 (72B); Gemma 3's 3,840 and 15,360 (12B), 5,376 and
# 21,504 (27B); Llama 2's 11,008 (7B) and 13,824 (13B); Qwen3's 9,728 (4B), 17,408 (14B)
# and 25,600 (32B; also a multiple of 64 past the tiled base). A round-37 red team's
# rms_norm and swiglu backward, wrong where a last 2,048-element chunk holds an odd count
# of 256-element sub-tiles, were wrong at 3,840, 5,376, 4,864, 8,960 and 11,008 and
# passed the default run. In an attribute sweep's edges too
MODEL_WIDTHS = (3_840, 4_864, 5_376, 8_960, 9_728, 11_008, 13_824)
MODEL_WIDTHS += (15_360, 17_408, 18_944, 21_504, 25_600, 29_568)
# past WIDE_TILED_BASE (3 x 2^15 = 98,304: past 2^16, where a kernel may take a wide-row
# path), base + 2^j for j = 6..14: a width whose largest power-of-two divisor is exactly
# 2^j, so a tile count floored past one tile of any size leaves a last partial tile of
# each size; real widths are such (Qwen2.5's vocabulary 152,064 = 297 x 512), where 2^k
# and 3, 5, 7, 9 x 2^k are multiples of 1,024
WIDE_TILED_BASE = 3 << 15
# past the tiled base, every multiple of SUB_TILE up to SUB_TILE_SPAN (the base + 2^j
# among them): the last partial tile of each power-of-two size from 128 to 4,096 holds
# every count of power-of-two sub-tiles from 64 up. A kernel that streams a tile's
# sub-tiles through a ring of buffers and drains what is left after its loop goes wrong
# at some counts only: a round-37 red team's rms_norm, two buffers of 256 in chunks of
# 2,048, added sub-tile n - 2 twice where the last chunk held an odd n >= 3 (Gemma 3
# 12B's hidden of 3,840 holds seven), and every width the sweep had left one or an even
# count there
SUB_TILE = 64
SUB_TILE_SPAN = 4096
LONG_ROWS = 65_537
# the far-rows lead's rows in the narrowest dtype's case: past 65,535 blocks of two rows (a
# block of 8,192 elements holds two rows of 2,560), at twice the cost, once per candidate
WIDE_BLOCK_ROWS = 2 * 65_535 + 1
# the joint shape's sizes: a vocabulary's Llama 2's (32,000, a multiple of 128), any other
# inner dim a real hidden size (Qwen3-0.6B's 1,024): a 33M-element lm_head, whose honest
# fp32 backward with fixed-order sums takes the torch candidate 5 s
JOINT_SIZES = {VOCAB_DIM: 32_000, "": 1_024}
LONG_INNER = 257  # the long lead's inner sizes at most (65,537 x 257 > 2^24)
OTHER_INNER = 16  # the inner dims not swept, at most
# the far-rows lead's widest inner dim: a real model's (Qwen3-4B), aligned to 512, whose
# next power of two is 4,096 (one row a block where a block takes 4,096 // next_pow2);
# 4,096 itself would cost 1.6x (entropy's honest bf16 call: 25 s, 8 GB at 4,096)
FAR_INNER = 2560
# the huge lead: past 2^31 elements in its widest row-wise input, where a flat element
# offset kept in a 32-bit int wraps; its widest inner dim at Qwen3's vocabulary (151,936)
# rounded down to whole pages of 16-bit rows (PAGE_ELEMENTS_16: 151,552 at 4 KiB pages),
# so the batch can be mirrored in virtual memory (cases/mirrored.py)
HUGE_ELEMENTS = 1 << 31
HUGE_INNER = 151_936
# the narrow huge lead: the narrowest 16-bit row of whole pages (2,048, Qwen3-1.7B's
# hidden), 2^19 rows past JUDGED: past 65,535 blocks of 16,384 elements (eight such rows),
# so a launcher of 65,535 blocks of any size up to that, however many rows it packs in a
# block, never reaches its last rows; half the elements of the rows past 2^31, so a
# candidate that upcasts its whole input to fp32 (4 GiB) stays within its memory budget
NARROW_HUGE_INNER = PAGE_ELEMENTS_16
NARROW_HUGE_ELEMENTS = 1 << 30
# the short-row huge lead: rows of 128 (a head's QK-norm at Qwen3's head_dim), 2^21 past
# JUDGED: past 65,535 blocks of 4,096 elements (32 such rows), where a kernel packs many
# short rows into a block (a round-25 red team's rms_norm, its blocks past grid.y's 65,535
# spilled to grid.z, never ran block 65,535), and past 2^17 rows, where it may sum short
# rows another way (another red team's, a bmm past 2^17 rows of 128); 512 MiB of bf16,
# so placed in memory as it is (a row is not a whole page: not mirrored)
SHORT_HUGE_INNER = 128
SHORT_HUGE_ELEMENTS = 1 << 28
# the residues past SWEEP_BASE: every one mod 128 (a body unrolled by 128, a block of 128
# lanes), each a hot shape, called one of HOT_CALLS times more, each call whose bits
# differ from the first's judged; mod RESIDUES past the tiled base
HOT_RESIDUES = 128
HOT_CALLS = (32, 64, 128, 256)
# one shape called this many more times: 2^13 - 1 (8,191), below every power of two up
# to 8,192 by one, so a path that floors its count of tiles of any such size leaves out
# a last tile short of one column (half the row at 4,096), or all of it at 8,192 and past;
# a switch after 1,000 calls of a shape (a round-18 red team's logp, whose path for hot
# shapes floors its count of 4,096-column tiles) shows nowhere a shape is called 257
# times. Each call's bits compared: 0.2 ms (logp) to 1 ms (entropy) a call here
LONG_HOT_SIZE = (1 << 13) - 1
# and 2^13 + 2^7 (8,320), its backward HOT_BACKWARD_CALLS only: a multiple of 128 (a
# real vocabulary's alignment, Qwen3's 151,936 among them: the hot path a kernel keeps
# for aligned rows) with a tail of 128 in every tile from 256 to 8,192 (a round-24 red
# team's hot path for 128-aligned vocabularies floors its 4,096-column tiles, which
# 8,191 never takes)
ALIGNED_HOT_SIZE = (1 << 13) + (1 << 7)
# and both again past 2^14 (32,767 and 32,896), where a kernel takes its long-row path (a
# round-37 red team's entropy floored its 4,096-column tiles in a shape's calls past the
# 128th from 16,384 columns on: in its default run no shape that wide was called more
# than 64 times in one process)
LONG_ROW_HOT_SIZES = ((1 << 15) - 1, (1 << 15) + (1 << 7))
MOST_CALLED_SIZES = (LONG_HOT_SIZE, ALIGNED_HOT_SIZE, *LONG_ROW_HOT_SIZES)
LONG_HOT_CALLS = 2048
# a hot shape's repeated backward calls, at most (LONG_HOT_SIZE's all of LONG_HOT_CALLS):
# a backward autotuner tries its configurations in a shape's first calls, and a backward
# call costs several forwards' (all of HOT_CALLS took 50% more of the default run)
HOT_BACKWARD_CALLS = 32
WIDE_POWERS = (8, 11, 14)  # wide batches at 2^k + 1, and at the widest swept size
# a wide batch's elements (256 MiB of fp32), its rows within WIDE_ROWS: up to 4,096, a
# training micro-batch's tokens, where a kernel may take a path of its own for many rows
# of a wide row (a round-21 red team's rms_norm and swiglu backwards, from 2,048 rows past
# 4,096 and 8,192 columns, dropped a partial last block; 1,024 rows never took them)
WIDE_ELEMENTS = 1 << 26
WIDE_ROWS = (64, 4096)
# each dim's widest batch again with this many elements, at the grid's attributes in every
# dtype and at each attribute sweep's values in the narrowest: an RL micro-batch at a real
# vocabulary (1,024 tokens of Qwen3's 151,936: 2^27.2), past 2^27, where a kernel may
# switch to a chunked path below 2^31 (round-21 red teams' entropy kept its chunks' partial
# sums in bf16 there, their ratio_kl the saved logsumexp, their logp left T out of the
# softmax; a round-22 one's fp32 entropy wrote exp(x - max) into the caller's logits)
WIDEST_BATCH_ELEMENTS = 1 << 28
SHARE_ELEMENTS = 1 << 20  # shapes this large share their draws and gold across candidates
# drawn in every shape besides the case's own distributions: the row's mass at its
# first and last columns, where a vector body's head and tail are handled apart
SWEEP_DISTRIBUTION = "edges"
# each shape's judges, in this order (a shape stops at its first failure)
JUDGES: tuple[type[Check], ...] = (
    ForwardAccuracy,
    BackwardAccuracy,
    ForwardPrecision,
    BackwardPrecision,
)
# backward_precision's floor in fp32 ulps at a swept shape: a trial of a few rows makes
# the honest reference's own error an unsteady yardstick (it may be exact by luck), so
# the floor carries the limit there: twice the grid's, still a ten-thousandth of the
# 16-bit contracts'
SWEEP_FLOOR_ULP = 16
# frozen grad inputs are another path, not another size, and a training batch is
# another batch: each judged once per case, not here (but the frozen calls at the wide
# batches: WideBatch)
SWEEP_PARAMS = {
    BackwardAccuracy.name: {"frozen_inputs": False},
    # the edges row's outputs, the floor in ulps of its inputs too: a row's one output
    # (an entropy or a KL of 0.07 where its inputs reach 20) can be far below the
    # magnitude its honest error scales with, and one row is all there is to scale by
    # (a 16-bit result's rounding direction is judged at the grid's shapes: on a few rows
    # one row's fp32 scale error tips all its entries one way, an honest ratio_kl's too)
    ForwardPrecision.name: {
        "only": (SWEEP_DISTRIBUTION,),
        "floor_of_inputs": True,
        "judge_rounding": False,
    },
    BackwardPrecision.name: {
        "frozen_inputs": False,
        "big_rows": 0,
        "huge_rows": 0,
        "index_column_whole": True,
        "judge_rounding": False,
    },
}
PRECISION_JUDGES = (ForwardPrecision.name, BackwardPrecision.name)
# where the honest fp32 reference itself misses a contract judge's tolerance at a swept
# shape (an fp32 gradient's error tail over 2^26 elements passing a spec's 1e-5), no fp32
# implementation can meet it there: that shape's verdict is the precision rule of the same
# direction, on every row (the run's list of what was not checked names the shape)
CONTRACT_UNMET_BY: dict[str, type[Check]] = {
    ForwardAccuracy.name: ForwardPrecision,
    BackwardAccuracy.name: BackwardPrecision,
}


def tiled_base(largest: int | None = None) -> int:
    """TILED_BASE, or where a dim's sweep stops below it, the largest ``3 x 2^k`` whose 64
    residues fit (a dim swept to 16,385 gets 12,288: several tiles up to 4,096)."""
    base = TILED_BASE
    while largest is not None and base + RESIDUES - 1 > largest and base > 3 * RESIDUES:
        base //= 2
    return base


def sweep_sizes(dim: str = "", largest: int | None = None, residues: bool = True) -> list[int]:
    """The reduced-dim sizes, ascending: 1..16; every residue mod 128 past SWEEP_BASE, mod
    64 past the tiled base, each multiple of SUB_TILE up to SUB_TILE_SPAN past it, each
    2^j from 64 past WIDE_TILED_BASE and MOST_CALLED_SIZES (unless not ``residues``);
    2^k - 1, 2^k, 2^k + 1 for k = 1..MAX_POWER; ODD_FACTORS x 2^k; MODEL_VOCABS for
    ``dim`` VOCAB_DIM, else MODEL_WIDTHS; none past ``largest`` (a spec's ``sweep_max``)."""
    sizes = set(range(1, SMALL_SIZES + 1)) | set(MODEL_VOCABS if dim == VOCAB_DIM else MODEL_WIDTHS)
    if residues:
        sizes |= {SWEEP_BASE + r for r in range(HOT_RESIDUES)} | set(MOST_CALLED_SIZES)
        base = tiled_base(largest)
        sizes |= {base + r for r in range(RESIDUES)}
        sizes |= {base + s for s in range(SUB_TILE, SUB_TILE_SPAN + 1, SUB_TILE)}
        sizes |= {WIDE_TILED_BASE + (1 << j) for j in range(6, WIDE_TILED_BASE.bit_length() - 2)}
    for k in range(1, MAX_POWER + 1):
        sizes |= {2**k - 1, 2**k, 2**k + 1}
    sizes |= {m << k for m in ODD_FACTORS for k in range(5, MAX_POWER) if m << k <= 2**MAX_POWER}
    return sorted(s for s in sizes if s >= 1 and (largest is None or s <= largest))


def swept_dims(op: OpSpec) -> list[str]:
    """The dims a kernel loops over inside a row: every dim that is not a lead dim
    (logp's vocab; linear_logp's hidden and vocab), in spec order."""
    return [d for d in op.dims if d not in op.lead]


def sweep_shapes(
    op: OpSpec, rows: int, full: bool = True, wider_than: dict[str, int] | None = None
) -> list[tuple[str, dict[str, int]]]:
    """(label, sizes) of every swept shape, dim by dim, ascending; then the wide batches
    and the long lead; without ``full``, the size edges only (no residues mod 64, no wide
    batches, no long lead); with ``wider_than``, a dim's sizes past its value only.

    While one dim is swept the other inner dims sit at their defaults, at most
    ``OTHER_INNER`` (linear_logp's weight is vocab x hidden: a 2^17 hidden at the default
    vocab would be 131M elements); the long lead has its largest inner dim at its default,
    at most ``LONG_INNER`` (65,537 x 257 rows hold 2^24 elements, past a 16M-element
    chunk), the others at most ``OTHER_INNER``.
    """
    inner = {d: op.dims[d].default for d in swept_dims(op)}
    shapes = []
    for dim in swept_dims(op):
        others = _other_inner(inner, dim)
        for size in sweep_sizes(dim, op.dims[dim].sweep_max, residues=full):
            if wider_than is not None and size <= wider_than.get(dim, 0):
                continue
            shapes.append((f"{dim}={size}", {**lead_sizes(op, rows), **others, dim: size}))
    if op.lead and full:
        shapes += joint_shape(op, rows)
        shapes += wide_batches(op, inner)
        widest = max(inner, key=inner.get) if inner else None
        long = {d: min(v, LONG_INNER if d == widest else OTHER_INNER) for d, v in inner.items()}
        shapes.append((f"{LONG_ROWS} rows", {**lead_sizes(op, LONG_ROWS), **long}))
    return shapes


def far_rows_shape(op: OpSpec, rows: int = LONG_ROWS) -> tuple[str, dict[str, int]]:
    """(label, sizes) of the far-rows lead: ``rows`` rows (LONG_ROWS, or WIDE_BLOCK_ROWS),
    the widest inner dim at FAR_INNER (within its ``sweep_max``), the others at their
    defaults, at most OTHER_INNER."""
    inner = {d: op.dims[d].default for d in swept_dims(op)}
    widest = max(inner, key=inner.get)
    size = min(FAR_INNER, op.dims[widest].sweep_max or FAR_INNER)
    sizes = {**lead_sizes(op, rows), **_other_inner(inner, widest), widest: size}
    return f"{rows} rows at {widest}={size}", sizes


def huge_rows_shapes(op: OpSpec) -> list[tuple[str, dict[str, int]]]:
    """The huge leads (:func:`huge_rows_shape`): past 2^31 elements at HUGE_INNER (a flat
    offset wraps in a row of a real vocabulary), and past 65,535 blocks of 16,384 elements
    at NARROW_HUGE_INNER, each once."""
    narrow = (NARROW_HUGE_INNER, NARROW_HUGE_ELEMENTS, "past 65,535 blocks of 16,384 elements")
    found = [huge_rows_shape(op), huge_rows_shape(op, *narrow)]
    return [s for s in found if s is not None]


def short_rows_shape(op: OpSpec) -> tuple[str, dict[str, int]] | None:
    """The short-row huge lead (:func:`huge_rows_shape` at SHORT_HUGE_INNER, whole pages
    or not), judged in memory as the far rows are."""
    why = "past 65,535 blocks of 4,096 elements at short rows"
    return huge_rows_shape(op, SHORT_HUGE_INNER, SHORT_HUGE_ELEMENTS, why, page=1)


def huge_rows_shape(
    op: OpSpec,
    inner_size: int = HUGE_INNER,
    elements: int = HUGE_ELEMENTS,
    why: str = "past 2^31 elements",
    page: int = PAGE_ELEMENTS_16,
) -> tuple[str, dict[str, int]] | None:
    """(label, sizes) of a huge lead: the widest inner dim of the row-wise float inputs
    at ``inner_size`` (within its ``sweep_max``, a multiple of ``page``: whole pages of
    16-bit rows, which mirroring needs), the others as in the far-rows lead, and enough
    rows past JUDGED that the last JUDGED rows of the widest row-wise input start past
    ``elements`` elements; None where no row-wise float input has an inner dim, or its
    ``sweep_max`` is below ``page``."""
    rowwise = [i for i in op.inputs if op.is_row_wise(i) and i.dtype in ("case", "float32")]
    dims = {d for i in rowwise for d in i.shape[len(op.lead) :] if d in op.dims}
    if not op.lead or not dims:
        return None
    inner = {d: op.dims[d].default for d in swept_dims(op)}
    widest = max(sorted(dims), key=lambda d: inner.get(d, 0))
    size = min(inner_size, op.dims[widest].sweep_max or inner_size)
    size -= size % page
    if size < page:
        return None
    sizes = {**_other_inner(inner, widest), widest: size}
    per_row = max(math.prod(sizes.get(d, 1) for d in i.shape[len(op.lead) :]) for i in rowwise)
    rows = -(-elements // per_row) + JUDGED
    return f"{rows} rows at {widest}={size} ({why})", {
        **lead_sizes(op, rows),
        **sizes,
    }


def narrowest_dtype(op: OpSpec) -> str | None:
    """The first of the grid's dtypes of the fewest bytes (bf16 of fp32, bf16, fp16): the
    huge lead's, 4 GiB of a row-wise input where fp32 would take 8."""
    sizes = {d: dtypes.torch_dtype(d).itemsize for d in op.grid.dtypes}
    return min(op.grid.dtypes, key=sizes.get) if sizes else None


def _other_inner(inner: dict[str, int], dim: str) -> dict[str, int]:
    """The inner dims other than the swept ``dim``, each at most OTHER_INNER."""
    return {d: min(v, OTHER_INNER) for d, v in inner.items() if d != dim}


def widest_batches(op: OpSpec) -> list[tuple[str, dict[str, int]]]:
    """(label, sizes) of the widest wide batches: each swept dim at its
    widest swept size with WIDEST_BATCH_ELEMENTS worth of rows (within WIDE_ROWS), the
    other inner dims at their defaults."""
    if not op.lead:
        return []
    inner = {d: op.dims[d].default for d in swept_dims(op)}
    return wide_batches(op, inner, widest_only=True, elements=WIDEST_BATCH_ELEMENTS)


def shifted_batch(op: OpSpec, label: str, sizes: dict[str, int]) -> tuple[str, dict] | None:
    """(label, sizes) of a widest batch (``label``, ``sizes``) as two sequences, to be
    placed as ``[:, :-1]`` views of a buffer a position longer (``rows.shifted_rows``),
    or None for an op of one lead dim. A kernel may keep no contiguous copy of a big
    strided input (a 1-2 GB ``logits[:, :-1]``) and walk its rows by one pitch only past
    a size (round-27 red teams' logp backward and 16-bit rms_norm, from 2^24 elements,
    where the contract's views stop); the rows' results keep their bits."""
    if len(op.lead) != 2:
        return None
    length = math.prod(sizes.get(d, 1) for d in op.lead) // 2
    inner = {d: n for d, n in sizes.items() if d not in op.lead}
    lead = dict(zip(op.lead, (2, length)))  # spec order: its --shape reads as the others'
    return f"{label}, as 2 shifted sequences of {length}", {**lead, **inner}


def joint_shape(op: OpSpec, rows: int) -> list[tuple[str, dict[str, int]]]:
    """With two inner dims or more (linear_logp's hidden and vocab), one shape with each at
    a real model's size at once (JOINT_SIZES), within its ``sweep_max``; none otherwise.

    Each dim is swept with the others at OTHER_INNER or less, and the grid keeps the
    product small, so a kernel that picks its path by them together (a fused
    tensor-core path for a real lm_head, past hidden 256 and vocab 8,192, rounding fp32
    operands to TF32: ``lm_head_bugs``, a round-14 red team's, passed every check)
    never took it."""
    dims = swept_dims(op)
    if len(dims) < 2:
        return []
    sizes = {}
    for d in dims:
        size = JOINT_SIZES[VOCAB_DIM] if d == VOCAB_DIM else JOINT_SIZES[""]
        sizes[d] = min(size, op.dims[d].sweep_max or size)
    label = "every inner dim at once: " + ", ".join(f"{d}={n}" for d, n in sizes.items())
    return [(label, {**lead_sizes(op, rows), **sizes})]


class SweptShape(NamedTuple):
    """One swept shape: its label (``vocab=257``) and its sizes."""

    label: str
    sizes: dict[str, int]


class WideBatch(SweptShape):
    """A wide batch: where the sweep judges the backward with each grad input alone too
    (a weight-only backward of a frozen input, a LoRA model's first norm, may block its
    rows per program past 1,024 rows and drop the tail: a round-23 red team's rms_norm)."""

    __slots__ = ()


def wide_batches(
    op: OpSpec, inner: dict[str, int], widest_only: bool = False, elements: int = WIDE_ELEMENTS
) -> list[WideBatch]:
    """(label, sizes) of the wide batches: each inner dim at 2^k + 1 (k in WIDE_POWERS)
    and at its widest swept size (``widest_only``: there alone), with ``elements`` worth
    of rows (within WIDE_ROWS), the other inner dims as in the sweep."""
    shapes = []
    for dim in swept_dims(op):
        others = _other_inner(inner, dim)
        sizes = sweep_sizes(dim, op.dims[dim].sweep_max, residues=False)
        powers = set() if widest_only else {2**k + 1 for k in WIDE_POWERS}
        picks = sorted({s for s in sizes if s in powers} | {sizes[-1]})
        for size in picks:
            rows = min(max(elements // size, WIDE_ROWS[0]), WIDE_ROWS[1])
            label = f"{rows} rows at {dim}={size}"
            shapes.append(WideBatch(label, {**lead_sizes(op, rows), **others, dim: size}))
    return shapes


def hot_backward_calls(label: str) -> int:
    """How many more backward calls the sweep makes of a hot shape: as many as the
    forward's at LONG_HOT_SIZE (an autotuner's every configuration on a long row), at
    most HOT_BACKWARD_CALLS elsewhere (all of them cost the default run 6%)."""
    hot = hot_calls(label)
    long = label.partition("=")[2] == str(LONG_HOT_SIZE)
    return hot if long else min(hot, HOT_BACKWARD_CALLS)


def hot_calls(label: str) -> int:
    """How many more times the sweep calls a swept shape (``dim=size``) on its inputs,
    judging each call whose bits differ from the first's, 0 for none: each residue mod
    HOT_RESIDUES past SWEEP_BASE, small rows whose extra calls cost little, one of
    HOT_CALLS by the residue's count of set bits, so every class of residues mod 16 (and
    the upper half mod 128) meets each; MOST_CALLED_SIZES,
    LONG_HOT_CALLS."""
    dim, sep, size = label.partition("=")
    if not sep or " " in dim:
        return 0
    if int(size) in MOST_CALLED_SIZES:
        return LONG_HOT_CALLS
    residue = int(size) - SWEEP_BASE
    if not 0 <= residue < HOT_RESIDUES:
        return 0
    return HOT_CALLS[residue.bit_count() % len(HOT_CALLS)]


def limit_margin(outcome: Outcome) -> float | None:
    """A precision judge's error over its limit (1: at the limit), None for the others."""
    limit = (outcome.tolerance or {}).get("limit")
    error = outcome.metrics.get("max_abs", outcome.metrics.get("rel_l1"))
    if not limit or error is None:
        return None
    return error / limit


def shape_flag(sizes: dict[str, int]) -> str:
    return "--shape " + ",".join(f"{k}={v}" for k, v in sizes.items())


class ShapeSweep(Check):
    name = "shape_sweep"
    # backward_precision's floor in fp32 ulps (SWEEP_FLOOR_ULP); 0: no precision judges
    # (an op's spec says why)
    PARAMS = {"precision_floor_ulp": SWEEP_FLOOR_ULP}
    small_inputs = True
    draws_own = True
    shrinkable = False  # it never depends on the case's own shape: the message names one
    summary = (
        "forward and backward within the contract tolerance, and as precise as the fp32 "
        "reference (edges rows), at tail sizes: every residue mod 128 in one tile and mod "
        "64 past several, every multiple of 64 to 4,096 past 24,576, each largest "
        "power-of-two divisor past 98,304, "
        "2^k-1/2^k/2^k+1 and 3/5/7/9 x 2^k up to 2^17, "
        "real models' vocabularies up to 262,208 (other dims: hidden and MLP widths), and "
        "65,537 rows (also at width 2,560); rows past 2^31 elements and 2^21 rows of 128 "
        f"at the narrowest dtype; {HOT_RESIDUES + len(MOST_CALLED_SIZES)} shapes a swept "
        "dim called 33 to 2,049 times, each call whose bits change judged"
    )

    def __init__(self, ctx, params=None):
        super().__init__(ctx, params)
        self.shapes = 0
        # (label, where: how to rerun it, sizes, outcome, judge) of the failing shape
        self.failed: tuple[str, str, dict, Outcome, str] | None = None
        self.worst: dict[str, float] = {}
        self.margins: dict[str, float] = {}  # the precision judges' largest error / limit
        self.unjudged: list[list[str]] = []  # [shape, why] of each left unjudged
        self._classes: list[type[Check]] | None = None

    @classmethod
    def lead_work(cls, op, case, params: dict) -> int:
        """The far-rows lead's, at the grid's attributes or in its first dtype (an upper
        bound on :meth:`_far_rows_here`'s big-batch case), and the huge leads' together in
        the narrowest dtype's case at the grid's attributes; the widest batches' at the
        grid's attributes and in the narrowest dtype's cases."""
        full = not op.off_grid(case.attributes)
        narrowest = full and case.dtype == narrowest_dtype(op)
        work = 0
        if swept_dims(op) and (full or at_first_dtype(op, case)):
            rows = WIDE_BLOCK_ROWS if narrowest else LONG_ROWS
            work = math.prod(far_rows_shape(op, rows)[1].values())
        if op.lead and (full or case.dtype == narrowest_dtype(op)):
            work = max(work, WIDEST_BATCH_ELEMENTS)
        if narrowest:
            huge = [*huge_rows_shapes(op), short_rows_shape(op)]
            work = max(work, sum(math.prod(s[1].values()) for s in huge if s is not None))
        return work

    def skip_reason(self) -> str | None:
        if self.ctx.op.tolerance("forward_accuracy", self.ctx.case.dtype) is None:
            return f"the spec has no tolerance.forward_accuracy for {self.ctx.case.dtype}"
        if not swept_dims(self.ctx.op) and not self.ctx.op.lead:
            return f"op {self.ctx.op.name} has no row-wise inputs"
        if not self._judge_classes():
            return "the spec turns every judge off (enabled = false)"
        return None

    def trials_wanted(self, trials: list[Trial]) -> list[Trial]:
        return trials[:1]  # one draw per shape: the sweep's coverage is its shapes

    def observe(self, trial: Trial) -> None:
        # every distribution of the case and edges, one row each (a mixed trial deals
        # them in turn)
        dist = MIX.join(dict.fromkeys((*self._own_distributions(), SWEEP_DISTRIBUTION)))
        rows = max(3, len(parts_of(dist)))
        full = not self.ctx.op.off_grid(self.ctx.case.attributes)  # an attribute sweep: edges
        narrow = self.ctx.case.dtype == narrowest_dtype(self.ctx.op)
        for shape in sweep_shapes(self.ctx.op, rows, full, self._wider_than(full)):
            if self.failed is not None:
                return
            label, sizes = shape
            self.progress(label)
            self.shapes += 1
            hot = hot_calls(label) if full else 0
            self._judge(trial.seed, dist, label, sizes, hot, frozen=isinstance(shape, WideBatch))
        narrowest = full and narrow
        if self.failed is None and swept_dims(self.ctx.op) and self._far_rows_here(full):
            rows = WIDE_BLOCK_ROWS if narrowest else LONG_ROWS
            self._judge_far_rows(trial.seed, MIX.join(self._own_distributions()), rows)
        if self.failed is None and narrowest:
            self._judge_huge_rows(trial.seed, MIX.join(self._own_distributions()))
        # after the huge leads: a block kept from it could cut their memory budget
        widest = narrow or full  # the grid's attributes in every dtype, the sweeps' narrowest
        if self.failed is None and widest and far_rows_unjudged(self.ctx.op) is None:
            self._judge_widest_batches(trial.seed, MIX.join(self._own_distributions()))

    def _own_distributions(self) -> list[str]:
        """The case's distributions, each mixed one in its parts (a repro's
        ``--distributions normal+large`` is one name of two parts)."""
        return [p for d in self.ctx.case.distributions for p in parts_of(d)]

    def _far_rows_here(self, full: bool) -> bool:
        """Whether this case judges the far-rows lead: at the grid's attributes, and in the
        big-batch case's first dtype (the swept values together: a grid-stride path past
        65,535 blocks may forget an attribute, as a narrower one does not)."""
        return full or (self.ctx.at_first_dtype() and self.ctx.is_big_batch_case())

    def _judge_widest_batches(self, seed: int, dist: str) -> None:
        """The widest wide batches (:func:`widest_batches`), each judged at its first and
        last rows against their own gold and every row between by its bits, each call
        alone within its memory budget (a full float64 gold of 2^28 elements, two cases at
        once, ran out); then each again as shifted sequences (:func:`shifted_batch`)."""
        for label, sizes in widest_batches(self.ctx.op):
            self.progress(label)
            where = shape_flag(sizes)
            self._judge_within_budget(label, where, sizes, seed, dist, placed_rows)
            shifted = shifted_batch(self.ctx.op, label, sizes)
            if self.failed is None and shifted is not None:
                label, sizes = shifted
                self.progress(label)
                where = f"{shape_flag(sizes)}, each row-wise input and upstream [:, :-1]"
                self._judge_within_budget(label, where, sizes, seed, dist, shifted_rows)
            if self.failed is not None:
                return

    def _judge_huge_rows(self, seed: int, dist: str) -> None:
        """The huge leads (:func:`huge_rows_shapes`), mirrored, then the short-row one
        (:func:`short_rows_shape`), each judged at its first and last rows
        (``checks/huge_rows.py``) and the rows between by their bits: with grad where the
        backward is judged (its outputs too), else, or where that call runs out of its
        memory budget, forward only; unjudged where that does too, and the result says so."""
        if far_rows_unjudged(self.ctx.op) is not None:
            return  # the plan lists it as not checked
        for label, sizes in huge_rows_shapes(self.ctx.op):
            why = mirroring_available()
            if why is not None:
                self.unjudged.append([label, why])
                continue
            self.progress(label)
            # an ordinary case of it would take a float64 gold of 2^31 elements
            where = f"its first and last {JUDGED} rows; the repro reruns it"
            self._judge_within_budget(label, where, sizes, seed, dist, mirrored_placement)
            if self.failed is not None:
                return
        short = short_rows_shape(self.ctx.op)
        if short is not None:  # in memory, as a widest batch: its repro is a case of it
            label, sizes = short
            self.progress(label)
            self._judge_within_budget(label, shape_flag(sizes), sizes, seed, dist, placed_rows)

    def _judge_within_budget(
        self, label: str, where: str, sizes: dict, seed: int, dist: str, place, retry=True
    ) -> bool:
        """A lead judged at its first and last rows, each call alone on the machine within
        its memory budget (``checks/huge_rows.py``): with grad where the backward is
        judged (its outputs too), else, or (``retry``) where that call runs out of its
        budget, forward only; each part left unjudged is listed. True where the first
        try was judged (passed or failed)."""
        classes = self._judge_classes()
        tries = [(False, True)] if BackwardAccuracy in classes else []
        if ForwardAccuracy in classes and (retry or not tries):
            tries.append((True, False))
        for k, (forward, backward) in enumerate(tries):
            what = f"{label}, {'with grad' if backward else 'forward'}"
            try:
                found = judge_far_rows(
                    *(self.ctx, seed, dist, sizes, forward, backward),
                    place=place,
                    guard=lambda: call_alone_within_budget(self.ctx.device, self.ctx.own_process),
                )
            except HugeRowsUnjudged as exc:
                self.unjudged.append([what, str(exc)[:300]])
                if exc.out_of_memory:
                    continue
                return False
            except CandidateFault as exc:
                if not exc.out_of_memory:
                    raise
                self.unjudged.append([what, f"past its memory budget: {str(exc)[:200]}"])
                continue
            self.shapes += 1
            if found is not None:
                self.failed = (label, where, sizes, found[1], found[0])
            return k == 0
        return False

    def _wider_than(self, full: bool) -> dict[str, int] | None:
        """An attribute sweep's widths judged elsewhere, at a dtype other than the grid's
        first: the sweeps' shapes' (and this case's own) size of each dim."""
        if full or self.ctx.at_first_dtype():
            return None
        sizes = self.ctx.sizes
        widths = swept_widths(self.ctx.op, [dict(s) for s in self.ctx.op.grid.shapes])
        return {d: max(widths.get(d, 0), sizes.get(d, 0)) for d in {*widths, *sizes}}

    def _judge_classes(self) -> list[type[Check]]:
        """Those of JUDGES that apply to this case (on in the spec, a tolerance exists,
        backward checks are on): shape-independent, so decided once."""
        if self._classes is None:
            precision = bool(self.params["precision_floor_ulp"])
            self._classes = [
                cls
                for cls in JUDGES
                if (precision or cls.name not in PRECISION_JUDGES)
                and self.ctx.op.check_enabled(cls.name)
                and cls(self.ctx).skip_reason() is None
            ]
        return self._classes

    def _judge(
        self, seed: int, dist: str, label: str, sizes: dict, hot: int, frozen: bool = False
    ) -> None:
        """Judge one swept shape by each of JUDGES, then its ``hot`` calls; ``frozen``: the
        backward again with each grad input alone requiring grad (a wide batch's)."""
        # shared with the other candidates, or not (small shapes: a file per part would
        # cost more than drawing them again)
        sub = self.ctx.at_sizes(sizes, share=math.prod(sizes.values()) >= SHARE_ELEMENTS)
        at = Trial(sub, seed, dist)
        try:
            for cls in self._judge_classes():
                if not self._judged(cls, sub, at, label, sizes, frozen=frozen):
                    return
            if hot and ForwardAccuracy in self._judge_classes():
                self._judge_hot_calls(sub, at, label, sizes, hot)
        finally:
            at.release()

    def _judge_hot_calls(self, sub, at: Trial, label: str, sizes: dict, hot: int) -> None:
        """``hot`` more forward calls of the judged trial's inputs, then
        :func:`hot_backward_calls` backward calls (a backward kernel's autotuner or cache
        switches too), each whose bits differ from the judged call's judged like it
        (``checks/repeated_calls.py``); a fault names the shape and the call."""
        where = f"at {label}, "
        kinds = [("forward", ForwardAccuracy, lambda: at.outputs, hot)]
        if BackwardAccuracy in self._judge_classes():
            calls = hot_backward_calls(label)
            kinds.append(("backward", BackwardAccuracy, at.backward_results, calls))
        for kind, cls, first, calls in kinds:
            call = partial(at.call_again, kind)
            for number, results in differing_calls(call, first(), calls, kind, where):
                again = at.repeated(kind, results)
                try:
                    judged = f"{label}, {call_label(kind, number, calls + 1)}"
                    if not self._judged(cls, sub, again, judged, sizes):
                        return
                finally:
                    again.release()

    def _judge_far_rows(self, seed: int, dist: str, rows: int) -> None:
        """The far-rows lead (:func:`far_rows_shape`) of ``rows`` rows, judged at its first
        and last rows. At WIDE_BLOCK_ROWS each call within its memory budget (twice the
        LONG_ROWS lead's: up to 14 GB); where that is not judged in full, the LONG_ROWS
        lead as at the other dtypes (never a forward-only retry of twice its size)."""
        if far_rows_unjudged(self.ctx.op) is not None:
            return  # the plan lists it as not checked
        if rows == WIDE_BLOCK_ROWS:
            label, sizes = far_rows_shape(self.ctx.op, rows)
            self.progress(label)
            where = shape_flag(sizes)
            if self._judge_within_budget(label, where, sizes, seed, dist, placed_rows, False):
                return  # judged (a failure too: its one try was judged)
        label, sizes = far_rows_shape(self.ctx.op, LONG_ROWS)
        self.progress(label)
        self.shapes += 1
        classes = self._judge_classes()
        found = judge_far_rows(
            *(self.ctx, seed, dist, sizes, ForwardAccuracy in classes, BackwardAccuracy in classes),
            frozen_call=True,
        )
        if found is not None:
            name, outcome = found
            self.failed = (label, shape_flag(sizes), sizes, outcome, name)

    def _judged(
        self,
        cls: type[Check],
        sub,
        at: Trial,
        label: str,
        sizes: dict,
        every_row: bool = False,
        frozen: bool = False,
    ) -> bool:
        """Judge ``at`` with one of JUDGES; False (and the failure kept) when it fails. A
        contract failure where the honest reference misses the contract too is judged by
        that direction's precision rule instead, on ``every_row`` (CONTRACT_UNMET_BY).
        ``frozen``: the contract's backward with its frozen-input calls."""
        params = {**sub.op.check_params(cls.name), **SWEEP_PARAMS.get(cls.name, {})}
        if frozen and cls is BackwardAccuracy:
            params["frozen_inputs"] = True
        if cls.name == BackwardPrecision.name:
            params["floor_ulp"] = self.params["precision_floor_ulp"]
        if cls.name not in PRECISION_JUDGES:  # the contract: the case's own rows
            params["only"] = tuple(self._own_distributions())
        elif every_row:
            params["only"] = ()
        judge = cls(sub, params)
        judge.observe(at)
        outcome = judge.outcome()
        # no verdict where the reference misses it too: its error is not this judge's worst
        if outcome.status == "fail" and self._reference_misses(cls, sub, at, params):
            return self._judged_by_precision(cls, sub, at, label, sizes)
        if "max_abs" in outcome.metrics and "limit" not in (outcome.tolerance or {}):
            worst = max(self.worst.get(judge.name, 0.0), outcome.metrics["max_abs"])
            self.worst[judge.name] = worst
        margin = limit_margin(outcome)
        if margin is not None:
            self.margins[judge.name] = max(self.margins.get(judge.name, 0.0), margin)
        if outcome.status == "fail":
            self.failed = (label, shape_flag(sizes), sizes, outcome, judge.name)
            return False
        return True

    def _reference_misses(self, cls: type[Check], sub, at: Trial, params: dict) -> bool:
        """Whether the honest fp32 reference, in the candidate's place on ``at``, fails
        the contract judge ``cls`` too (no reference: False, the failure stands)."""
        if cls.name not in CONTRACT_UNMET_BY or sub.reference_fn is None:
            return False
        kind = "forward" if cls is ForwardAccuracy else "backward"
        reference = at.as_reference(kind)
        # the frozen-input calls are the candidate's own: never the reference's measure
        params = {**params, "frozen_inputs": False} if "frozen_inputs" in params else params
        try:
            judge = cls(sub, params)
            judge.observe(reference)
            return judge.outcome().status == "fail"
        finally:
            reference.release()

    def _judged_by_precision(self, cls: type[Check], sub, at: Trial, label: str, sizes) -> bool:
        """A shape whose contract ``cls`` the honest reference misses too: judged by the
        precision rule of that direction on every row, or, where that rule is off for the
        op, not at all; listed as not checked either way."""
        by = CONTRACT_UNMET_BY[cls.name]
        judged = by in self._judge_classes()
        why = "the honest fp32 reference misses it too: " + (
            f"judged by {by.name} there" if judged else f"{by.name} is off, nothing judged there"
        )
        self.unjudged.append([f"{cls.name} tolerance at {label}", why])
        return self._judged(by, sub, at, label, sizes, every_row=True) if judged else True

    def outcome(self) -> Outcome:
        metrics = {"shapes": self.shapes, **{f"{k}_max_abs": v for k, v in self.worst.items()}}
        metrics.update({f"{k}_margin": v for k, v in self.margins.items()})
        tol = {"mode": "contract tolerance"}
        if self.unjudged:  # the run's list of what was not checked names them
            metrics["not_judged"] = self.unjudged
        if self.failed is None:
            return Outcome("pass", "", metrics, tol)
        label, where, sizes, found, judge = self.failed
        message = f"at {label} ({where}), {judge}: {found.message}"
        metrics["failing_shape"] = dict(sizes)
        metrics["failing_check"] = judge
        for key in ("max_abs", "n_nonfinite", "ratio", "rel_l1"):  # the failing shape's
            if key in found.metrics:
                metrics[key] = found.metrics[key]
        return Outcome(
            "fail",
            message,
            metrics,
            found.tolerance,
            found.seed,
            found.distribution,
            MIX.join(self.ctx.case.distributions),  # reruns it: the sweep adds its edges row
        )
