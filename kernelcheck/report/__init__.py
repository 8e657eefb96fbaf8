"""Stage 5: renderers of a :class:`~kernelcheck.results.Report`. They never run kernels."""

from kernelcheck.report.json_report import JsonReportWriter, to_json
from kernelcheck.report.junit import to_junit
from kernelcheck.report.markdown import to_markdown
from kernelcheck.report.plain import to_plain
from kernelcheck.report.terminal import render_table

FORMATS = ("table", "plain", "markdown", "json")

__all__ = [
    "FORMATS",
    "JsonReportWriter",
    "render_table",
    "to_json",
    "to_junit",
    "to_markdown",
    "to_plain",
]
