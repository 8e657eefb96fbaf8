"""A :class:`~kernelcheck.compare.diffing.Diff` as plain text or GitHub markdown."""

from __future__ import annotations

from kernelcheck.compare.diffing import Diff


def _status(s: str | None) -> str:
    return s if s is not None else "absent"


def diff_headline(d: Diff) -> str:
    parts = [
        f"{len(d.new_failures)} new failure(s)",
        f"{len(d.disappeared)} disappeared",
        f"{len(d.newly_skipped)} newly skipped",
        f"{len(d.metric_regressions)} metric regression(s)",
        f"{len(d.new_passes)} new pass(es)",
        f"{len(d.appeared)} appeared",
    ]
    verdict = "REGRESSED" if d.regressed else "OK"
    return f"kernelcheck diff: {verdict}: " + ", ".join(parts)


def disappeared_lines(d: Diff) -> list[str]:
    whole = set(d.disappeared_cases)
    lines, done = [], set()
    for c in d.disappeared:
        if c.case_id in whole:
            if c.case_id not in done:
                n = sum(1 for x in d.disappeared if x.case_id == c.case_id)
                lines.append(f"{c.case_id}: the whole case ({n} check(s))")
                done.add(c.case_id)
        else:
            lines.append(f"{c.case_id} {c.check} (was {_status(c.before)})")
    return lines


def render_diff(d: Diff) -> str:
    """Plain text: a headline with counts, then one line per item, grouped."""
    out = [diff_headline(d)]
    out.append(
        f"baseline {d.baseline_total} result(s), new {d.new_total}; metric factor "
        f"{d.factor:g} on {', '.join(d.metrics) or 'no metrics'} (floor {d.floor:g})"
    )
    out.extend(f"note: {n}" for n in d.notes)

    def section(title: str, lines: list[str], count: int | None = None) -> None:
        if lines:
            out.append("")
            out.append(f"{title} ({len(lines) if count is None else count}):")
            out.extend(f"  {line}" for line in lines)

    nf = []
    for c in d.new_failures:
        nf.append(f"{c.case_id} {c.check}: {_status(c.before)} -> {c.after}: {c.message}".rstrip())
        if c.repro:
            nf.append(f"  repro: {c.repro}")
    section("New failures", nf, len(d.new_failures))
    section("Disappeared", disappeared_lines(d), len(d.disappeared))
    section(
        "Newly skipped",
        [
            f"{c.case_id} {c.check}: {_status(c.before)} -> skip: {c.message}"
            for c in d.newly_skipped
        ],
    )
    section(
        "Metric regressions",
        [
            f"{m.case_id} {m.check} {m.metric}: {m.before:.3g} -> {m.after:.3g} "
            f"(x{m.growth:.3g} > x{d.factor:g}, {m.status})"
            for m in d.metric_regressions
        ],
    )
    section(
        "New passes",
        [f"{c.case_id} {c.check}: {_status(c.before)} -> pass" for c in d.new_passes],
    )
    section("Appeared", [f"{c.case_id} {c.check}: {c.after}" for c in d.appeared])
    if d.still_failing:
        out.append("")
        out.append(f"Still failing: {len(d.still_failing)}")
    return "\n".join(out) + "\n"


def render_diff_markdown(d: Diff) -> str:
    """GitHub-flavoured markdown of the same content (a PR comment or a step summary)."""
    verdict = "❌ REGRESSED" if d.regressed else "✅ no regression"
    out = [f"### kernelcheck diff: {verdict}", "", diff_headline(d).split(": ", 2)[2], ""]
    out.extend(f"- note: {n}" for n in d.notes)

    def section(title: str, lines: list[str], count: int | None = None) -> None:
        if lines:
            out.append(f"#### {title} ({len(lines) if count is None else count})")
            out.append("")
            out.extend(f"- {line}" for line in lines)
            out.append("")

    section(
        "New failures",
        [
            f"**{c.case_id} {c.check}**: {_status(c.before)} → {c.after}: {c.message}"
            + (f"<br>repro: `{c.repro}`" if c.repro else "")
            for c in d.new_failures
        ],
    )
    section("Disappeared", [f"`{line}`" for line in disappeared_lines(d)], len(d.disappeared))
    section("Newly skipped", [f"{c.case_id} {c.check}: {c.message}" for c in d.newly_skipped])
    section(
        "Metric regressions",
        [
            f"{m.case_id} {m.check} `{m.metric}`: {m.before:.3g} → {m.after:.3g} (×{m.growth:.3g})"
            for m in d.metric_regressions
        ],
    )
    section("New passes", [f"{c.case_id} {c.check}" for c in d.new_passes])
    section("Appeared", [f"{c.case_id} {c.check}: {c.after}" for c in d.appeared])
    return "\n".join(out).rstrip() + "\n"
