"""A batch too large for a full gold, judged at its first and last rows.

A launcher that maps rows to one grid dimension of at most 65,535 blocks, each block a
few rows (``4096 // next_pow2(hidden)``), never reaches the rows past ``65,535 x rows
per block``; one that stops advancing its row pointer there reads other rows. At a real
hidden size (2,560: one row per block) that takes a batch of 65,537 rows, 168M elements:
a float64 gold of all of it would cost ten times the candidate's call. But a row's
result depends on that row alone (and the shared inputs), so the rows where such a bug
shows, the first ones (a 16-bit row index wraps onto them) and the last ones, are judged
against the gold of those rows alone: ``JUDGED`` distinct rows at each end, drawn as a
case of ``2 x JUDGED + FILLERS`` rows draws them; every row between holds a copy of one
of the ``FILLERS`` others, so a row read in place of a judged one is another row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

from kernelcheck.cases.grid import lead_sizes
from kernelcheck.cases.inputs import row_distribution
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.metrics import ErrorStats, bits, first_bit_difference
from kernelcheck.checks.outcome import Outcome
from kernelcheck.checks.rows import flat_rows, placed_rows
from kernelcheck.checks.threads import torch_threads
from kernelcheck.checks.trial import Trial
from kernelcheck.gold import gathered
from kernelcheck.spec.model import OpSpec

JUDGED = 64  # rows judged at each end of the batch
FILLERS = 64  # distinct rows whose copies fill the batch between
# the batch's calls run at 3 CPU threads: an odd count, where an elementwise pass split
# evenly over the threads leaves a chunk whose last elements take a vector body's scalar
# tail (the batch's last row, judged); its rows' bits are compared with a small call's
BATCH_THREADS = 3
BODY_CHUNK_ELEMENTS = 1 << 24  # the rows between the judged ones are compared this many at once


def row_order(rows: int) -> list[int]:
    """For each row of the batch, the row of the small draw it copies: the first JUDGED
    rows at the start, the next JUDGED at the end, the FILLERS others in turn between."""
    body = rows - 2 * JUDGED
    return [
        *range(JUDGED),
        *(2 * JUDGED + i % FILLERS for i in range(body)),
        *range(JUDGED, 2 * JUDGED),
    ]


def judged_positions(rows: int) -> torch.Tensor:
    """The rows of the batch judged: the first and the last JUDGED."""
    return torch.cat([torch.arange(JUDGED), torch.arange(rows - JUDGED, rows)])


def far_rows_unjudged(op: OpSpec) -> str | None:
    """Why the op's far rows cannot be judged from their own gold (None: they can): an
    output that is not row-wise (a loss summed over the batch) depends on every row."""
    if not op.lead:
        return f"op {op.name} has no lead dims"
    shared = [o.name for o in op.outputs if not op.is_row_wise(o)]
    return f"output {shared[0]} is not row-wise" if shared else None


def judge_far_rows(
    ctx: CaseContext,
    seed: int,
    dist: str,
    sizes: dict[str, int],
    forward: bool,
    backward: bool,
    place: Callable = placed_rows,
    guard: Callable[[], AbstractContextManager] = nullcontext,
    frozen_call: bool = False,
) -> tuple[str, Outcome] | None:
    """Call the candidate on a batch of ``sizes`` (its rows as :func:`row_order` places
    them) and judge its judged rows against the gold of the small draw: the outputs
    (``forward``), then the row-wise gradients and the outputs of that call
    (``backward``). None where every judged element is within tolerance, else (the
    judgment that failed, its outcome). ``place(rows, order, lead, device)`` builds a
    row-wise tensor of the batch from the small draw's rows (``huge_rows`` mirrors it);
    each call runs inside ``guard()``; ``frozen_call``: the backward once more with the
    shared inputs frozen (:func:`_judge_backward`)."""
    op, big = ctx.op, ctx.at_sizes(sizes)
    rows = math.prod(big.lead)
    inner = {d: n for d, n in sizes.items() if d not in op.lead}
    small = Trial(ctx.at_sizes({**lead_sizes(op, 2 * JUDGED + FILLERS), **inner}), seed, dist)
    try:
        order, at = row_order(rows), judged_positions(rows)
        source = {k: small.ctx.input_rows(k, v) for k, v in small.cpu_inputs.items()}

        def placed_inputs() -> dict[str, torch.Tensor]:
            return {
                k: place(v, order, big.lead, ctx.device)
                if op.is_row_wise(op.input(k))
                else small.cpu_inputs[k].to(ctx.device, copy=True)
                for k, v in source.items()
            }

        gold = [flat_rows(g, len(small.ctx.lead)) for g in small.gold]
        if forward:
            inputs = placed_inputs()
            with guard(), torch_threads(BATCH_THREADS):
                whole = big.call(inputs)
                outs = _judged_rows(big, whole, at)
                body = _first_body_difference(ctx, small, big.lead, whole, small.outputs, "")
                del whole
            written = first_input_write(ctx, small, big.lead, inputs, source, "forward call")
            del inputs
            found = _first_failure(ctx, small, rows, _output_pairs(ctx, "", outs, gold))
            if found is not None:
                return "forward_accuracy", found
            found = _first_bit_difference(ctx, small, rows, outs, small.outputs, "") or body
            if found is not None:
                return "forward_invariance", found
            if written is not None:
                return "integrity", written
        if not backward:
            return None
        nlead = len(small.ctx.lead)
        ups = [place(flat_rows(u, nlead), order, big.lead, "cpu") for u in small.upstream]

        written: Outcome | None = None  # the with-grad call's input writes

        def backward_rows(wrt: tuple[str, ...] | None) -> tuple[list, dict, Outcome | None]:
            nonlocal written
            inputs = placed_inputs()
            with guard(), torch_threads(BATCH_THREADS):
                outs, grads = big.call_backward(inputs, ups, wrt=wrt)
                body = None if wrt else _body_of_backward(ctx, small, big.lead, outs, grads)
                judged = {n: _rows_of(big, g, at) for n, g in grads.items()}
            if wrt is None:
                written = first_input_write(ctx, small, big.lead, inputs, source, "backward")
            return _judged_rows(big, outs, at), judged, body

        found = _judge_backward(ctx, small, rows, backward_rows, gold, frozen_call)
        return found or (None if written is None else ("integrity", written))
    finally:
        small.release()


def frozen_calls(grad_inputs: list[str], row_wise: list[str]) -> list[tuple[str, ...]]:
    """The ``wrt`` of each frozen backward call at the far rows: the row-wise grad inputs
    with the shared ones frozen (a LoRA model's norm weight: a dx-only kernel), then each
    row-wise one alone where another grad input is row-wise too (swiglu's ``up`` frozen: a
    d_gate-only kernel, which a big batch may take); each judged at its own rows."""
    calls = [tuple(row_wise)] if row_wise and len(row_wise) < len(grad_inputs) else []
    if len(row_wise) > 1:
        calls += [(n,) for n in row_wise]
    return calls


def _judge_backward(ctx, small: Trial, rows: int, backward_rows, gold, frozen_call: bool):
    """The judged rows' row-wise gradients and with-grad outputs (``backward_rows(wrt)``:
    those of a backward call of the batch) against the gold; with ``frozen_call``, the
    row-wise gradients again from each call of :func:`frozen_calls` (a LoRA model's norm
    weight frozen: a dx-only kernel, whose tail past a multiple of its rows per program a
    small batch never shows); then their bits against the small draw's own."""
    gold_grads = _gold_grad_rows(small)
    outs, grads, body = backward_rows(None)
    tol = {n: ctx.tolerance("backward_accuracy", n) for n in gold_grads}
    pairs = [(f"gradient:{n}", tol[n], grads[n], g) for n, g in gold_grads.items()]
    pairs += _output_pairs(ctx, " (with grad)", outs, gold)
    found = _first_failure(ctx, small, rows, pairs)
    for wrt in frozen_calls(ctx.op.grad_inputs, list(gold_grads)) if frozen_call else []:
        if found is not None:
            break
        _, frozen, _ = backward_rows(wrt)
        note = f" ({', '.join(n for n in ctx.op.grad_inputs if n not in wrt)} frozen)"
        pairs = [(f"gradient:{n}{note}", tol[n], frozen[n], gold_grads[n]) for n in wrt]
        found = _first_failure(ctx, small, rows, pairs)
    if found is not None:
        return "backward_accuracy", found
    names = list(gold_grads)
    found = _first_bit_difference(ctx, small, rows, outs, small.grad_outputs, " (with grad)")
    found = found or _first_bit_difference(
        ctx, small, rows, [grads[n] for n in names], [small.grads[n] for n in names], "", names
    )
    found = found or body
    return None if found is None else ("backward_invariance", found)


