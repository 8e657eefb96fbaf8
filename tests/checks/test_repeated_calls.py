"""Which repeated calls of one shape are judged: each whose bits differ from the first's."""

from __future__ import annotations

import torch

from kernelcheck.cases.grid import Case
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.repeated_calls import JUDGED_PATTERNS, differing_calls


def _ctx(catalog, fn) -> CaseContext:
    case = Case("logp", "bug", "cpu", "fp32", (("batch", 2), ("vocab", 5)), (0,), ())
    return CaseContext(catalog.ops["logp"], case, fn, None, None, torch.device("cpu"), False)


def _inputs() -> dict[str, torch.Tensor]:
    return {"logits": torch.zeros(2, 5), "target": torch.zeros(2, dtype=torch.long)}


def test_only_calls_whose_bits_differ_are_yielded_with_their_numbers(catalog):
    made = []

    def fn(logits, target):  # its 4th call returns -0.0 where the others return 0.0
        made.append(1)
        return torch.full((2,), -0.0 if len(made) == 4 else 0.0)

    first = [fn(**_inputs())]
    found = list(differing_calls(_ctx(catalog, fn), _inputs(), first, 6))
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
    found = list(differing_calls(_ctx(catalog, fn), _inputs(), first, 4))
    assert [n for n, _ in found] == [3]


def test_a_kernel_whose_bits_vary_every_call_has_only_some_judged(catalog):
    made = []

    def fn(logits, target):
        made.append(1)
        return torch.full((2,), float(len(made)))

    first = [fn(**_inputs())]
    found = list(differing_calls(_ctx(catalog, fn), _inputs(), first, 100))
    assert [n for n, _ in found] == list(range(2, JUDGED_PATTERNS + 2))
