"""GitHub-flavoured markdown for a PR comment or a CI step summary (tabulate)."""

from __future__ import annotations

from collections import defaultdict

from tabulate import tabulate

from kernelcheck.checks import CHECKS
from kernelcheck.results import Report

MARKS = {
    "pass": "✅",
    "fail": "❌ fail",
    "error": "💥 error",
    "timeout": "⏱ timeout",
    "crash": "💀 crash",
    "skip": "–",
}


def to_markdown(report: Report) -> str:
    s = report.summary()
    counts = ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v)
    verdict = "PASSED" if s["passed"] else ("INTERRUPTED" if report.interrupted else "FAILED")
    out = [
        f"### kernelcheck `{report.op}` on {report.device}: {verdict}",
        "",
        f"{counts} in {s['wall_time_s']:.1f} s",
        "",
    ]
    cases: dict[tuple, dict] = defaultdict(dict)
    for r in report.results:
        cases[(r.candidate, r.dtype, "x".join(map(str, r.shape.values())))][r.check] = r.status
    checks = [c for c in CHECKS if any(c in v for v in cases.values())]
    rows = [[*key, *(MARKS.get(v.get(c, ""), "") for c in checks)] for key, v in cases.items()]
    if rows:
        out.append(
            tabulate(rows, headers=["candidate", "dtype", "shape", *checks], tablefmt="github")
        )
        out.append("")
    bad = [r for r in report.results if r.status not in ("pass", "skip")]
    if bad:
        out.append("#### Failures")
        out.append("")
        for r in bad:
            out.append(f"- **{r.case_id} {r.check}** ({r.status}): {r.message}  ")
            out.append(f"  repro: `{r.repro}`")
        out.append("")
    for cand, reason in report.unavailable.items():
        out.append(f"- candidate `{cand}` unavailable: {reason}")
    if report.interrupted:
        out.append(
            f"- interrupted ({report.interrupted}); {len(report.not_run)} case(s) did not run"
        )
    return "\n".join(out).rstrip() + "\n"