def _body_of_backward(ctx, small: Trial, lead: tuple, outs: list, grads: dict) -> Outcome | None:
    """:func:`_first_body_difference` of a backward call's outputs, then of its row-wise
    gradients."""
    found = _first_body_difference(ctx, small, lead, outs, small.grad_outputs, " (with grad)")
    names = [n for n in grads if ctx.op.is_row_wise(ctx.op.input(n))]
    return found or _first_body_difference(
        ctx, small, lead, [grads[n] for n in names], [small.grads[n] for n in names], "", names
    )


def _first_body_difference(
    ctx: CaseContext, small: Trial, lead: tuple, batch: list, alone: list, suffix: str, names=None
) -> Outcome | None:
    """The first row between the judged ones (``batch``: the call's results whole) whose
    bits differ from the small draw's row it copies (``alone``: that call's results), or
    None. Each thread's share of a flat pass over the batch ends inside it, past the
    judged rows, where a vector loop's scalar tail gives an element other bits: a row's
    result would follow the batch's size. The rows between repeat the FILLERS in turn,
    so each period of them is compared with the fillers at once, chunk by chunk."""
    nlead, rows = len(small.ctx.lead), math.prod(lead)
    what = names or [s.name for s in ctx.op.outputs]
    for k, (c, a) in enumerate(zip(batch, alone)):
        if not isinstance(c, torch.Tensor) or tuple(c.shape[:nlead]) != tuple(lead):
            continue  # a wrong shape: the accuracy judge reports it
        got = flat_rows(c.detach(), nlead).reshape(rows, -1)
        mine = flat_rows(a.detach(), nlead)
        want = bits(mine.reshape(2 * JUDGED + FILLERS, -1)[2 * JUDGED :])
        differ = body_rows_differing(got, want.cpu())
        if differ:
            first, count = differ
            row, filler = JUDGED + first, 2 * JUDGED + first % FILLERS
            detail = first_bit_difference(got[row].cpu(), mine[filler])
            label = f"gradient:{what[k]}" if names else f"output:{what[k]}"
            message = (
                f"{label}{suffix}: {count} of {rows - 2 * JUDGED} rows between the judged ones "
                f"have other bits than the row each copies in a batch of {2 * JUDGED + FILLERS}; "
                f"first at row {row} (row {filler} there): {detail} "
                f"[seed {small.seed}, {small.distribution}]"
            )
            metrics = {"mismatched_rows": count}
            return Outcome("fail", message, metrics, {}, small.seed, small.distribution)
    return None


