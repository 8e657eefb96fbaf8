"""The end of ``kernelcheck run``: shrink the failures, print the report, pick the exit code.

Here, not in ``cli.py``, so that ``run`` stays a thin shell and these steps can be read
(and tested) apart from the option parsing.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from rich.console import Console

from kernelcheck.errors import (
    EXIT_FAILED,
    EXIT_NOTHING_CHECKED,
    EXIT_OK,
    Interrupted,
    UsageError,
)
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


def read_baseline(path: Path | None, op: str) -> dict | None:
    """``--baseline``: the report, checked before the run to be one of ``op``."""
    if path is None:
        return None
    from kernelcheck.compare import read_report

    base = read_report(path)
    if base.get("op") != op:
        raise UsageError(f"--baseline: {path} is a report of op {base.get('op')}, not {op}")
    return base


def baseline_diff(base: dict | None, report: Report, factor: float):
    """The diff from ``--baseline`` (None without one); a UsageError when they differ in kind."""
    if base is None:
        return None
    from kernelcheck.compare import diff

    return diff(base, report.to_dict(), factor=factor)


def render(
    fmt: str,
    report: Report,
    plan,
    notes: list[str],
    console: Console,
    changes=None,
    unwritten: bool = False,
):
    """The report on stdout in ``fmt``. The table and plain formats end with the verdict,
    the baseline's diff (``changes``) just before it: a regression is ``REGRESSED``, a
    JSON report not written (``unwritten``) ``FAILED``, last, as the exit code says. JSON
    keeps stdout for the report (the diff goes to stderr)."""
    from kernelcheck import report as rep
    from kernelcheck.compare import render_diff

    diff_text = render_diff(changes) if changes is not None else ""
    regressed = changes is not None and changes.regressed
    if fmt in ("table", "plain"):
        notes = notes + diff_text.splitlines()
    if fmt == "table":
        rep.render_table(report, console, notes, regressed, unwritten)
    elif fmt == "plain":
        sys.stdout.write(rep.to_plain(report, plan.op, notes, regressed, unwritten))
    elif fmt == "markdown":
        sys.stdout.write(rep.to_markdown(report) + diff_text)
    else:
        sys.stdout.write(rep.to_json(report) + "\n")
        sys.stderr.write(diff_text)


def write_step_summary(report: Report, changes=None) -> None:
    """GitHub's step summary (``GITHUB_STEP_SUMMARY``), when set: the report in markdown
    and the baseline's diff."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from kernelcheck import report as rep
    from kernelcheck.compare import render_diff_markdown

    with open(path, "a") as fh:
        fh.write(rep.to_markdown(report) + "\n")
        if changes is not None:
            fh.write(render_diff_markdown(changes) + "\n")


def exit_code(report: Report, problem: bool = False) -> int:
    """1 on a failing result or ``problem`` (a regression, a report not written); 5 when
    no (candidate, check) pair ran (every result a skip, or none): that tested nothing,
    as pytest's "no tests collected"; else 0. An interruption is the caller's."""
    if problem or not report.passed:
        return EXIT_FAILED
    return EXIT_OK if report.pairs_run else EXIT_NOTHING_CHECKED
