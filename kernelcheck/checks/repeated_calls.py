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

from collections.abc import Callable, Iterator

import torch

from kernelcheck.checks.metrics import bits
from kernelcheck.checks.outcome import CandidateFault

JUDGED_PATTERNS = 8  # differing calls judged per shape, each of bits not seen before


def call_label(kind: str, number: int, calls: int) -> str:
    """How a message names one of a shape's repeated calls: ``kind`` "forward" or
    "backward", ``number`` of ``calls`` in all (the first call is 1)."""
    return f"{kind} call {number} of {calls} on the same inputs"


def differing_calls(
    call: Callable[[], list[torch.Tensor]],
    judged: list[torch.Tensor],
    calls: int,
    kind: str,
    where: str = "",
) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """``call()`` ``calls`` more times and yield (call number, its CPU results) of each
    call whose bits differ from ``judged`` (the first call's results) and from every call
    yielded before, up to JUDGED_PATTERNS of them; past that, every call is still made
    and the last one yielded if its bits are new (the path a loop settles on). ``call``
    makes one ``kind`` call on a fresh device copy of the inputs (a kernel that writes its
    inputs is ``integrity``'s to fail, not a reason to judge a call on other inputs than
    the gold's). The first call is number 1. Each is compared with copies: a kernel that
    returns one buffer of its own for every call would otherwise have each call compared
    with itself. A fault names its call, after ``where``."""
    seen = [[o.clone() for o in judged]]
    last = calls + 1
    for number in range(2, last + 1):
        try:
            outputs = call()
        except CandidateFault as exc:
            raise _at_call(exc, f"{where}{call_label(kind, number, last)}") from None
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
