"""Small pure functions behind every verdict: errors, ULPs and bit patterns.

Comparisons happen in float64 against the float64 gold. "Bitwise" always means equal
bit patterns of the integer view: +0.0 and -0.0 differ, and so do two NaN payloads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernelcheck.checks import device_metrics, fastpath
from kernelcheck.checks.fastpath import ULP_BUCKETS

_INT_VIEW = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The integer view of a float tensor (a copy of other dtypes unchanged)."""
    view = _INT_VIEW.get(t.dtype)
    return t.contiguous().view(view) if view is not None else t


_DIGEST_WEIGHTS: dict[int, torch.Tensor] = {}
DIGEST_CHUNK_ELEMENTS = 1 << 18  # 1 MiB of int32: cache-sized, 3x faster than 4M


def _digest_weights(cols: int) -> torch.Tensor:
    w = _DIGEST_WEIGHTS.get(cols)
    if w is None:
        gen = torch.Generator().manual_seed(0x6B63)  # fixed: digests compare across calls
        w = torch.randint(-(2**30), 2**30, (cols,), dtype=torch.int32, generator=gen) | 1
        if len(_DIGEST_WEIGHTS) >= 8:  # a case digests a few row lengths (inputs, outputs)
            _DIGEST_WEIGHTS.pop(next(iter(_DIGEST_WEIGHTS)))
        _DIGEST_WEIGHTS[cols] = w
    return w


def _words(t: torch.Tensor) -> torch.Tensor:
    """``[rows, n]`` as 32-bit words of its bit pattern (64-bit values give two each)."""
    b = bits(t).contiguous()
    if b.dtype == torch.bool or b.element_size() < 4:
        return b.to(torch.int32)
    return b.view(torch.int32)


