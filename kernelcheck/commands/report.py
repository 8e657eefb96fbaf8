"""``kernelcheck report``: JSON reports (one run, or the shards of one) to one HTML page.

Registered in :mod:`kernelcheck.cli`; ``run --html-out`` shares :func:`html_out_problem`
and :func:`write_page`. Exit codes: 0 written; 2 usage error (matplotlib missing, an
unreadable file, not a report, a refused merge, an unwritable output), one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelcheck.commands.common import fail
from kernelcheck.commands.options import BaselineFactorOpt, check_baseline_factor
from kernelcheck.compare import DEFAULT_FACTOR, read_report
from kernelcheck.errors import EXIT_OK, UsageError


def html_out_problem(path: Path) -> str | None:
    """Why the page cannot be written to ``path`` (matplotlib missing, an unwritable path),
    or None: checked before a run or a render starts."""
    from kernelcheck.report.json_report import check_writable
    from kernelcheck.report.plots import PlottingUnavailable, require

    try:
        require()
    except PlottingUnavailable as exc:
        return str(exc)
    why = check_writable(path)
    return f"--html-out: {why}" if why else None


def write_page(
    path: Path, report: dict, baseline: dict | None = None, factor: float = DEFAULT_FACTOR
) -> int:
    """Write the page of ``report`` (diffed against ``baseline`` when given, counting a
    metric grown by ``factor`` as a regression, as ``diff`` does); its bytes."""
    from kernelcheck.compare import diff
    from kernelcheck.report.html import write_html

    changes = diff(baseline, report, factor=factor) if baseline is not None else None
    return write_html(path, report, changes)


def report(
    reports: Annotated[
        list[Path],
        typer.Argument(help="JSON reports: one run, or the shards of one (merged first)."),
    ],
    html_out: Annotated[
        Path, typer.Option("--html-out", help="Write the HTML page here.", metavar="FILE")
    ],
    baseline: Annotated[
        Optional[Path],
        typer.Option(
            "--baseline", help="Also show the diff from this JSON report.", metavar="FILE"
        ),
    ] = None,
    baseline_factor: BaselineFactorOpt = DEFAULT_FACTOR,
) -> None:
    """Render JSON reports as one self-contained HTML page with error plots."""
    from kernelcheck.compare import merge

    try:
        if why := html_out_problem(html_out):
            raise UsageError(why)
        loaded = [read_report(p) for p in reports]
        data = loaded[0] if len(loaded) == 1 else merge(loaded, [str(p) for p in reports])
        base = read_report(baseline) if baseline else None
        check_baseline_factor(baseline_factor)
        size = write_page(html_out, data, base, baseline_factor)
    except UsageError as exc:
        fail(str(exc))
    counts = (data.get("summary") or {}).get("counts") or {}
    counts = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    typer.echo(f"wrote {html_out} ({size / 1024:.0f} kB): {counts or 'no results'}")
    raise typer.Exit(EXIT_OK)


__all__ = ["html_out_problem", "report", "write_page"]
