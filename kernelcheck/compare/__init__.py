"""Comparing reports: ``merge`` the shards of a run, ``diff`` a baseline against a new run.

One home for the concept: the logic and its text/markdown renderings live here; the
``merge`` and ``diff`` commands (:mod:`kernelcheck.commands.compare`) are thin shells.
"""

from kernelcheck.compare.reports import (
    DEFAULT_FACTOR,
    DEFAULT_METRIC_FLOOR,
    DEFAULT_METRICS,
    Diff,
    diff,
    merge,
    op_spec_digest,
    plan_digest,
    read_report,
    render_diff,
    render_diff_markdown,
    result_key,
    validate_report,
)

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_METRICS",
    "DEFAULT_METRIC_FLOOR",
    "Diff",
    "diff",
    "merge",
    "op_spec_digest",
    "plan_digest",
    "read_report",
    "render_diff",
    "render_diff_markdown",
    "result_key",
    "validate_report",
]
