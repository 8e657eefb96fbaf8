"""Progress lines (kernelcheck/commands/progress.py): each case's own time."""

from __future__ import annotations

import io

from rich.console import Console

from kernelcheck.cases.grid import Case
from kernelcheck.commands.progress import CaseTicker


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _case(cand: str) -> Case:
    return Case("logp", cand, "cpu", "fp32", (("batch", 2), ("vocab", 33)), (0,), ("normal",))


def test_a_case_side_by_side_reports_its_own_time_not_its_wait_to_be_given_out():
    """Case 0 runs 0..10 s; case 1 runs 1..3 s beside it but is given out at 10 s (plan
    order): its line says 2.0 s, not 9.0 s."""
    clock, out = FakeClock(), io.StringIO()
    ticker = CaseTicker(2, Console(file=out, width=200), clock=clock)
    a, b = _case("torch"), _case("cpu")
    ticker.start(a, 0, 2)
    clock.now = 1.0
    ticker.start(b, 1, 2)
    clock.now = 3.0
    ticker.end(b, 1, 2)
    clock.now = 10.0
    ticker.end(a, 0, 2)
    ticker.done(a, [], 0, 2)
    clock.now = 12.0  # given out later still
    ticker.done(b, [], 1, 2)
    lines = out.getvalue().splitlines()
    assert "(10.0 s)" in lines[0] and "(2.0 s)" in lines[1], lines


def test_without_an_end_a_case_ends_as_it_is_given_out():
    clock, out = FakeClock(), io.StringIO()
    ticker = CaseTicker(1, Console(file=out, width=200), clock=clock)
    ticker.start(_case("torch"), 0, 1)
    clock.now = 4.0
    ticker.done(_case("torch"), [], 0, 1)
    assert "(4.0 s)" in out.getvalue()
