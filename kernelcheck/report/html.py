"""One self-contained HTML page of a JSON report: a status matrix, each failure with its
repro and plots, every result, the environment; and, given one, the diff to a baseline.

It takes report dicts (schema 1 or 2, one run or merged shards), never runs kernels and
never reaches the network: CSS, SVG and the copy button's script are inline, and the
page's Content-Security-Policy forbids any fetch, so a reviewer can open the CI artifact
anywhere. Only failing results get plots (a passing one links to its row of the results
table), which keeps the default grid's page small.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from kernelcheck.compare import Diff, result_key
from kernelcheck.compare.identity import fingerprint
from kernelcheck.compare.rendering import diff_headline, disappeared_lines
from kernelcheck.report import plots
from kernelcheck.results import FAILING, CheckResult

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;
max-width:1360px;padding:16px 24px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:0 0 6px}code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
.verdict-pass{color:#2e7d32}.verdict-fail{color:#c62828}
.chips span{display:inline-block;border-radius:10px;padding:1px 9px;margin:2px 4px 2px 0;
font-size:12px;color:#fff}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #e0e0e0;padding:3px 6px}
th{background:#f5f5f5;text-align:left;font-weight:600}
table.matrix td.cell{text-align:center;min-width:64px;padding:0}
table.matrix td.cell a{display:block;padding:3px 6px;color:#fff;text-decoration:none}
table.matrix td.none{background:#fafafa}
.s-pass{background:#43a047}.s-fail{background:#e53935}.s-error{background:#8e24aa}
.s-timeout{background:#fb8c00}.s-crash{background:#6a1b9a}.s-skip{background:#bdbdbd}
td.regressed{outline:3px solid #212121;outline-offset:-3px}
td.regressed a::after{content:" \\25B2"}td.fixed a::after{content:" \\2713"}
section.result{border:1px solid #e0e0e0;border-left:6px solid #e53935;border-radius:4px;
padding:10px 14px;margin:12px 0}
section.result.st-error,section.result.st-crash{border-left-color:#8e24aa}
section.result.st-timeout{border-left-color:#fb8c00}
.msg{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.repro{display:flex;gap:8px;align-items:center;background:#f5f5f5;border-radius:4px;
padding:4px 8px;margin:6px 0}.repro code{flex:1;word-break:break-all}
button.copy{font-size:12px;padding:2px 10px;cursor:pointer}
.plots{display:flex;flex-wrap:wrap;gap:8px}figure.plot{margin:0}
figure.plot svg{width:440px;height:auto}figure.wide svg{width:600px}
.meta{color:#555;font-size:12px}.noplots{color:#777;font-style:italic}
ul.diff li.bad{color:#b71c1c}ul.diff li.good{color:#1b5e20}
tr.target:target td,section.result:target{background:#fff8e1}
"""

SCRIPT = """
document.addEventListener('click', function (e) {
  var b = e.target.closest('button.copy'); if (!b) return;
  var text = b.getAttribute('data-copy'), done = function () {
    b.textContent = 'copied'; setTimeout(function () { b.textContent = 'copy'; }, 1500); };
  if (navigator.clipboard) { navigator.clipboard.writeText(text).then(done, fallback); }
  else { fallback(); }
  function fallback() { var t = document.createElement('textarea'); t.value = text;
    document.body.appendChild(t); t.select(); document.execCommand('copy'); t.remove(); done(); }
});
"""


def esc(value) -> str:
    """Text or an attribute value, HTML-escaped."""
    return html.escape(str(value), quote=True)


def anchor(index: int) -> str:
    """The id of result ``index`` of the report: its failure section or its table row."""
    return f"r{index}"


def shape_text(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def case_label(r: dict) -> str:
    attrs = "".join(f" {k}={v}" for k, v in (r.get("attributes") or {}).items())
    return f"{r['dtype']} {shape_text(r.get('shape') or {})}{attrs}"


def to_html(report: dict, diff: Diff | None = None) -> str:
    """The page for ``report`` (a loaded JSON report: one run or merged shards), with
    ``diff`` (baseline -> this report) highlighted when given."""
    results = report.get("results") or []
    summary = report.get("summary") or {}
    marks = _diff_marks(diff)
    verdict = "PASSED" if summary.get("passed") else "FAILED"
    if summary.get("interrupted"):
        verdict = f"INTERRUPTED ({summary['interrupted']})"
    title = f"kernelcheck {report.get('op')} on {report.get('device')}: {verdict}"
    body = [
        f"<h1>kernelcheck <code>{esc(report.get('op'))}</code> on {esc(report.get('device'))}: "
        f'<span class="verdict-{"pass" if summary.get("passed") else "fail"}">{esc(verdict)}</span>'
        "</h1>",
        _chips(summary),
        _header_facts(report, summary),
    ]
    if diff is not None:
        body.append(_diff_section(diff, results))
    body.append(_matrix(results, marks))
    body.append(_overview(results))
    body.append(_failures(results))
    body.append(_results_table(results, marks))
    body.append(_environment(report, summary))
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + f"\n<script>{SCRIPT}</script>\n</body></html>\n"
    )


