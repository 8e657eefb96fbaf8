"""Comparing reports: ``merge`` the shards of a run, ``diff`` a baseline against a new run.

One job a module: :mod:`~kernelcheck.compare.identity` (result keys, run fingerprints),
:mod:`~kernelcheck.compare.validation` (reading a report file),
:mod:`~kernelcheck.compare.merging`, :mod:`~kernelcheck.compare.diffing` and
:mod:`~kernelcheck.compare.rendering` (a diff as text or markdown). Nothing here prints;
the ``merge`` and ``diff`` commands (:mod:`kernelcheck.commands.compare`) are thin shells.
"""

from kernelcheck.compare.diffing import (
    DEFAULT_FACTOR,
    DEFAULT_METRIC_FLOOR,
    DEFAULT_METRICS,
    Change,
    Diff,
    MetricRegression,
    diff,
)
from kernelcheck.compare.identity import (
    fingerprint,
    op_spec_digest,
    plan_digest,
    result_key,
    spec_digest,
)
from kernelcheck.compare.merging import merge
from kernelcheck.compare.rendering import diff_headline, render_diff, render_diff_markdown
from kernelcheck.compare.validation import read_report, validate_report

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_METRICS",
    "DEFAULT_METRIC_FLOOR",
    "Change",
    "Diff",
    "MetricRegression",
    "diff",
    "diff_headline",
    "fingerprint",
    "merge",
    "op_spec_digest",
    "plan_digest",
    "read_report",
    "render_diff",
    "render_diff_markdown",
    "result_key",
    "spec_digest",
    "validate_report",
]
