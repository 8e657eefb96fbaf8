"""The files ``kernelcheck run`` writes: ``--json-out`` (as results complete),
``--junit-out`` and ``--html-out`` (at the end). Each is checked writable before the run
starts, so that a typo in a path costs no run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from kernelcheck.errors import UsageError
from kernelcheck.results import Report


@dataclass(frozen=True)
class Outputs:
    json_out: Path | None = None
    junit_out: Path | None = None
    html_out: Path | None = None

    def check(self) -> None:
        """A UsageError naming the flag of a path that cannot be written."""
        from kernelcheck.commands.report import html_out_problem
        from kernelcheck.report.json_report import check_writable

        for flag, path in (("--json-out", self.json_out), ("--junit-out", self.junit_out)):
            if path is not None and (why := check_writable(path)):
                raise UsageError(f"{flag}: {why}")
        if self.html_out is not None and (why := html_out_problem(self.html_out)):
            raise UsageError(why)

    def json_writer(self):
        """The ``--json-out`` writer that rewrites the report as results complete, or None."""
        from kernelcheck.report.json_report import JsonReportWriter

        return JsonReportWriter(self.json_out) if self.json_out else None

    def write(self, report: Report, writer, base: dict | None, factor: float) -> bool:
        """Write every file; False when the JSON report could not be (said on stderr)."""
        from kernelcheck import report as rep
        from kernelcheck.commands.report import write_page
        from kernelcheck.report.json_report import write_atomic

        if writer:
            writer.write(report)
            if writer.error:
                typer.echo(f"kernelcheck: error: --json-out: {writer.error}", err=True)
        if self.junit_out:
            write_atomic(self.junit_out, rep.to_junit(report))
        if self.html_out:
            write_page(self.html_out, report.to_dict(), base, factor)
        return not (writer and writer.error)
