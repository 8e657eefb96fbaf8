"""Where a run spends its time: exclusive per-phase wall clocks.

A phase entered inside another pauses the outer one, so the phases add up to the time
measured: ``inputs`` (drawing trials), ``gold`` (the float64 gold and the fp32
reference), ``candidate`` (calls of the kernel under test), ``checks`` (everything else a
check does: comparisons, metrics) and ``shrink`` (searching smaller failing cases).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

PHASES = ("inputs", "gold", "candidate", "checks", "shrink")


class PhaseClock:
    def __init__(self) -> None:
        self.totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._stack: list[str] = []
        self._since = time.perf_counter()

    def _switch(self) -> None:
        now = time.perf_counter()
        if self._stack:
            self.totals[self._stack[-1]] += now - self._since
        self._since = now

    @contextmanager
    def phase(self, name: str):
        self._switch()
        self._stack.append(name)
        try:
            yield
        finally:
            self._switch()
            self._stack.pop()


def add_phases(total: dict[str, float], part: dict[str, float]) -> None:
    """Fold one case's phase times into the run's."""
    for name, seconds in part.items():
        total[name] = total.get(name, 0.0) + seconds
