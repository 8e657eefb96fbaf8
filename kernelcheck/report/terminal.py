"""The rich terminal table: grouped by candidate and case, one row per check."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from kernelcheck.results import Report

STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "timeout": "bold yellow",
    "crash": "bold magenta",
    "skip": "dim",
}


def _num(m: dict, key: str, fmt: str = "{:.2e}") -> str:
    v = m.get(key)
    if v is None:
        return ""
    return str(v) if isinstance(v, int) else fmt.format(v)


def _tol(t: dict | None) -> str:
    if not t:
        return ""
    if "atol" in t:
        return f"atol {t['atol']:g} rtol {t['rtol']:g}"
    if "ratio" in t:
        return f"<= {t['ratio']:g}x ref + {t['floor_ulp']} ulp"
    return t.get("mode", "")


def render_table(report: Report, console: Console) -> None:
    by_cand = defaultdict(list)
    for r in report.results:
        by_cand[r.candidate].append(r)
    for cand, results in by_cand.items():
        impl = results[0].implementation
        table = Table(
            title=f"{report.op} / {cand} on {report.device}" + (f"  [{impl}]" if impl else ""),
            title_justify="left",
            show_lines=False,
        )
        for col in (
            "case",
            "check",
            "status",
            "max_abs",
            "mean_abs",
            "max_rel",
            "max ULP",
            "ratio",
            "tolerance",
        ):
            table.add_column(
                col,
                justify="right"
                if col in ("max_abs", "mean_abs", "max_rel", "max ULP", "ratio")
                else "left",
            )
        last = None
        for r in results:
            case = f"{r.dtype} {'x'.join(map(str, r.shape.values()))}"
            if last is not None and case != last:
                table.add_section()
            m = r.metrics
            table.add_row(
                case if case != last else "",
                r.check,
                f"[{STYLE.get(r.status, '')}]{r.status}[/]",
                _num(m, "max_abs"),
                _num(m, "mean_abs"),
                _num(m, "max_rel"),
                _num(m, "max_ulp"),
                _num(m, "ratio", "{:.2f}"),
                _tol(r.tolerance),
            )
            last = case
        console.print(table)
    bad = [r for r in report.results if r.status not in ("pass", "skip")]
    for r in bad:
        console.print(
            f"[{STYLE[r.status]}]{r.status.upper()}[/] {r.case_id} {r.check}: {r.message}",
            highlight=False,
        )
        console.print(f"  repro: {r.repro}", highlight=False, soft_wrap=True)
    for cand, reason in report.unavailable.items():
        console.print(f"[dim]candidate {cand} unavailable: {reason}[/]", highlight=False)
    s = report.summary()
    counts = ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v)
    verdict = "[green]PASSED[/]" if s["passed"] else "[bold red]FAILED[/]"
    if report.interrupted:
        verdict = (
            f"[bold yellow]INTERRUPTED ({report.interrupted})[/], "
            f"{len(report.not_run)} case(s) not run"
        )
    console.print(f"{verdict}: {counts} in {s['wall_time_s']:.1f} s", highlight=False)