def first_input_write(
    ctx: CaseContext, small: Trial, lead: tuple, inputs: dict, source: dict, call: str
) -> Outcome | None:
    """The first row-wise input of the batch (``inputs``, after ``call``) whose rows no
    longer hold the bits of the small draw's rows they copy (``source``: those rows), or
    None. A kernel may write its result or gradient over an input only past a size (a
    round-25 red team's swiglu wrote d_gate and d_up into the saved gate and up from 2^26
    16-bit elements on, where the trial's inputs are never that big); a model reads its
    activations again. Shared inputs are handed as copies here: ``integrity`` judges them."""
    nlead, rows = len(small.ctx.lead), math.prod(lead)
    for name, t in inputs.items():
        if not ctx.op.is_row_wise(ctx.op.input(name)) or tuple(t.shape[:nlead]) != tuple(lead):
            continue
        got = flat_rows(t.detach(), nlead).reshape(rows, -1)
        mine = source[name].reshape(2 * JUDGED + FILLERS, -1)
        ends = torch.cat([got[:JUDGED], got[rows - JUDGED :]]).cpu()
        changed = (bits(ends) != bits(mine[: 2 * JUDGED])).any(-1).nonzero().reshape(-1)
        body = body_rows_differing(got, bits(mine[2 * JUDGED :]).cpu())
        if not changed.numel() and body is None:
            continue
        count = int(changed.numel()) + (body[1] if body else 0)
        if changed.numel():
            r = int(changed[0])
            row, was = (r, r) if r < JUDGED else (rows - 2 * JUDGED + r, r)
        else:
            row, was = JUDGED + body[0], 2 * JUDGED + body[0] % FILLERS
        detail = first_bit_difference(got[row].cpu(), mine[was])
        message = (
            f"the {call} changed input {name!r} in {count} of {rows} rows (a model reads it "
            f"again); first at row {row}: {detail} [seed {small.seed}, {small.distribution}]"
        )
        return Outcome("fail", message, {"written_rows": count}, {}, small.seed, small.distribution)
    return None


