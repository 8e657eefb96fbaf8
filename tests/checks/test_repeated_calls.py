"""Which repeated calls of one shape are judged: each whose bits differ from the first's."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.cases.grid import Case
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.repeated_calls import JUDGED_PATTERNS, differing_calls


def _ctx(catalog, fn) -> CaseContext:
    case = Case("logp", "bug", "cpu", "fp32", (("batch", 2), ("vocab", 5)), (0,), ())
    return CaseContext(catalog.ops["logp"], case, fn, None, None, torch.device("cpu"), False)


def _inputs() -> dict[str, torch.Tensor]:
    return {"logits": torch.zeros(2, 5), "target": torch.zeros(2, dtype=torch.long)}


def _forward(catalog, fn):
    """One forward call of ``fn`` on a fresh device copy of :func:`_inputs`, as the sweep
    makes it."""
    ctx = _ctx(catalog, fn)
    return lambda: [o.detach().cpu() for o in ctx.call(ctx.to_device(_inputs()))]


def test_only_calls_whose_bits_differ_are_yielded_with_their_numbers(catalog):
    made = []

    def fn(logits, target):  # its 4th call returns -0.0 where the others return 0.0
        made.append(1)
        return torch.full((2,), -0.0 if len(made) == 4 else 0.0)

    first = [fn(**_inputs())]
    found = list(differing_calls(_forward(catalog, fn), first, 6, "forward"))
    assert [n for n, _ in found] == [4]  # the first call is number 1
    assert torch.equal(found[0][1][0].view(torch.int32), torch.full((2,), -0.0).view(torch.int32))
    assert len(made) == 7


def test_a_kernel_returning_one_buffer_of_its_own_is_compared_with_copies(catalog):
    buffer = torch.zeros(2)
    made = []

    def fn(logits, target):  # writes its one buffer: the 3rd call wrong, the others right
        made.append(1)
        buffer.fill_(1.0 if len(made) == 3 else 0.0)
        return buffer

    first = [fn(**_inputs())]
    found = list(differing_calls(_forward(catalog, fn), first, 4, "forward"))
    assert [n for n, _ in found] == [3]


def test_a_kernel_whose_bits_vary_every_call_has_some_and_its_last_call_judged(catalog):
    """Past JUDGED_PATTERNS every call is still made, and the last one judged: a kernel
    whose bits vary from call to call may still switch paths at its 50th."""
    made = []

    def fn(logits, target):
        made.append(1)
        return torch.full((2,), float(len(made)))

    first = [fn(**_inputs())]
    found = list(differing_calls(_forward(catalog, fn), first, 100, "forward"))
    assert [n for n, _ in found] == [*range(2, JUDGED_PATTERNS + 2), 101]
    assert len(made) == 101 and float(found[-1][1][0][0]) == 101.0


def test_each_call_gets_fresh_inputs_and_a_fault_names_its_call(catalog):
    from kernelcheck.checks.outcome import CandidateFault

    def fn(logits, target):  # writes its input, and raises on its 4th call
        logits.add_(1.0)
        if float(logits[0, 0]) != 1.0:
            raise AssertionError("inputs written by an earlier call")
        fn.calls = getattr(fn, "calls", 0) + 1
        if fn.calls == 3:
            raise ValueError("broken")
        return logits[:, 0].clone()

    found = differing_calls(_forward(catalog, fn), [torch.ones(2)], 5, "backward", "at vocab=5, ")
    with pytest.raises(
        CandidateFault, match="^at vocab=5, backward call 4 of 6 on the same inputs: "
    ):
        list(found)