def _chips(summary: dict) -> str:
    counts = summary.get("counts") or {}
    chips = "".join(
        f'<span class="s-{esc(s)}" data-count="{int(n)}">{int(n)} {esc(s)}</span>'
        for s, n in counts.items()
        if n
    )
    return f'<div class="chips">{chips or "<span class=s-skip>no results</span>"}</div>'


def _header_facts(report: dict, summary: dict) -> str:
    facts = [f"{summary.get('total', len(report.get('results') or []))} results"]
    if summary.get("wall_time_s") is not None:
        facts.append(f"{summary['wall_time_s']:.1f} s")
    shards = report.get("merged_from") or []
    if shards:
        facts.append(f"merged from {len(shards)} reports")
    facts.append(f"schema {report.get('schema_version')}")
    unavailable = summary.get("unavailable_candidates") or {}
    lines = [f'<p class="meta">{esc(" · ".join(facts))}</p>']
    for cand, why in unavailable.items():
        lines.append(f'<p class="meta">candidate <b>{esc(cand)}</b> unavailable: {esc(why)}</p>')
    if summary.get("not_run"):
        lines.append(
            f'<p class="meta">{len(summary["not_run"])} case(s) did not run: '
            f"{esc(', '.join(summary['not_run']))}</p>"
        )
    return "\n".join(lines)


# --- diff ---------------------------------------------------------------------------------


def _diff_marks(diff: Diff | None) -> dict[tuple, str]:
    """Result key -> "regressed" (a new failure, newly skipped, a metric grown) or "fixed"."""
    if diff is None:
        return {}
    marks = {c.key: "fixed" for c in diff.new_passes}
    for c in [*diff.new_failures, *diff.newly_skipped, *diff.metric_regressions]:
        marks[c.key] = "regressed"
    return marks


def _diff_section(d: Diff, results: list[dict]) -> str:
    where = {result_key(r): i for i, r in enumerate(results)}

    def link(key, text: str) -> str:
        i = where.get(key)
        return f'<a href="#{anchor(i)}">{esc(text)}</a>' if i is not None else esc(text)

    def status(s):
        return s if s is not None else "absent"

    items: list[tuple[str, str]] = []
    for c in d.new_failures:
        items.append(("bad", link(c.key, f"{c.case_id} {c.check}: {status(c.before)} → {c.after}")))
    items += [("bad", f"disappeared: {esc(line)}") for line in disappeared_lines(d)]
    for c in d.newly_skipped:
        items.append(("bad", link(c.key, f"{c.case_id} {c.check}: {status(c.before)} → skip")))
    for m in d.metric_regressions:
        text = (
            f"{m.case_id} {m.check} {m.metric}: {m.before:.3g} → {m.after:.3g} "
            f"(×{m.growth:.3g} > ×{d.factor:g})"
        )
        items.append(("bad", link(m.key, text)))
    for c in d.new_passes:
        items.append(("good", link(c.key, f"{c.case_id} {c.check}: {status(c.before)} → pass")))
    items += [("", link(c.key, f"appeared: {c.case_id} {c.check} ({c.after})")) for c in d.appeared]
    lis = "".join(f'<li class="{cls}">{text}</li>' for cls, text in items)
    notes = "".join(f'<p class="meta">note: {esc(n)}</p>' for n in d.notes)
    still = f'<p class="meta">still failing: {len(d.still_failing)}</p>' if d.still_failing else ""
    verdict = "verdict-fail" if d.regressed else "verdict-pass"
    return (
        f'<h2 id="diff">Diff against the baseline</h2><p class="{verdict}" data-regressed='
        f'"{str(d.regressed).lower()}"><b>{esc(diff_headline(d))}</b></p>{notes}'
        f'<ul class="diff">{lis}</ul>{still}'
    )


# --- the matrix ---------------------------------------------------------------------------


def _checks(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["check"] for r in results))