def body_rows_differing(got: torch.Tensor, fillers: torch.Tensor) -> tuple[int, int] | None:
    """(the first, the count) of the rows between the judged ones of ``got`` (``[rows,
    n]``) whose bits differ from ``fillers[i % FILLERS]`` (``[FILLERS, n]`` bits), the
    i-th row between copying it; None where none does."""
    body, width = got.shape[0] - 2 * JUDGED, fillers.shape[1]
    step = FILLERS * max(1, BODY_CHUNK_ELEMENTS // (FILLERS * max(1, width)))
    first, count = None, 0
    for start in range(0, body, step):
        chunk = bits(got[JUDGED + start : JUDGED + min(body, start + step)].cpu())
        whole = chunk.shape[0] // FILLERS * FILLERS
        periods = chunk[:whole].view(-1, FILLERS, width) != fillers
        rest = chunk[whole:] != fillers[: chunk.shape[0] - whole]
        hits = torch.cat([periods.any(-1).reshape(-1), rest.any(-1)]).nonzero().reshape(-1)
        if hits.numel():
            first = start + int(hits[0]) if first is None else first
            count += hits.numel()
    return None if first is None else (first, count)


def _first_bit_difference(
    ctx: CaseContext, small: Trial, rows: int, batch: list, alone: list, suffix: str, names=None
) -> Outcome | None:
    """The first judged row of the batch (``batch``: its rows, as judged) whose bits differ
    from the same row's in the small draw's own call (``alone``: its results whole), or
    None: a row's bits may depend on its shape's inner sizes alone, never on a batch of
    65,537 rows or 2^31 elements, where a kernel may switch to another reduction order."""
    nlead = len(small.ctx.lead)
    what = names or [s.name for s in ctx.op.outputs]
    for k, (c, a) in enumerate(zip(batch, alone)):
        if isinstance(c, str):
            continue  # a wrong shape: the accuracy judge reported it
        label = f"gradient:{what[k]}" if names else f"output:{what[k]}"
        mine = flat_rows(a.detach(), nlead)[: 2 * JUDGED].cpu()
        differ = (bits(c) != bits(mine)).reshape(2 * JUDGED, -1).any(-1).nonzero().reshape(-1)
        if differ.numel():
            r = int(differ[0])
            row = r if r < JUDGED else rows - 2 * JUDGED + r
            detail = first_bit_difference(c[r], mine[r])
            message = (
                f"{label}{suffix}: {differ.numel()} of {2 * JUDGED} judged rows have other bits "
                f"than the same rows in a batch of {2 * JUDGED + FILLERS}; first at row {row}: "
                f"{detail} [seed {small.seed}, {small.distribution}]"
            )
            metrics = {"mismatched_rows": int(differ.numel())}
            return Outcome("fail", message, metrics, {}, small.seed, small.distribution)
    return None


def _rows_of(big: CaseContext, t: torch.Tensor, at: torch.Tensor) -> torch.Tensor | str:
    """Rows ``at`` of a row-wise result of the batch, or its wrong shape as a message."""
    nlead = len(big.lead)
    if tuple(t.shape[:nlead]) != big.lead:
        return f"shape {tuple(t.shape)}: lead dims are not {big.lead}"
    return flat_rows(t.detach(), nlead)[at.to(t.device)].cpu()  # the rows alone leave a device


def _judged_rows(big: CaseContext, outs: list, at: torch.Tensor) -> list:
    return [_rows_of(big, o, at) for o in outs]


def _output_pairs(ctx: CaseContext, suffix: str, outs: list, gold: list) -> list[tuple]:
    """(what, tolerance, candidate rows, gold rows) of each output."""
    many = len(ctx.op.outputs) > 1
    return [
        (
            (f"output:{spec.name}" if many else "output") + suffix,
            ctx.tolerance("forward_accuracy", spec.name),
            c,
            g,
        )
        for spec, c, g in zip(ctx.op.outputs, outs, gold)
    ]


def _gold_grad_rows(small: Trial) -> dict[str, torch.Tensor]:
    """The float64 gold gradient of every row-wise grad input, rows of the small draw."""
    op = small.ctx.op
    whole = gathered(small.gold_grad_chunks())
    return {n: g for n, g in whole.items() if op.is_row_wise(op.input(n))}


def _first_failure(ctx, small: Trial, rows: int, pairs: list[tuple]) -> Outcome | None:
    """The first of ``pairs`` with an element outside its tolerance (None if none): the
    first JUDGED candidate rows against the gold's first, the last against its next."""
    for what, tol, c, g in pairs:
        if tol is None:
            continue
        limits = {"atol": tol.atol, "rtol": tol.rtol, "judged": what}
        if isinstance(c, str) or tuple(c.shape[1:]) != tuple(g.shape[1:]):
            got = c if isinstance(c, str) else f"rows of shape {tuple(c.shape[1:])}"
            message = f"{what}: {got}, expected rows of {tuple(g.shape[1:])}"
            return Outcome("fail", message, {}, limits, small.seed, small.distribution)
        st = ErrorStats(tol.atol, tol.rtol)
        st.update(c[:JUDGED], g[:JUDGED])
        st.update(c[JUDGED:], g[JUDGED : 2 * JUDGED], row_offset=rows - JUDGED)
        if st.n_bad:
            return _failed(what, st, small, rows, limits)
    return None


def _failed(what: str, st: ErrorStats, small: Trial, rows: int, limits: dict) -> Outcome:
    """The outcome of a judged tensor with ``st.n_bad`` elements out of bounds."""
    row = st.first_bad[0]
    dist = row_distribution(small.distribution, row if row < JUDGED else row - rows + 2 * JUDGED)

    def at(first: tuple) -> str:  # the batch's row, then the index within it
        return f"row {first[0]}" + (f", {list(first[1:])}" if len(first) > 1 else "")

    judged = f"judged elements (rows 0-{JUDGED - 1} and {rows - JUDGED}-{rows - 1})"
    message = st.bounds_message(what, at, judged) + f" [seed {small.seed}, {dist}]"
    metrics = {"max_abs": st.max_abs, "n_nonfinite": st.n_nonfinite}
    return Outcome("fail", message, metrics, limits, small.seed, dist, small.distribution)
