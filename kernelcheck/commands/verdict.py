"""The end of ``kernelcheck run``: shrink the failures, print the report, pick the exit code.

Here, not in ``cli.py``, so that ``run`` stays a thin shell and these steps can be read
(and tested) apart from the option parsing.
"""

from __future__ import annotations

import dataclasses
import sys

from rich.console import Console

from kernelcheck.errors import EXIT_FAILED, EXIT_NOTHING_CHECKED, EXIT_OK, Interrupted
from kernelcheck.results import Report


def shrink_and_notes(catalog, plan, report: Report, budget_s: float | None) -> list[str]:
    """Shrink the failures within ``budget_s`` (None: ``--no-shrink``) and return the
    lines that say how each went. A missing native candidate's errors are left out: its
    library did not run, so there is no failing input to make smaller."""
    from kernelcheck.commands.progress import shrink_notes

    if budget_s is None or report.interrupted:
        return []
    own = [r for r in report.results if r.candidate not in plan.missing]
    view = dataclasses.replace(report, results=own)  # shares ``extra``: shrunk lands there
    shrunk = {}
    if budget_s > 0 and not view.passed:
        from kernelcheck.runner.shrink import shrink_failures

        try:
            shrunk = shrink_failures(catalog, plan, view, budget_s)
        except Interrupted:
            pass  # the run's own results are complete: keep them, skip the shrinking
        report.finished = view.finished  # the reported total includes the shrinking
    return shrink_notes(view, shrunk)


def render(fmt: str, report: Report, plan, notes: list[str], console: Console) -> None:
    """The report on stdout in ``fmt``; the table and plain formats end with the verdict."""
    from kernelcheck import report as rep

    if fmt == "table":
        rep.render_table(report, console, notes)
    elif fmt == "plain":
        sys.stdout.write(rep.to_plain(report, plan.op, notes))
    elif fmt == "markdown":
        sys.stdout.write(rep.to_markdown(report))
    else:
        sys.stdout.write(rep.to_json(report) + "\n")


def exit_code(report: Report, problem: bool = False) -> int:
    """1 on a failing result or ``problem`` (a regression, a report not written); 5 when
    no (candidate, check) pair ran (every result a skip, or none): that tested nothing,
    as pytest's "no tests collected"; else 0. An interruption is the caller's."""
    if problem or not report.passed:
        return EXIT_FAILED
    return EXIT_OK if report.pairs_run else EXIT_NOTHING_CHECKED
