"""What a run says while it runs, and the shrink lines it prints before its verdict.

In a terminal: a progress bar on stderr that moves with every result, not only at the
end of a case. Elsewhere (a CI log): one line per finished case, with a count and an
ETA, so a log never shows minutes of silence:

    [12/48] cpu-bf16-8x151936: 8 pass (3.2 s), eta 1m10s
"""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console
from rich.text import Text

from kernelcheck.results import CheckResult, Report


def fmt_eta(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class CaseTicker:
    """Progress on ``console`` (stderr): a bar in a terminal, a line per case elsewhere.

    A case's time is its own, from :meth:`start` to :meth:`end`: side by side, a case
    that ended is given out (:meth:`done`) only once every earlier case is, and that
    wait is not its time."""

    def __init__(self, total: int, console: Console, clock=time.perf_counter):
        self.total = total
        self.console = console
        self.clock = clock
        self.t0 = clock()
        self.started: dict[int, float] = {}  # case index -> start (cases may run side by side)
        self.seconds: dict[int, float] = {}  # case index -> its own time, once it ended
        self.index = 0
        self.checks = 1
        self.seen = 0
        self.bar = None
        if console.is_terminal and total > 1:
            from rich.progress import Progress

            self.bar = Progress(console=console, transient=True)
            self.task = self.bar.add_task("checking", total=total)
            self.bar.start()

    def start(self, case, i: int, n: int) -> None:
        self.index, self.checks, self.seen = i, max(1, len(case.checks)), 0
        self.started[i] = self.clock()
        if self.bar:
            self.bar.update(self.task, completed=i, description=case.id)

    def result(self, res: CheckResult) -> None:
        self.seen += 1
        if self.bar:  # moves within a case, one check at a time
            self.bar.update(self.task, completed=self.index + min(1.0, self.seen / self.checks))

    def end(self, case, i: int, n: int) -> None:
        """Case ``i`` ended (side by side, maybe before an earlier case is given out)."""
        self.seconds[i] = self.clock() - self.started.pop(i, self.clock())

    def done(self, case, results: list[CheckResult], i: int, n: int) -> None:
        if i not in self.seconds:  # never told it ended: it ends as it is given out
            self.end(case, i, n)
        seconds = self.seconds.pop(i)
        if self.bar:
            return
        counts = Counter(r.status for r in results)
        said = ", ".join(f"{v} {k}" for k, v in counts.items())
        eta = (self.clock() - self.t0) / (i + 1) * (n - i - 1)
        line = f"[{i + 1}/{n}] {case.id}: {said} ({seconds:.1f} s), eta {fmt_eta(eta)}"
        self.console.print(Text(line), soft_wrap=True)

    def stop(self) -> None:
        if self.bar:
            self.bar.stop()


def shrink_notes(report: Report, shrunk: dict) -> list[str]:
    """One line per failing result: its shrunk repro, or why it was not shrunk. What is
    never searched (an ``error``: no failing input to make smaller) gets no line."""
    from kernelcheck.runner.shrink import format_shrink, shrinkable

    notes = []
    searched = {
        (r.check, r.candidate, r.dtype) for r in report.results if (r.case_id, r.check) in shrunk
    }
    for r in report.results:
        if not shrinkable(r):
            continue
        outcome = shrunk.get((r.case_id, r.check))
        if outcome is not None:
            notes.append(f"{r.case_id} {r.check}: {format_shrink(outcome)}")
        elif (r.check, r.candidate, r.dtype) in searched:
            notes.append(
                f"{r.case_id} {r.check}: not shrunk: one search per candidate, dtype and check "
                "(see the line of its smallest failing case)"
            )
        elif shrunk or report.extra.get("shrunk") is not None:
            notes.append(f"{r.case_id} {r.check}: not shrunk: the shrink budget was spent")
    return notes