def _matrix(results: list[dict], marks: dict[tuple, str]) -> str:
    """candidate x dtype x shape (rows) x check (columns), each cell its status, linked."""
    if not results:
        return "<h2>Summary</h2><p>No results.</p>"
    checks = _checks(results)
    rows: dict[tuple, dict[str, int]] = {}
    for i, r in enumerate(results):
        rows.setdefault((r["candidate"], r.get("device"), r["case_id"]), {})[r["check"]] = i
    order = list(dict.fromkeys(r["candidate"] for r in results))  # a candidate's rows together
    rows = dict(sorted(rows.items(), key=lambda kv: order.index(kv[0][0])))
    devices = {r.get("device") for r in results}
    head = "".join(f"<th>{esc(c)}</th>" for c in checks)
    lines = [
        '<h2 id="summary">Summary</h2><table class="matrix"><thead><tr><th>candidate</th>'
        f"<th>case</th>{head}</tr></thead><tbody>"
    ]
    for (cand, device, _), cells in rows.items():
        first = results[next(iter(cells.values()))]
        who = f"{cand} ({device})" if len(devices) > 1 else cand
        tds = []
        for c in checks:
            i = cells.get(c)
            if i is None:
                tds.append('<td class="none"></td>')
                continue
            r = results[i]
            mark = marks.get(result_key(r), "")
            tip = r.get("message") or _headline(r)
            tds.append(
                f'<td class="cell s-{esc(r["status"])} {mark}" data-status="{esc(r["status"])}" '
                f'title="{esc(tip[:300])}"><a href="#{anchor(i)}">{esc(r["status"])}</a></td>'
            )
        lines.append(f"<tr><td>{esc(who)}</td><td>{esc(case_label(first))}</td>{''.join(tds)}</tr>")
    lines.append("</tbody></table>")
    return "".join(lines)


def _headline(r: dict) -> str:
    from kernelcheck.report.terminal import headline

    worst, limit = headline(CheckResult.from_dict(r))
    return f"worst {worst}, limit {limit}" if worst else ""


def _overview(results: list[dict]) -> str:
    """The precision ratio of every case, per candidate and dtype, in one plot."""
    points, ratio = [], None
    for r in results:
        m = r.get("metrics") or {}
        if r["check"] == "forward_precision" and isinstance(m.get("ratio"), (int, float)):
            points.append(
                (r["candidate"], r["dtype"], float(m["ratio"]), bool(m.get("n_nonfinite")))
            )
            ratio = ratio or (r.get("tolerance") or {}).get("ratio")
    if not points:
        return ""
    svg = plots.precision_overview(points, ratio or 2.0, salt="overview")
    return (
        '<h2 id="overview">Precision across candidates and dtypes</h2>'
        f'<figure class="plot wide" data-plot="precision_overview">{svg}</figure>'
    )


# --- failures -----------------------------------------------------------------------------


def _failures(results: list[dict]) -> str:
    failing = [(i, r) for i, r in enumerate(results) if r["status"] in FAILING]
    if not failing:
        return '<h2 id="failures">Failures</h2><p>None.</p>'
    return f'<h2 id="failures">Failures ({len(failing)})</h2>' + "".join(
        _failure(i, r) for i, r in failing
    )


def _repro(command: str) -> str:
    if not command:
        return ""
    return (
        f'<div class="repro"><code>{esc(command)}</code>'
        f'<button class="copy" type="button" data-copy="{esc(command)}">copy</button></div>'
    )


def _failure(i: int, r: dict) -> str:
    facts = [f"seed {r.get('seed')}", f"trial {r.get('distribution')}"]
    if r.get("failing_distribution"):
        facts.append(f"failing row's distribution {r['failing_distribution']}")
    if hl := _headline(r):
        facts.append(hl)
    facts.append(f"{r.get('duration_s', 0):.2f} s")
    if r.get("implementation"):
        facts.append(r["implementation"])
    figures = result_plots(i, r)
    shown = "".join(figures) or (
        '<p class="noplots">No plot data: '
        + ("this check records none." if r.get("plots") is not None else "a schema 1 report.")
        + "</p>"
    )
    return (
        f'<section class="result st-{esc(r["status"])}" id="{anchor(i)}" '
        f'data-check="{esc(r["check"])}">'
        f"<h3>{esc(r['case_id'])} · {esc(r['check'])} · {esc(r['status'])}</h3>"
        f'<p class="msg">{esc(r.get("message") or "")}</p>{_repro(r.get("repro") or "")}'
        f'<p class="meta">{esc(" · ".join(facts))}</p><div class="plots">{shown}</div></section>'
    )


