"""The terminal table: one table per candidate, one section per case, one row per check.

It fits 80 columns: the case heads its section instead of taking a column, and each
check shows its one headline number (``worst``) next to the limit that was applied, so
the check name, the status and the worst error are never cut. Failure lines and repro
commands are printed unwrapped (a CI log greps them whole).
"""

from __future__ import annotations

from collections import defaultdict

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelcheck.cases.grid import fmt_attr
from kernelcheck.report.summary import PIPE_WIDTH, not_checked_lines, verdict_rest, verdict_word
from kernelcheck.results import CheckResult, Report

STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "timeout": "bold yellow",
    "crash": "bold magenta",
    "skip": "dim",
}

VERDICT_STYLE = {"PASSED": "green", "FAILED": "bold red"}  # else (nothing, interrupted): yellow

LEGEND = (
    "worst: the largest error (accuracy: max |cand - gold|; precision: max error and its "
    "ratio to the fp32 reference's; invariance, determinism: rows or runs that differ in "
    "bits; contract, integrity: violations). limit: what was applied."
)


def _e(x: float) -> str:
    return f"{x:.2e}"


def headline(r: CheckResult) -> tuple[str, str]:
    """(worst, limit) of one result, as the table shows them."""
    m, t = r.metrics or {}, r.tolerance or {}
    if r.status == "skip" or not m:
        return "", ""
    if "atol" in t:
        worst = _e(m.get("max_abs", 0.0))
        if m.get("n_nonfinite"):
            worst = f"{m['n_nonfinite']} NaN/Inf, else {worst}"
        limit = f"{t['atol']:g}" + (f" + {t['rtol']:g}|g|" if t.get("rtol") else "")
        return worst, limit
    if "ratio" in t:
        worst = f"{_e(m.get('max_abs', 0.0))} ({m.get('ratio', 0.0):.2f}x)"
        if m.get("n_nonfinite"):
            worst = f"{m['n_nonfinite']} NaN/Inf, else {_e(m.get('max_abs', 0.0))}"
        limit = _e(t["limit"]) if "limit" in t else f"{t['ratio']:g}x ref + {t['floor_ulp']} ulp"
        return worst, limit
    if "mismatched_rows" in m:
        return f"{m['mismatched_rows']}/{m.get('comparisons', m.get('compared_rows'))} rows", "bits"
    if "differing_runs" in m:
        return f"{m['differing_runs']} of {m['repeats'] - 1} reruns", "bits"
    if "violations" in m:
        n = m["violations"]
        return f"{n} violation{'' if n == 1 else 's'}", t.get("mode", "")
    return "", t.get("mode", "")


def render_table(report: Report, console: Console, notes: list[str] | None = None) -> None:
    """The tables, then each failure (message and repro), then ``notes`` (the shrink
    results), then the verdict line."""
    by_cand = defaultdict(list)
    for r in report.results:
        by_cand[r.candidate].append(r)
    for cand, results in by_cand.items():
        impl = results[0].implementation
        title = f"{report.op} / {cand} on {report.device}" + (f" [{impl}]" if impl else "")
        console.print(f"[bold]{escape(title)}[/]", highlight=False)
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
        table.add_column("check", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("worst", justify="right", overflow="fold")
        table.add_column("limit", justify="right", overflow="fold")
        last = None
        for r in results:
            case = f"{r.dtype} {'x'.join(map(str, r.shape.values()))}"
            case += "".join(f" {k}={fmt_attr(v)}" for k, v in r.attributes.items())
            if case != last:
                if last is not None:
                    table.add_section()
                table.add_row(f"[bold]{case}[/]", "", "", "")
                last = case
            worst, limit = headline(r)
            table.add_row(f"  {r.check}", f"[{STYLE.get(r.status, '')}]{r.status}[/]", worst, limit)
        console.print(table)
    bad = [r for r in report.results if r.status not in ("pass", "skip")]
    if report.results:
        console.print(f"[dim]{LEGEND}[/]", highlight=False)
    for r in bad:
        console.print(
            f"[{STYLE[r.status]}]{r.status.upper()}[/] {r.case_id} {r.check}: " + escape(r.message),
            highlight=False,
            soft_wrap=True,
        )
        console.print(f"  repro: {escape(r.repro)}", highlight=False, soft_wrap=True)
    for note in notes or []:
        console.print(escape(note), highlight=False, soft_wrap=True)
    # piped: wrapped at 80 columns whatever the table's width, so a log reads them whole
    width = console.width if console.is_terminal else min(console.width, PIPE_WIDTH)
    for line in not_checked_lines(report, width):
        console.print(f"[dim]{escape(line)}[/]", highlight=False, soft_wrap=True)
    word = verdict_word(report)
    console.print(
        f"[{VERDICT_STYLE.get(word, 'bold yellow')}]{word}[/]" + escape(verdict_rest(report)),
        highlight=False,
        soft_wrap=True,
    )
