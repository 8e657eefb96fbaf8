"""Stage 2a: expand an op's grid into cases, name them, and split them into shards."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kernelcheck.spec.model import OpSpec


@dataclass(frozen=True)
class Case:
    """One candidate on one device at one dtype and shape; checks run per case."""

    op: str
    candidate: str
    device: str
    dtype: str
    shape: tuple[tuple[str, int], ...]
    seeds: tuple[int, ...]
    distributions: tuple[str, ...]
    checks: tuple[str, ...] = field(default=())
    # every op attribute's value; ``shown``: those named in the id and the repro (a grid
    # axis's, or one set with --attr)
    attrs: tuple[tuple[str, object], ...] = field(default=())
    shown: tuple[str, ...] = field(default=())
    # attributes a repro must pin with --attr besides ``shown`` (the op sweeps them: an
    # unpinned rerun would sweep them again)
    pinned: tuple[str, ...] = field(default=())
    # the case id of an earlier case of the plan with the same candidate, dtype,
    # attributes and row sizes (only the lead shape differs): it judged the invariance
    # pool (the same rows, the same calls), so this case's invariance adds its own batch
    pool_judged_in: str | None = None
    # the CPU threads the case runs at (None: the process's own count); its repro pins it
    threads: int | None = None

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def attributes(self) -> dict[str, object]:
        return dict(self.attrs)

    @property
    def shape_str(self) -> str:
        return "x".join(str(v) for _, v in self.shape)

    @property
    def id(self) -> str:
        """Stable and readable: ``torch-bf16-2x16x257`` (``-temperature=0.7`` for an axis)."""
        tags = "".join(f"-{k}={fmt_attr(v)}" for k, v in self.attrs if k in self.shown)
        return f"{self.candidate}-{self.dtype}-{self.shape_str}{tags}"


def fmt_attr(value: object) -> str:
    """An attribute value as ``--attr`` reads it back: ``0.7``, ``true``, ``mean``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def row_key(op: OpSpec, case: Case) -> tuple:
    """What a case's invariance pool depends on: all but the lead shape."""
    inner = tuple((d, n) for d, n in case.shape if d not in op.lead)
    return (
        case.candidate,
        case.device,
        case.dtype,
        case.attrs,
        inner,
        case.seeds,
        case.distributions,
    )


def share_invariance_pools(op: OpSpec, cases: list[Case]) -> list[Case]:
    """Mark each case whose invariance pool an earlier case judges (``pool_judged_in``)."""
    first: dict[tuple, str] = {}
    out = []
    for case in cases:
        key = row_key(op, case)
        owner = first.setdefault(key, case.id)
        out.append(case if owner == case.id else replace(case, pool_judged_in=owner))
    return out


def parse_attr_value(text: str) -> object:
    """``--attr`` values: ints, floats, true/false, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def lead_shape(op: OpSpec, sizes: dict[str, int]) -> tuple[int, ...]:
    """The lead sizes present in this shape (an optional lead dim may be absent)."""
    return tuple(sizes[d] for d in op.lead if d in sizes)


def lead_sizes(op: OpSpec, rows: int) -> dict[str, int]:
    """``rows`` rows in the first lead dim; the other lead dims left out when optional,
    else 1, so the shape is one ``--shape`` reads back."""
    out = {op.lead[0]: rows}
    for d in op.lead[1:]:
        if not op.dims[d].optional:
            out[d] = 1
    return out


def rows(op: OpSpec, sizes: dict[str, int]) -> int:
    return math.prod(lead_shape(op, sizes))


def row_work(op: OpSpec, sizes: dict[str, int]) -> int:
    """The product of a row's dims (the non-lead ones), at least 1: the multiply-adds a
    row costs, which bounds how many rows the checks' big batches can afford."""
    return max(1, math.prod(n for d, n in sizes.items() if d not in op.lead))


def at_first_dtype(op: OpSpec, case: Case) -> bool:
    """Whether ``case`` is in the grid's first dtype: where a check does once per op and
    attributes what the other dtypes leave to it."""
    return not op.grid.dtypes or case.dtype == op.grid.dtypes[0]


def at_first_shape(op: OpSpec, case: Case) -> bool:
    """Whether ``case`` is at the grid's first shape (or the grid has none)."""
    return not op.grid.shapes or case.sizes == op.grid.shapes[0]


def at_first_grid_case(op: OpSpec, case: Case) -> bool:
    """Whether ``case`` is at the grid's first dtype and first shape (its attributes
    aside): where a check does once per op what it cannot afford in every case."""
    return at_first_dtype(op, case) and at_first_shape(op, case)


def parse_sizes(text: str, flag: str = "--shape") -> dict[str, int]:
    """``"batch=2,vocab=257"`` -> {"batch": 2, "vocab": 257}; ValueError naming ``flag``."""
    sizes: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{flag}: expected dim=size[,dim=size...], got {text!r}")
        try:
            sizes[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"{flag}: {key.strip()}: expected an integer, got {value!r}") from None
    return sizes


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); 1-based, K in 1..N."""
    try:
        k, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ValueError(f"expected K/N with integers, e.g. 1/4, got {text!r}") from None
    if n < 1 or not 1 <= k <= n:
        raise ValueError(f"expected 1 <= K <= N, got {text!r}")
    return k, n


def shard(cases: list[Case], k: int, n: int) -> list[Case]:
    """A deterministic, balanced share: cases sorted by cost, dealt round-robin.

    Dealing the costliest first keeps the shards' work close, and the N shards together
    hold every case exactly once.
    """
    order = sorted(cases, key=lambda c: (-_cost(c), c.op, c.id))
    mine = {id(c) for i, c in enumerate(order) if i % n == k - 1}
    return [c for c in cases if id(c) in mine]


def _cost(case: Case) -> int:
    return math.prod(v for _, v in case.shape) * len(case.seeds) * len(case.distributions)


def row_length(op: OpSpec, sizes: dict[str, int]) -> int:
    """The elements of the longest row of the row-wise inputs (0 where none is)."""
    nlead = len(op.lead)
    inner = [
        math.prod(sizes[d] for d in i.shape[nlead:] if d in sizes)
        for i in op.inputs
        if op.is_row_wise(i)
    ]
    return max(inner, default=0)


def swept_widths(op: OpSpec, shapes: list[dict[str, int]]) -> dict[str, int]:
    """Each dim's largest size among the attribute sweeps' shapes (:func:`sweep_shapes`)."""
    picked = [shapes[k] for k in sweep_shapes(op, shapes)]
    return {d: max(s.get(d, 0) for s in picked) for d in op.dims} if picked else {}


SWEEP_LONG_ROW = 1 << 14  # the longest row an attribute sweep's second shape may have


def sweep_shapes(spec: OpSpec, shapes: list[dict[str, int]]) -> list[int]:
    """The indices of the shapes the attribute sweeps run on: the grid's first (its
    cheapest by convention) and the one with the longest row of at most
    ``SWEEP_LONG_ROW`` elements, where that is longer than the first's. A tiled kernel
    takes its multi-tile path there: an online softmax whose rescale forgets the
    temperature is exact within one 4096-element tile and 0.11 off at V = 10000."""
    if not shapes:
        return []
    lengths = [row_length(spec, s) for s in shapes]
    fits = [k for k, n in enumerate(lengths) if n <= SWEEP_LONG_ROW]
    longest = max(fits, key=lambda k: lengths[k], default=0)
    return [0] if lengths[longest] <= lengths[0] else [0, longest]