def result_plots(i: int, r: dict) -> list[str]:
    """The ``<figure>`` of each plot result ``i``'s data supports (``data-plot`` names it)."""
    data = r.get("plots") or {}
    tol = r.get("tolerance") or {}
    out = []

    def figure(kind: str, draw: Callable[..., str], *args) -> None:
        svg = draw(*args, salt=f"{anchor(i)}-{len(out)}")  # ids apart from other plots'
        out.append(f'<figure class="plot" data-plot="{kind}">{svg}</figure>')

    for entry in data.get("errors") or []:
        name = entry.get("name", "")
        own = (tol.get("per_name") or {}).get(name.partition(":")[2] or name) or tol
        atol = own.get("atol")
        if entry.get("ulp"):
            figure("ulp_histogram", plots.ulp_histogram, entry)
        if entry.get("columns"):
            figure("column_errors", plots.column_errors, entry, atol)
        if entry.get("by_distribution"):
            figure("distribution_errors", plots.distribution_errors, entry, atol)
    if data.get("precision"):
        figure("precision", plots.precision, data["precision"])
    if data.get("invariance"):
        figure("invariance_grid", plots.invariance_grid, data["invariance"])
    return out


# --- every result, the environment --------------------------------------------------------


def _results_table(results: list[dict], marks: dict[tuple, str]) -> str:
    rows = []
    for i, r in enumerate(results):
        worst = _headline(r)
        note = r.get("message") or ""
        target = "" if r["status"] in FAILING else f' id="{anchor(i)}" class="target"'
        mark = marks.get(result_key(r), "")
        rows.append(
            f"<tr{target}><td>{esc(r['candidate'])}</td><td>{esc(case_label(r))}</td>"
            f'<td>{esc(r["check"])}</td><td class="cell s-{esc(r["status"])} {mark}">'
            f'<a href="#{anchor(i)}">{esc(r["status"])}</a></td><td>{esc(worst)}</td>'
            f"<td>{esc(note[:200])}</td></tr>"
        )
    return (
        '<h2 id="results">All results</h2><table class="matrix results"><thead><tr>'
        "<th>candidate</th><th>case</th><th>check</th><th>status</th><th>headline</th>"
        f"<th>message</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _kv_table(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
    return f"<table>{rows}</table>"


def _environment(report: dict, summary: dict) -> str:
    env = report.get("environment") or {}
    out = ['<h2 id="environment">Environment</h2>']
    pairs = [(k, " ".join(v) if isinstance(v, list) else v) for k, v in env.items()]
    for name in ("spec_digest", "plan_digest"):
        if digest := fingerprint(report, name):
            pairs.append((name, digest))
    if summary.get("shard"):
        pairs.append(("shard", summary["shard"]))
    out.append(_kv_table(pairs))
    phases = summary.get("phase_seconds") or {}
    if phases:
        out.append("<h3>Phase times</h3>")
        out.append(_kv_table([(k, f"{v:.2f} s") for k, v in phases.items()]))
    shards = report.get("merged_from") or []
    if shards:
        out.append("<h3>Merged from</h3><table><tr><th>source</th><th>shard</th>")
        out.append("<th>results</th><th>passed</th><th>wall time</th><th>environment</th></tr>")
        for s in shards:
            env_s = s.get("environment") or {}
            host = ", ".join(f"{k} {env_s[k]}" for k in ("torch", "platform") if env_s.get(k))
            out.append(
                f"<tr><td>{esc(s.get('source'))}</td><td>{esc(s.get('shard') or '')}</td>"
                f"<td>{esc(s.get('results'))}</td><td>{esc(s.get('passed'))}</td>"
                f"<td>{esc(s.get('wall_time_s'))}</td><td>{esc(host)}</td></tr>"
            )
        out.append("</table>")
    shrunk = summary.get("shrunk") or {}
    if shrunk:
        out.append("<h3>Shrunk failures</h3>")
        out.append(
            _kv_table(
                [
                    (k, f"{v.get('case_id')}: {v.get('repro')}" if isinstance(v, dict) else v)
                    for k, v in shrunk.items()
                ]
            )
        )
    return "".join(out)


def write_html(path: Path, report: dict, diff: Diff | None = None) -> int:
    """Render and write the page atomically; its size in bytes."""
    from kernelcheck.report.json_report import write_atomic

    text = to_html(report, diff)
    write_atomic(Path(path), text)
    return len(text.encode())


__all__ = ["CSP", "anchor", "result_plots", "to_html", "write_html"]
