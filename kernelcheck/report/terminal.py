"""The terminal table: one table per candidate, one section per case, one row per check.

It fits 80 columns: the case heads its section instead of taking a column, and each
check shows its one headline number (``worst``) next to the limit that was applied, so
the check name, the status and the worst error are never cut. On a terminal, failure
lines and repro commands are printed whole (the terminal wraps them); in a log they are
wrapped at 80 columns, a repro with backslash continuations (its pasted lines rerun it).
"""

from __future__ import annotations

from collections import defaultdict

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelcheck.cases.grid import fmt_attr
from kernelcheck.report.summary import not_checked_lines, verdict_rest, verdict_word
from kernelcheck.results import CheckResult, Report
from kernelcheck.wrap import fill, fill_command, log_width

STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "timeout": "bold yellow",
    "crash": "bold magenta",
    "skip": "dim",
}

# else (nothing checked, interrupted): yellow
VERDICT_STYLE = {"PASSED": "green", "FAILED": "bold red", "REGRESSED": "bold red"}

LEGEND = (
    "worst: the largest error (accuracy: max |cand - gold|; precision: max error and its "
    "ratio to the fp32 reference's, a gradient's as a row's relative L1; invariance, "
    "determinism: rows or runs that differ in bits; contract, integrity: violations). "
    "limit: what was applied."
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
        # a failure names what failed ("gradient:weight (x frozen)"): its own limit
        judged = t.get("judged", "").partition(":")[2].split(" ")[0]
        own = (t.get("per_name") or {}).get(judged, t)
        limit = f"{own['atol']:g}" + (f" + {own['rtol']:g}|g|" if own.get("rtol") else "")
        return worst, limit
    if "ratio" in t:
        worst = f"{_e(m.get('max_abs', 0.0))} ({m.get('ratio', 0.0):.2f}x)"
        if m.get("n_nonfinite"):
            worst = f"{m['n_nonfinite']} NaN/Inf, else {_e(m.get('max_abs', 0.0))}"
        limit = _e(t["limit"]) if "limit" in t else f"{t['ratio']:g}x ref + {t['floor_ulp']} ulp"
        return worst, limit
    if "reference_ratio" in t:  # backward_precision: a per-row relative L1 error
        worst = f"{_e(m.get('rel_l1', 0.0))} ({m.get('ratio', 0.0):.2f}x)"
        if m.get("n_nonfinite"):
            worst = f"{m['n_nonfinite']} NaN/Inf, else {worst}"
        limit = _e(t["limit"]) if "limit" in t else ""
        return worst, limit
    if "mismatched_rows" in m:
        return f"{m['mismatched_rows']}/{m.get('comparisons', m.get('compared_rows'))} rows", "bits"
    if "differing_runs" in m:
        return f"{m['differing_runs']} of {m['repeats'] - 1} reruns", "bits"
    if "violations" in m:
        n = m["violations"]
        return f"{n} violation{'' if n == 1 else 's'}", t.get("mode", "")
    return "", t.get("mode", "")


def render_table(
    report: Report,
    console: Console,
    notes: list[str] | None = None,
    regressed: bool = False,
    unwritten: bool = False,
) -> None:
    """The tables, then each failure (message and repro), then ``notes`` (the shrink
    results, a baseline's diff), then the verdict line (``regressed``: worse than a
    baseline). Names and messages are data, printed as :class:`~rich.text.Text`: never
    read as markup or ``:emoji:`` codes (an input named ``x`` gives ``gradient:x:``).
    Not on a terminal, every line is wrapped at 80 columns."""
    by_cand = defaultdict(list)
    for r in report.results:
        by_cand[r.candidate].append(r)
    for results in by_cand.values():
        console.print(Text(_title(report, results[0]), style="bold"))
        console.print(_table(results))
    width = log_width(console.is_terminal, console.width)
    if report.results:
        console.print(Text(fill(LEGEND, width, ""), style="dim"))
    for r in report.results:
        if r.status in ("pass", "skip"):
            continue
        line = fill(f"{r.status.upper()} {r.case_id} {r.check}: {r.message}", width)
        head, rest = line[: len(r.status)], line[len(r.status) :]
        console.print(Text.assemble((head, STYLE[r.status]), rest), soft_wrap=True)
        console.print(Text(fill_command(f"  repro: {r.repro}", width)), soft_wrap=True)
    for note in notes or []:
        wrap = fill_command if "kernelcheck run " in note else fill  # a shrunk repro
        console.print(Text(wrap(note, width)), soft_wrap=True)
    for line in not_checked_lines(report, width or console.width):
        console.print(Text(line, style="dim"), soft_wrap=True)
    word = verdict_word(report, regressed, unwritten)
    verdict = fill(word + verdict_rest(report, unwritten), width)
    style = VERDICT_STYLE.get(word, "bold yellow")
    console.print(Text.assemble((word, style), verdict[len(word) :]), soft_wrap=True)


def _title(report: Report, first: CheckResult) -> str:
    impl = first.implementation
    return f"{report.op} / {first.candidate} on {report.device}" + (f" [{impl}]" if impl else "")


def _table(results: list[CheckResult]) -> Table:
    """One candidate's rows: a bold case line heads each (dtype, shape, attributes)."""
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
            table.add_row(Text(case, style="bold"), "", "", "")
            last = case
        worst, limit = headline(r)
        status = Text(r.status, style=STYLE.get(r.status, ""))
        table.add_row(Text(f"  {r.check}"), status, Text(worst), Text(limit))
    return table