def row_digests(t: torch.Tensor) -> torch.Tensor:
    """One 32-bit digest per leading row of ``t`` ([rows, ...]), from its bit pattern.

    ``sum(word[j] * w[j]) mod 2^32`` over the row's 32-bit words with fixed odd weights
    ``w``: rows that differ in one element always get different digests (an odd weight
    times a nonzero word difference is never 0 mod 2^32); rows that differ in several
    collide with odds of about 2^-32. A bitwise comparison keeps 4 bytes per row instead
    of the row, in cache-sized row chunks (1 GB digested in about 0.1 s here), so a
    repeated run never holds two copies of a Qwen3-sized gradient.
    """
    t2 = t.reshape(t.shape[0], -1) if t.dim() > 0 else t.reshape(1, 1)
    rows, cols = t2.shape
    if t2.is_contiguous() and not device_metrics.applies(t2):  # one pass in libkc_metrics_cpu
        view = bits(t2)
        per_word = 2 if view.element_size() == 8 else 1
        found = fastpath.row_digests(view, _digest_weights(cols * per_word))
        if found is not None:
            return found
    # torch passes where the rows are (a GPU's digests are its own, 4 bytes a row come back)
    out = torch.empty(rows, dtype=torch.int32, device=t2.device)
    step = max(1, DIGEST_CHUNK_ELEMENTS // max(1, cols))
    for start in range(0, rows, step):
        words = _words(t2[start : start + step])
        w = _digest_weights(words.shape[1]).to(words.device)
        out[start : start + step] = torch.mul(words, w).sum(dim=1, dtype=torch.int32)
    return out.cpu()


def first_bit_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    """``0x3f800000 vs 0x3f800001 (1.0 vs 1.0000001)`` for the first differing element."""
    ia, ib = bits(a).reshape(-1), bits(b).reshape(-1)
    idx = int((ia != ib).nonzero()[0])
    width = a.element_size() * 2
    mask = (1 << (8 * a.element_size())) - 1
    va, vb = a.reshape(-1)[idx].item(), b.reshape(-1)[idx].item()
    return (
        f"0x{int(ia[idx]) & mask:0{width}x} vs 0x{int(ib[idx]) & mask:0{width}x} ({va!r} vs {vb!r})"
    )


def ordered_int(x: torch.Tensor) -> torch.Tensor:
    """Map fp32 to int64 so that adjacent floats differ by 1 (and -0.0 == +0.0)."""
    i = x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return torch.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(candidate: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """How many fp32 steps the candidate is from the gold rounded to fp32."""
    return (ordered_int(candidate) - ordered_int(gold.to(torch.float32))).abs()


_STEP_DTYPES = {  # the dtypes a ULP histogram counts steps of: (name, int view, magnitude mask)
    torch.float32: ("fp32", torch.int32, 0x7FFFFFFF),
    torch.bfloat16: ("bf16", torch.int16, 0x7FFF),
    torch.float16: ("fp16", torch.int16, 0x7FFF),
}
_NONFINITE_BITS = {torch.float32: 0x7F800000, torch.bfloat16: 0x7F80, torch.float16: 0x7C00}


def step_distance(candidate: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(distance, wrapped): int32 steps of the candidate's dtype (fp32, bf16 or fp16) from
    the gold rounded to it, in int32 passes.

    On magnitudes (the int view without its sign bit): their difference where the signs
    agree and their sum where they differ (-0.0 against +0.0 is 0), blended by the sign
    difference's mask (bitwise: 2.3x faster than ``torch.where`` here). Only an fp32 sum
    can pass 2^31 (huge values of opposite sign); ``wrapped`` marks those, their distance
    negative, and is None when there are none. NaN/Inf elements get meaningless
    distances: callers mask them.
    """
    dtype = candidate.dtype if candidate.dtype in _STEP_DTYPES else torch.float32
    _, view, mask = _STEP_DTYPES[dtype]
    ci = candidate.to(dtype).contiguous().view(view).to(torch.int32)
    gi = gold.to(dtype).contiguous().view(view).to(torch.int32)
    differ = (ci ^ gi).bitwise_right_shift_(31)  # -1 where the signs differ, else 0
    mc, mg = ci & mask, gi & mask
    dist = (mc - mg).abs_()
    dist += mc.add_(mg).sub_(dist).bitwise_and_(differ)  # the sum where the signs differ
    if view is not torch.int32 or int(dist.min()) >= 0:
        return dist, None
    return dist, dist < 0


def max_ulp_distance(candidate: torch.Tensor, gold: torch.Tensor, steps=None) -> int:
    """``ulp_distance(candidate, gold).max()`` in fp32 steps, exactly: int32 passes of
    :func:`step_distance` (or its result ``steps``, already taken), and the int64 path of
    :func:`ulp_distance` for the few wrapped."""
    dist, wrapped = steps or step_distance(candidate.to(torch.float32), gold)
    if wrapped is None:
        return int(dist.max())
    exact = int(ulp_distance(candidate[wrapped], gold[wrapped]).max())
    return max(exact, int(dist.masked_fill(wrapped, 0).max()))


NONFINITE_BUCKET = ULP_BUCKETS - 1
_EXPONENT_BIAS = 1022  # a double's biased exponent of an integer d >= 1 is 1022 + bit length
_EXPONENT_BIAS_32 = 126  # a float32's: 126 + bit length


def ulp_log2_histogram(
    candidate: torch.Tensor, gold: torch.Tensor, finite: bool = False, steps=None
) -> torch.Tensor:
    """How many elements are how many steps of the candidate's dtype (fp32, bf16, fp16)
    from the gold rounded to it, by log2 bucket: ``ULP_BUCKETS`` int64 counts, whatever
    the shape. Bucket k holds distances whose bit length is k (0: exact; 1: one step; 2:
    2-3; ...; 32: 2^31 or more); the last bucket counts NaN/Inf where the gold is finite
    and a non-finite gold the candidate missed. Log2 buckets because errors spread over
    orders of magnitude: a correctly rounded kernel sits in 0-1, bf16 accumulation far out.

    ``finite``: the caller knows every element of both is finite (skips the NaN/Inf
    masks); ``steps``: :func:`step_distance` of the pair, already taken.
    """
    c = candidate.detach().reshape(-1)
    g = gold.detach().reshape(-1).to(c.device)
    dist, wrapped = steps or step_distance(c, g)
    # the bit length of each distance, from the exponent of it as a float: exact in
    # float32 below 2^24 (a larger one could round up to the next power of two there)
    dist = dist.reshape(-1)
    if int(dist.max()) < 1 << 24:
        bias, bucket = _EXPONENT_BIAS_32, dist.float().view(torch.int32) >> 23
    else:
        bias, bucket = _EXPONENT_BIAS, dist.double().view(torch.int64) >> 52
    if wrapped is not None:
        bucket.masked_fill_(wrapped.reshape(-1), bias + 32)
    if not finite:
        dtype = c.dtype if c.dtype in _STEP_DTYPES else torch.float32
        _, view, mask = _STEP_DTYPES[dtype]
        inf_bits = _NONFINITE_BITS[dtype]
        ci, gi = c.to(dtype).view(view), g.to(dtype).view(view)
        odd = ((ci & mask) >= inf_bits) | ((gi & mask) >= inf_bits)
        if bool(odd.any()):  # NaN/Inf on either side: exact when the bits agree, else missed
            bucket.masked_fill_(odd & (ci == gi), 0)
            bucket.masked_fill_(odd & (ci != gi), bias + NONFINITE_BUCKET)
    counts = torch.bincount(bucket, minlength=bias + ULP_BUCKETS).cpu().long()
    counts[bias] += counts[0]  # 0 steps: a float's 0.0 has exponent bits 0
    return counts[bias:]


def ulp_bucket_label(k: int) -> str:
    """``0``, ``1``, ``2-3``, ..., ``>=2^31``, ``NaN/Inf``: what bucket k of
    :func:`ulp_log2_histogram` holds."""
    if k == NONFINITE_BUCKET:
        return "NaN/Inf"
    if k <= 1:
        return str(k)
    if k == 32:
        return ">=2^31"
    lo, hi = 1 << (k - 1), (1 << k) - 1
    return f"{lo}-{hi}" if hi < 1 << 12 else f"2^{k - 1}+"


COLUMN_BUCKETS = 64


def column_bucket_max(err: torch.Tensor, buckets: int = COLUMN_BUCKETS):
    """The worst error per column bucket of ``err`` ([rows, cols], absolute errors):
    (maxima of ``min(buckets, cols)`` buckets of ``cols // buckets`` columns each, and the
    maximum over the ``cols % buckets`` columns after them, or None when there are none).

    A fixed count whatever the row length: at V = 151936 each bucket is 2374 columns. The
    remainder stands apart because a kernel's tail (the columns past its last full vector
    or tile) is where tail bugs live; the max over rows is one pass over ``err``.
    """
    cols = err.shape[-1]
    return column_buckets(err.reshape(-1, cols).amax(dim=0), buckets)


def column_buckets(per_column: torch.Tensor, buckets: int = COLUMN_BUCKETS):
    """:func:`column_bucket_max` from each column's worst error (``[cols]``)."""
    cols = per_column.shape[0]
    n = min(buckets, cols)
    width = cols // n
    body = per_column[: n * width].view(n, width).amax(dim=1)
    tail = float(per_column[n * width :].max()) if n * width < cols else None
    return body, tail


def max_by_row_class(err: torch.Tensor, classes: int, row_offset: int = 0) -> list[float | None]:
    """The worst error of the rows of each class, row r (counted from ``row_offset``) being
    of class ``r % classes``: a mixed trial's rows are dealt round-robin from its
    distributions, so this is the worst error per distribution. None: no row of that class.
    """
    rows = err.shape[0]
    row_max = err.reshape(rows, -1).amax(dim=1) if err.dim() > 1 else err
    out: list[float | None] = []
    for k in range(classes):
        mine = row_max[(k - row_offset) % classes :: classes]
        out.append(float(mine.max()) if mine.numel() else None)
    return out


def fp32_ulp(value: float) -> float:
    """The spacing of fp32 numbers at ``|value|``."""
    a = torch.tensor(abs(value), dtype=torch.float32)
    return float(torch.nextafter(a, torch.tensor(float("inf"))) - a)


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(out))


def sig3(x: float | None) -> float | None:
    """``x`` to 3 significant digits: plot data, not verdicts, so reports stay small."""
    return None if x is None else float(f"{x:.3g}")


@dataclass
class ErrorProfile:
    """Where one output's (or gradient's) error sits, in a bounded size whatever the shape:
    the data behind the HTML report's plots, fed from the chunks :class:`ErrorStats` reads.

    ``distributions``: row r of the tensor (counted over every chunk) was drawn from
    ``distributions[r % len(distributions)]`` (a mixed trial deals rows round-robin; one
    name for a tensor shared by all rows).
    """

    distributions: list[str]
    ulp_unit: str | None = None  # the dtype whose steps the histogram counts
    ulp_counts: torch.Tensor | None = None
    columns: int = 0  # row length: 0 for one value per row
    column_max: torch.Tensor | None = None
    tail_max: float | None = None
    by_distribution: dict[str, float] = field(default_factory=dict)

    def update(self, c, g, err: torch.Tensor, row_offset: int, finite=False, steps=None) -> None:
        """``err``: the finite ``|c - g|`` of the chunk (NaN/Inf elements as 0); ``finite``
        and ``steps`` as :func:`ulp_log2_histogram` takes them."""
        if c.dtype in _STEP_DTYPES:
            counts = ulp_log2_histogram(c, g, finite, steps)
            self._add_counts(_STEP_DTYPES[c.dtype][0], counts)
        if err.dim() > 1 and err.shape[-1]:
            body, tail = column_bucket_max(err.reshape(err.shape[0], -1))
            self._add_columns(int(err[0].numel()), body, tail)
        worst = max_by_row_class(err, len(self.distributions), row_offset) if err.numel() else []
        self._add_distributions(dict(zip(self.distributions, worst)))

    def update_rows(self, unit: str, fast: fastpath.RowErrors, row_offset: int) -> None:
        """:meth:`update` from a single-pass comparison's per-row and per-column results.

        The per-column maxima of consecutive chunks are merged column by column and put in
        buckets once (:meth:`_flush`): a max of maxima, the same numbers, one op a chunk.
        """
        self._add_counts(unit, fast.ulp_counts)
        per_column = self.__dict__.get("_per_column")
        if per_column is not None and per_column.shape == fast.column_max.shape:
            torch.maximum(per_column, fast.column_max, out=per_column)
        else:
            self._flush()
            self.__dict__["_per_column"] = fast.column_max  # a fresh tensor, ours now
        worst = max_by_row_class(fast.rows[:, 0], len(self.distributions), row_offset)
        self._add_distributions(dict(zip(self.distributions, worst)))

    def _add_counts(self, unit: str, counts: torch.Tensor) -> None:
        self.ulp_unit = unit
        self.ulp_counts = counts if self.ulp_counts is None else self.ulp_counts + counts

    def _flush(self) -> None:
        """Put the pending per-column maxima of :meth:`update_rows` in buckets."""
        per_column = self.__dict__.pop("_per_column", None)
        if per_column is not None:
            body, tail = column_buckets(per_column)
            self._add_columns(per_column.shape[0], body, tail)

    def _add_columns(self, columns: int, body: torch.Tensor, tail: float | None) -> None:
        if "_per_column" in self.__dict__:
            self._flush()  # in the order the chunks came
        if self.column_max is None or columns != self.columns:
            self.columns, self.column_max, self.tail_max = columns, body, tail
            return
        self.column_max = torch.maximum(self.column_max, body)
        if tail is not None:
            self.tail_max = max(self.tail_max or 0.0, tail)

    def _add_distributions(self, worst: dict[str, float | None]) -> None:
        for name, value in worst.items():
            if value is not None:
                self.by_distribution[name] = max(self.by_distribution.get(name, 0.0), value)

    def merge(self, other: ErrorProfile) -> None:
        """Fold another trial's profile of the same output in."""
        other._flush()  # (this one's pending maxima are flushed by _add_columns, in order)
        if other.ulp_counts is not None:
            self._add_counts(other.ulp_unit, other.ulp_counts)
        if other.column_max is not None:
            self._add_columns(other.columns, other.column_max, other.tail_max)
        self._add_distributions(other.by_distribution)

    def to_dict(self) -> dict:
        """JSON-ready: trailing empty ULP buckets left out (the NaN/Inf count apart), floats
        to 3 significant digits."""
        self._flush()
        out: dict = {}
        if self.ulp_counts is not None:
            counts = [int(x) for x in self.ulp_counts[:NONFINITE_BUCKET]]
            while counts and not counts[-1]:
                counts.pop()
            out["ulp"] = {
                "unit": self.ulp_unit,
                "log2_counts": counts,
                "nonfinite": int(self.ulp_counts[NONFINITE_BUCKET]),
            }
        if self.column_max is not None:
            n = len(self.column_max)
            columns = {
                "columns": self.columns,
                "width": self.columns // n,
                "max_abs": [sig3(float(x)) for x in self.column_max],
            }
            if self.tail_max is not None:
                columns["tail_start"] = n * (self.columns // n)
                columns["tail_max_abs"] = sig3(self.tail_max)
            out["columns"] = columns
        if self.by_distribution:
            out["by_distribution"] = {k: sig3(v) for k, v in self.by_distribution.items()}
        return out


@dataclass
class ErrorStats:
    """Streaming error statistics of a candidate against the gold, chunk by chunk.

    An element is bad when ``|c - g| > atol + rtol * |g|``, when the candidate is
    NaN/Inf where the gold is finite, or when gold is +-Inf and the candidate differs.
    """

    atol: float = 0.0
    rtol: float = 0.0
    n: int = 0
    n_bad: int = 0
    n_nonfinite: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int | None = None  # fp32 steps; None: not an fp32 result (no fp32 ulp applies)
    gold_absmax: float = 0.0
    first_bad: tuple | None = None
    first_bad_values: tuple[float, float] | None = None
    first_nonfinite: tuple | None = None
    profile: ErrorProfile | None = None  # where the error sits (for plots); None: not kept

    def update(self, cand: torch.Tensor, gold: torch.Tensor, row_offset: int = 0) -> None:
        """``cand`` and ``gold`` shaped ``[rows, ...]``; ``row_offset`` locates the chunk.

        Runs where the gold is (the device the gold ran on). One pass makes the float64
        error without a float64 copy of the candidate; when its max is finite (every
        element finite, the common case) a few more passes give the statistics, and
        the out-of-bound elements are only looked for when the max says there are some.
        """
        g = gold.detach()
        c = cand.detach().to(g.device)
        self.n += g.numel()
        if g.numel() == 0:
            return
        fast = self._row_errors(c, g) if c.dim() == 2 else None
        if fast is not None:  # the same numbers from one pass (NaN/Inf chunks never get here)
            self._update_rows(fast, c, g, row_offset)
            return
        err = torch.sub(c, g) if g.dtype == torch.float64 else c.double() - g.double()
        err.abs_()
        top = float(err.max())
        if not math.isfinite(top):
            self._update_nonfinite(c, g, err, row_offset)
            return
        g_abs = g.abs()
        if self.rtol:
            bad = err > g_abs.mul(self.rtol).add_(self.atol)
            n_bad = int(bad.sum())
        else:
            n_bad = int((err > self.atol).sum()) if top > self.atol else 0
            bad = (err > self.atol) if n_bad else None
        self.n_bad += n_bad
        self.max_abs = max(self.max_abs, top)
        self.sum_abs += float(err.sum())
        self.gold_absmax = max(self.gold_absmax, float(g_abs.max()))
        # the steps behind both the max ULP and the profile's histogram, taken once
        steps = (
            step_distance(c, g) if self.profile is not None and c.dtype in _STEP_DTYPES else None
        )
        if c.dtype == torch.float32:
            self.max_ulp = max(self.max_ulp or 0, max_ulp_distance(c, g, steps))
        if self.profile is not None:
            self.profile.update(c, g, err, row_offset, finite=True, steps=steps)
        if self.first_bad is None and n_bad:
            self._first_bad(bad, c, g, row_offset)
        self.max_rel = max(self.max_rel, float(err.div_(g_abs.clamp_min_(1e-12)).max()))

    def _row_errors(self, c: torch.Tensor, g: torch.Tensor) -> fastpath.RowErrors | None:
        """The chunk's per-row and per-column summaries from one pass: torch ops where the
        tensors are off the host (or that path forced), else the host loop."""
        if device_metrics.applies(c):
            return device_metrics.compare_rows(c, g, self.atol, self.rtol)
        return fastpath.compare_rows(c, g, self.atol, self.rtol)

    def _update_rows(self, fast: fastpath.RowErrors, c, g, row_offset: int) -> None:
        per_row, counts = fast.rows, fast.counts
        n_bad = int(counts[:, 0].sum())
        self.n_bad += n_bad
        self.max_abs = max(self.max_abs, float(per_row[:, 0].max()))
        self.sum_abs += float(per_row[:, 1].sum())
        self.max_rel = max(self.max_rel, float(per_row[:, 2].max()))
        self.gold_absmax = max(self.gold_absmax, float(per_row[:, 3].max()))
        if c.dtype == torch.float32:
            self.max_ulp = max(self.max_ulp or 0, int(counts[:, 2].max()))
        if self.profile is not None:
            self.profile.update_rows(_STEP_DTYPES[c.dtype][0], fast, row_offset)
        if self.first_bad is None and n_bad:
            row = int((counts[:, 0] > 0).nonzero()[0])
            col = int(counts[row, 1])
            self.first_bad = (row + row_offset, col)
            self.first_bad_values = (float(c[row, col]), float(g[row, col]))

    def _first_bad(self, bad, c, g, row_offset: int) -> None:
        flat = int(bad.reshape(-1).nonzero()[0])
        idx = unravel(flat, tuple(g.shape))
        self.first_bad = (idx[0] + row_offset, *idx[1:])
        self.first_bad_values = (float(c.reshape(-1)[flat]), float(g.reshape(-1)[flat]))

    def _update_nonfinite(self, c, g, err, row_offset: int) -> None:
        """Some element is NaN/Inf: masks keep the finite error apart from the rest."""
        g_fin, c_fin = torch.isfinite(g), torch.isfinite(c)
        both = g_fin & c_fin
        err.masked_fill_(~both, 0.0)
        g_abs = g.abs()
        bad = both & (err > self.atol + self.rtol * g_abs)
        nonfinite = g_fin & ~c_fin
        bad |= nonfinite | (~g_fin & (c != g))
        self.n_nonfinite += int(nonfinite.sum())
        if self.first_nonfinite is None and nonfinite.any():
            idx = unravel(int(nonfinite.reshape(-1).nonzero()[0]), tuple(g.shape))
            self.first_nonfinite = (idx[0] + row_offset, *idx[1:])
        if self.profile is not None:
            self.profile.update(c, g, err, row_offset)
        finite_err, finite_g = err[both], g_abs[both]
        self.n_bad += int(bad.sum())
        if finite_err.numel():
            self.max_abs = max(self.max_abs, float(finite_err.max()))
            self.sum_abs += float(finite_err.sum())
            self.max_rel = max(self.max_rel, float((finite_err / finite_g.clamp_min(1e-12)).max()))
            self.gold_absmax = max(self.gold_absmax, float(finite_g.max()))
            if c.dtype == torch.float32:
                ulps = ulp_distance(c, g)
                ulps.masked_fill_(~both, 0)
                self.max_ulp = max(self.max_ulp or 0, int(ulps.max()))
        if self.first_bad is None and bad.any():
            self._first_bad(bad, c, g, row_offset)

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.n if self.n else 0.0

    def bounds_message(
        self, what: str, where: Callable[[tuple], str], counted: str = "elements"
    ) -> str:
        """How a tolerance check words a failure: how many of the ``counted`` elements
        are out of bounds, the first (its index worded by ``where``) and its values,
        and the NaN/Inf where the gold is finite."""
        c, g = self.first_bad_values
        message = (
            f"{what}: {self.n_bad} of {self.n} {counted} outside atol={self.atol:g}"
            f"+rtol={self.rtol:g}*|gold|; first at {where(self.first_bad)}: {c!r} vs gold {g!r}"
        )
        if self.n_nonfinite:
            message += (
                f"; {self.n_nonfinite} NaN/Inf where gold is finite "
                f"(first at {where(self.first_nonfinite)})"
            )
        return message

    def metrics(self) -> dict:
        """``max_abs`` and friends are over the finite elements; ``n_nonfinite`` counts the
        NaN/Inf where the gold is finite; ``max_ulp`` only for fp32 results."""
        out = {
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "max_rel": self.max_rel,
            "n_bad": self.n_bad,
            "n_nonfinite": self.n_nonfinite,
            "n": self.n,
        }
        if self.max_ulp is not None:
            out["max_ulp"] = self.max_ulp
        return out


def merge_stats(total: ErrorStats, part: ErrorStats) -> None:
    """Fold one trial's statistics into the case total (firsts keep the earliest)."""
    total.n += part.n
    total.n_bad += part.n_bad
    total.n_nonfinite += part.n_nonfinite
    total.max_abs = max(total.max_abs, part.max_abs)
    total.sum_abs += part.sum_abs
    total.max_rel = max(total.max_rel, part.max_rel)
    if part.max_ulp is not None:
        total.max_ulp = max(total.max_ulp or 0, part.max_ulp)
    total.gold_absmax = max(total.gold_absmax, part.gold_absmax)
    if total.first_bad is None:
        total.first_bad, total.first_bad_values = part.first_bad, part.first_bad_values
    if total.first_nonfinite is None:
        total.first_nonfinite = part.first_nonfinite


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors share any byte of storage."""
    if (
        a.device != b.device
        or a.untyped_storage().nbytes() == 0
        or b.untyped_storage().nbytes() == 0
    ):
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def integrity_problems(before: dict, after: dict, results: list, phase: str) -> list[str]:
    """What a call did to its inputs: ``before`` (pristine CPU copies) against ``after``
    (the tensors the candidate got), and results aliasing an input."""
    problems: list[str] = []
    for name, pristine in before.items():
        changed = changed_elements(pristine, after[name].detach())
        if changed:
            problems.append(f"{phase} changed input {name!r} ({changed} elements)")
    return problems + aliasing_problems(after, results, phase)


CHANGED_CHUNK = 1 << 24  # elements compared at a time: a mask of 16 MB, not of the tensor


def changed_elements(pristine: torch.Tensor, now: torch.Tensor) -> int:
    """How many elements of ``now`` differ bitwise from ``pristine`` (a host copy); -1 when
    the shapes differ. Compared where ``now`` is when that is off the host."""
    if device_metrics.applies(now):
        return device_metrics.changed_elements(bits(pristine), bits(now))
    now = now.cpu()
    if now.shape != pristine.shape:
        return -1
    a, b = bits(now).reshape(-1), bits(pristine).reshape(-1)
    step = CHANGED_CHUNK
    return sum(
        int(torch.count_nonzero(a[i : i + step] != b[i : i + step]))
        for i in range(0, a.numel(), step)
    )


def aliasing_problems(inputs: dict, results: list, phase: str) -> list[str]:
    """Results that share storage with an input (a kernel that returns its input)."""
    problems = []
    for i, o in enumerate(results):
        for name, t in inputs.items():
            if overlaps(o, t):
                problems.append(f"{phase} result {i} aliases input {name!r}")
    return problems


def picked_entries(index: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(column [rows, 1], valid [rows])`` of the entry ``index`` picks in each row of
    ``n`` entries (valid: the index is in ``[0, n)``); None without an index."""
    if index is None:
        return None
    valid = (index >= 0) & (index < n)
    return torch.where(valid, index, torch.zeros_like(index)).unsqueeze(1), valid


def _zero_picked(values: torch.Tensor, picked) -> torch.Tensor:
    """Set the picked entries of ``values`` to 0, in place; return them (0 where none)."""
    column, valid = picked
    selected = values.gather(1, column).squeeze(1)
    values.scatter_(1, column, torch.where(valid, 0.0, selected).unsqueeze(1))
    return torch.where(valid, selected, 0.0)


def split_row_sums(
    values: torch.Tensor, picked: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``[rows, n]``: (the picked entry, 0 where none; the sum of the others).

    Overwrites the picked entries with 0 (``values`` is the caller's temporary): the rest
    is summed without them, never as a difference of two sums."""
    if picked is None:
        return values.new_zeros(values.shape[0]), values.sum(dim=1)
    selected = _zero_picked(values, picked)
    return selected, values.sum(dim=1)


def scale_weights(gold: torch.Tensor, picked) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sign(gold), sum |gold|)`` per row of a finite float64 ``[rows, n]`` gold, the
    picked entries left out of both: what :func:`row_scale` fits a row's scale on."""
    weight = gold.sign()
    if picked is not None:
        _zero_picked(weight, picked)
    return weight, split_row_sums(gold.abs(), picked)[1]


def row_scale(x: torch.Tensor, weight: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Per row: ``sum x * sign(gold) / sum |gold|`` (see :func:`scale_weights`), 1 for a
    row with nothing to fit. The |gold|-weighted mean of ``x / gold``: a row computed
    exactly but scaled by ``k`` gives ``k``; and ``sum |x - scale * gold|`` is at most
    twice ``sum |x - gold|`` (the scale moves by at most the relative L1 error)."""
    num = torch.bmm(x.unsqueeze(1), weight.unsqueeze(2)).reshape(-1)
    return torch.where(size > 0, num / torch.where(size > 0, size, 1.0), 1.0)


def scaled_abs_error(x: torch.Tensor, gold: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``|x - scale * gold|`` per element of float64 ``[rows, n]``, ``scale`` per row."""
    return torch.addcmul(x, gold, scale.neg().unsqueeze(1)).abs_()


def worst_relative(
    err: torch.Tensor, gold: torch.Tensor, against: torch.Tensor | None = None
) -> tuple[float, int] | None:
    """The largest ``err / against`` (default ``gold``) over the entries (rows) with
    ``gold > 0``, and its position; None when there is none (a row of zero gradient is
    not judged here)."""
    keep = gold > 0
    if not bool(keep.any()):
        return None
    den = gold if against is None else against
    rel = torch.where(keep, err / torch.where(keep, den, 1.0), -1.0)
    at = int(rel.argmax())
    return float(rel[at]), at
