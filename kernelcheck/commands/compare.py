"""``kernelcheck merge`` and ``kernelcheck diff``: typer shells over :mod:`kernelcheck.compare`.

Registered in :mod:`kernelcheck.cli` with ``app.command()(merge)`` and ``app.command()(diff)``.
Exit codes: 0 done (diff: no regression); 1 diff found a regression; 2 usage error (an
unreadable file, not a kernelcheck report, a refused merge), printed as one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from kernelcheck.commands.common import fail as _fail
from kernelcheck.commands.options import check_at_least
from kernelcheck.compare import read_report
from kernelcheck.errors import EXIT_FAILED, EXIT_OK, UsageError

DIFF_FORMATS = ("text", "json", "markdown")


def parse_metrics(text: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    for m in names:
        if not m.replace("_", "").isalnum():
            raise UsageError(f"--metrics: expected comma-separated metric names, got {text!r}")
    return names


def render(d, fmt: str) -> str:
    """A :class:`kernelcheck.compare.Diff` as text, json or markdown."""
    from kernelcheck.compare import render_diff, render_diff_markdown

    if fmt == "json":
        return json.dumps(d.to_dict(), indent=2, default=str) + "\n"
    if fmt == "markdown":
        return render_diff_markdown(d)
    return render_diff(d)


def merge(
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Write the merged JSON report here.", metavar="FILE"),
    ],
    reports: Annotated[
        list[Path], typer.Argument(help="JSON reports to merge (e.g. the N shards of a run).")
    ],
) -> None:
    """Merge JSON reports (the shards of one run) into one; refuse overlapping or mismatched."""
    from kernelcheck.compare import merge as merge_reports
    from kernelcheck.report.json_report import check_writable, dumps_report, write_atomic

    try:
        if why := check_writable(output):
            raise UsageError(f"--output: {why}")
        loaded = [read_report(p) for p in reports]
        merged = merge_reports(loaded, [str(p) for p in reports])
    except UsageError as exc:
        _fail(str(exc))
    write_atomic(output, dumps_report(merged))
    s = merged["summary"]
    counts = ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v) or "no results"
    verdict = "passed" if s["passed"] else "FAILED"
    typer.echo(f"merged {len(reports)} report(s) into {output}: {counts} ({verdict})")
    raise typer.Exit(EXIT_OK)


def diff(
    baseline: Annotated[Path, typer.Argument(help="The baseline JSON report.")],
    new: Annotated[Path, typer.Argument(help="The new JSON report.")],
    factor: Annotated[
        float,
        typer.Option(
            "--factor",
            help="A metric regresses when it grows by more than this factor.",
            metavar="F",
        ),
    ] = 2.0,
    metrics: Annotated[
        str,
        typer.Option(
            "--metrics", help="Comma-separated metrics compared with --factor.", metavar="LIST"
        ),
    ] = "max_abs,ratio",
    floor: Annotated[
        float,
        typer.Option(
            "--floor", help="Metric values at or below this never count as regressed.", metavar="X"
        ),
    ] = 1e-9,
    fmt: Annotated[
        str, typer.Option("--format", help="text, json or markdown.", metavar="FORMAT")
    ] = "text",
) -> None:
    """List new failures, new passes, lost coverage and metric regressions; exit 1 on regression."""
    from kernelcheck.compare import diff as diff_reports

    try:
        if fmt not in DIFF_FORMATS:
            raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(DIFF_FORMATS)}")
        check_at_least("--floor", floor, 0)
        d = diff_reports(
            read_report(baseline), read_report(new), factor, parse_metrics(metrics), floor
        )
    except UsageError as exc:
        _fail(str(exc))
    sys.stdout.write(render(d, fmt))
    raise typer.Exit(EXIT_FAILED if d.regressed else EXIT_OK)


__all__ = ["diff", "merge", "parse_metrics", "read_report", "render"]
