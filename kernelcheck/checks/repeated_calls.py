"""A shape called again and again on the same inputs: which calls to judge.

A kernel cache that specialises a shape after some calls (a tracing JIT, a CUDA graph
captured after warm-up, an autotuner trying configurations, then keeping one) runs other
code from some call on, and a real training loop calls each shape thousands of times.
Judging every call against the gold would cost a gold comparison a call; a call whose
bits equal the judged first call's was judged already, so only calls whose bits differ
are judged (each new bit pattern once, up to ``JUDGED_PATTERNS``, then the last call's:
a kernel whose bits vary from call to call is ``determinism``'s to fail, not a reason to
judge thousands).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.metrics import bits
from kernelcheck.checks.outcome import CandidateFault

JUDGED_PATTERNS = 8  # differing calls judged per shape, each of bits not seen before


def differing_calls(
    ctx: CaseContext,
    cpu_inputs: dict[str, torch.Tensor],
    judged: list[torch.Tensor],
    calls: int,
) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """Call the candidate ``calls`` more times, each on a fresh device copy of
    ``cpu_inputs`` (a kernel that writes its inputs is ``integrity``'s to fail, not a
    reason to judge a call on other inputs than the gold's), and yield (call number, CPU
    outputs) of each call whose bits differ from ``judged`` (the first call's outputs)
    and from every call yielded before, up to JUDGED_PATTERNS of them; past that, every
    call is still made and the last one yielded if its bits are new (the path a loop
    settles on). The first call is number 1. Each is compared with copies: a kernel that
    returns one buffer of its own for every call would otherwise have each call compared
    with itself. A fault names its call."""
    seen = [[o.clone() for o in judged]]
    last = calls + 1
    for number in range(2, last + 1):
        try:
            outputs = [o.detach().cpu() for o in ctx.call(ctx.to_device(cpu_inputs))]
        except CandidateFault as exc:
            raise _at_call(exc, f"forward call {number} of {last} on the same inputs") from None
        if any(_same_bits(outputs, pattern) for pattern in seen):
            continue
        if len(seen) > JUDGED_PATTERNS and number != last:
            continue
        yield number, outputs
        seen.append([o.clone() for o in outputs])


def _at_call(exc: CandidateFault, where: str) -> CandidateFault:
    """``exc`` again, its message prefixed with where it happened."""
    named = type(exc)(f"{where}: {exc}")
    named.out_of_memory = exc.out_of_memory
    return named


def _same_bits(outputs: list[torch.Tensor], pattern: list[torch.Tensor]) -> bool:
    return len(outputs) == len(pattern) and all(
        o.shape == p.shape and o.dtype == p.dtype and torch.equal(bits(o), bits(p))
        for o, p in zip(outputs, pattern)
    )
