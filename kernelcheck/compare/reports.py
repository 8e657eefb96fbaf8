"""Merge and diff JSON reports (schema in README "JSON report"); pure functions on dicts.

A result is identified by its key ``(op, candidate, device, dtype, case_id, check)``.

- :func:`merge` joins reports of one op, op version, schema and device (the N shards of
  a run) into one report, refusing overlapping or mismatched inputs with the reason.
- :func:`diff` compares a baseline report with a new one: new failures and passes,
  checks or cases that disappeared (a silent loss of coverage is a regression), and
  metrics that grew by more than a factor even while still within tolerance.

Nothing here reads files or prints; the ``kernelcheck merge`` / ``kernelcheck diff``
commands (:mod:`kernelcheck.commands.compare`) do.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelcheck.errors import UsageError
from kernelcheck.results import FAILING, READABLE_SCHEMAS, STATUSES

KEY_FIELDS = ("op", "candidate", "device", "dtype", "case_id", "check")
DEFAULT_FACTOR = 2.0
DEFAULT_METRICS = ("max_abs", "ratio")
# A metric below this absolute value never counts as regressed, whatever its growth:
# 0 -> 1e-12 (or 1e-12 -> 1e-10) is noise far below any tolerance, not a regression.
DEFAULT_METRIC_FLOOR = 1e-9

Key = tuple


def result_key(result: dict) -> Key:
    return tuple(result.get(f) for f in KEY_FIELDS)


# Fingerprints a run may record (top level or in its summary); merge refuses reports whose
# fingerprints differ when both record one.
FINGERPRINTS = {
    "spec_digest": "different specs",
    "plan_digest": "different run parameters (candidates, dtypes, shapes, seeds, "
    "distributions or checks)",
}


def fingerprint(report: dict, name: str) -> str | None:
    """A fingerprint a run recorded, at the top level or in its summary."""
    return report.get(name) or (report.get("summary") or {}).get(name)


def spec_digest(report: dict) -> str | None:
    """The spec fingerprint a run recorded (sha256 of the op's spec files)."""
    return fingerprint(report, "spec_digest")


def op_spec_digest(op) -> str:
    """sha256 over the bytes of the spec files behind an op: its own and the add-on specs
    that gave it candidates or overrode its settings. Independent of where the files sit
    (shards on other hosts)."""
    files = {Path(op.source), *(Path(c.source) for c in op.candidates.values())}
    files |= {Path(f) for f in op.overridden_by}
    parts = []
    for f in files:
        try:
            parts.append(hashlib.sha256(f.read_bytes()).hexdigest())
        except OSError:
            parts.append(f"missing:{f.name}")
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()


def plan_digest(cases, check_grad: bool = True) -> str:
    """sha256 of what a run covers, computed *before* sharding: the case ids, seeds,
    distributions and checks, and whether gradients are checked. Every shard of one
    plan records the same digest; another grid, seed list or check list differs."""
    body = {
        "cases": sorted(c.id for c in cases),
        "seeds": sorted({s for c in cases for s in c.seeds}),
        "distributions": sorted({d for c in cases for d in c.distributions}),
        "checks": sorted({k for c in cases for k in c.checks}),
        "check_grad": bool(check_grad),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def validate_report(data: object, name: str = "report") -> dict:
    """``data`` if it is a kernelcheck JSON report this version can read; else UsageError."""
    if not isinstance(data, dict) or "results" not in data or "op" not in data:
        raise UsageError(f"{name}: not a kernelcheck JSON report (no 'op' and 'results')")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMAS:
        readable = ", ".join(map(str, READABLE_SCHEMAS))
        raise UsageError(
            f"{name}: schema_version {version!r} is not supported "
            f"(this kernelcheck reads {readable})"
        )
    if not isinstance(data["results"], list):
        raise UsageError(f"{name}: 'results' is not a list")
    for i, r in enumerate(data["results"]):
        missing = [f for f in (*KEY_FIELDS, "status") if not isinstance(r, dict) or f not in r]
        if missing:
            raise UsageError(f"{name}: results[{i}] lacks {', '.join(missing)}")
    return data


# --- merge -------------------------------------------------------------------------------


def merge(reports: list[dict], names: list[str] | None = None) -> dict:
    """One report holding every result of ``reports``; :class:`UsageError` says why not.

    Refused: a different ``op``, ``op_version``, ``device``,
    ``spec_digest`` or ``plan_digest`` (when both record one), shards of one split
    planned over different candidates, and any result key present in two reports. The
    summary is recomputed; ``not_run`` and ``interrupted`` are combined, ``wall_time_s``
    is the longest input's (shards run side by side) and ``merged_from`` lists the inputs.
    Schemas 1 and 2 merge (a schema 1 result has no ``plots``): the newest one is kept.
    """
    if not reports:
        raise UsageError("merge: no reports given")
    names = list(names) if names else [f"report {i + 1}" for i in range(len(reports))]
    if len(names) != len(reports):
        raise UsageError("merge: one name per report expected")
    for rep, name in zip(reports, names):
        validate_report(rep, name)

    first, first_name = reports[0], names[0]
    for rep, name in zip(reports[1:], names[1:]):
        for fld in ("op", "op_version", "device"):
            if rep.get(fld) != first.get(fld):
                raise UsageError(
                    f"cannot merge: {fld} differs: {first.get(fld)!r} in {first_name}, "
                    f"{rep.get(fld)!r} in {name}"
                )
    recorded: dict[str, str] = {}
    for fp, what in FINGERPRINTS.items():
        digests = {
            n: fingerprint(rep, fp) for rep, n in zip(reports, names) if fingerprint(rep, fp)
        }
        if len(set(digests.values())) > 1:
            (a, da), (b, db) = _first_two_different(digests)
            raise UsageError(
                f"cannot merge: the reports come from {what} "
                f"({fp} {str(da)[:12]} in {a}, {str(db)[:12]} in {b})"
            )
        if digests:
            recorded[fp] = next(iter(digests.values()))
    _check_shards(reports, names)

    seen: dict[Key, str] = {}
    results: list[dict] = []
    for rep, name in zip(reports, names):
        for r in rep["results"]:
            key = result_key(r)
            if key in seen:
                raise UsageError(
                    f"cannot merge: overlapping: {r['case_id']} {r['check']} appears in "
                    f"{seen[key]} and {name}"
                )
            seen[key] = name
            results.append(r)

    summaries = [rep.get("summary") or {} for rep in reports]
    unavailable: dict[str, str] = {}
    for s in summaries:
        unavailable.update(s.get("unavailable_candidates") or {})
    ran = {r["candidate"] for r in results}
    unavailable = {k: v for k, v in unavailable.items() if k not in ran}
    interrupted = [
        f"{name}: {s['interrupted']}" for s, name in zip(summaries, names) if s.get("interrupted")
    ]
    not_run = [c for s in summaries for c in s.get("not_run") or []]
    counts = Counter(r["status"] for r in results)
    full_counts = {st: counts.get(st, 0) for st in STATUSES}
    full_counts.update({st: n for st, n in counts.items() if st not in full_counts})
    executed = sum(n for st, n in full_counts.items() if st != "skip")
    failing = any(full_counts.get(st) for st in FAILING)
    merged_from = []
    for rep, s, name in zip(reports, summaries, names):
        if rep.get("merged_from"):
            merged_from.extend(rep["merged_from"])
            continue
        merged_from.append(
            {
                "source": name,
                "shard": s.get("shard"),
                "results": len(rep["results"]),
                "passed": s.get("passed"),
                "wall_time_s": s.get("wall_time_s"),
                "environment": rep.get("environment") or {},
            }
        )
    out = {
        "schema_version": max(rep["schema_version"] for rep in reports),
        "op": first["op"],
        "op_version": first.get("op_version"),
        "device": first.get("device"),
    }
    out.update(recorded)
    out["environment"] = first.get("environment") or {}
    out["merged_from"] = merged_from
    out["results"] = results
    out["summary"] = {
        "passed": not failing and not interrupted,
        "total": len(results),
        "counts": full_counts,
        "pass_rate": full_counts["pass"] / executed if executed else 0.0,
        "unavailable_candidates": unavailable,
        "interrupted": "; ".join(interrupted) or None,
        "not_run": not_run,
        "wall_time_s": max((s.get("wall_time_s") or 0.0 for s in summaries), default=0.0),
    }
    shrunk = {k: v for s in summaries for k, v in (s.get("shrunk") or {}).items()}
    if shrunk:  # the failures' shrink outcomes (kernelcheck.runner.shrink.shrink_failures)
        out["summary"]["shrunk"] = shrunk
    return out


def _first_two_different(values: dict[str, str]) -> tuple[tuple[str, str], tuple[str, str]]:
    items = list(values.items())
    a = items[0]
    b = next(item for item in items[1:] if item[1] != a[1])
    return a, b


def _check_shards(reports: list[dict], names: list[str]) -> None:
    """Shards of one split must have been planned over the same candidates.

    ``plan`` deals the cases of the runnable candidates; a candidate that ran in one
    shard but was unavailable in another means the shards split different case lists,
    and their union would silently miss cases.
    """
    shards = {}
    for rep, name in zip(reports, names):
        s = rep.get("summary") or {}
        if s.get("shard"):
            shards[name] = (s["shard"], rep)
    by_split: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for name, (shard, rep) in shards.items():
        by_split[str(shard).partition("/")[2]].append((name, rep))
    for members in by_split.values():
        ran = {name: {r["candidate"] for r in rep["results"]} for name, rep in members}
        for name, rep in members:
            missing = set((rep.get("summary") or {}).get("unavailable_candidates") or {})
            for other, cands in ran.items():
                both = sorted(missing & cands)
                if both:
                    raise UsageError(
                        f"cannot merge: candidate {both[0]} ran in {other} but was unavailable "
                        f"in {name}: the shards were planned over different candidates"
                    )


# --- diff --------------------------------------------------------------------------------


@dataclass
class Change:
    """A result whose status changed, appeared or disappeared (``None``: not in that report)."""

    case_id: str
    check: str
    before: str | None
    after: str | None
    message: str = ""
    repro: str = ""
    key: tuple = ()


@dataclass
class MetricRegression:
    case_id: str
    check: str
    metric: str
    before: float
    after: float
    status: str = ""
    repro: str = ""
    key: tuple = ()

    @property
    def growth(self) -> float:
        return self.after / self.before if self.before else math.inf


@dataclass
class Diff:
    """What changed from a baseline report to a new one; ``regressed`` gates CI."""

    new_failures: list[Change] = field(default_factory=list)
    new_passes: list[Change] = field(default_factory=list)
    newly_skipped: list[Change] = field(default_factory=list)
    disappeared: list[Change] = field(default_factory=list)
    appeared: list[Change] = field(default_factory=list)
    metric_regressions: list[MetricRegression] = field(default_factory=list)
    still_failing: list[Change] = field(default_factory=list)
    # case ids every baseline check of which is missing from the new report
    disappeared_cases: list[str] = field(default_factory=list)
    factor: float = DEFAULT_FACTOR
    metrics: tuple[str, ...] = DEFAULT_METRICS
    floor: float = DEFAULT_METRIC_FLOOR
    baseline_total: int = 0
    new_total: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """New failures, lost coverage (disappeared or newly skipped), or worse metrics."""
        return bool(
            self.new_failures or self.disappeared or self.newly_skipped or self.metric_regressions
        )

    def to_dict(self) -> dict:
        out = asdict(self)
        for lst in out.values():
            if isinstance(lst, list):
                for item in lst:
                    if isinstance(item, dict):
                        item.pop("key", None)
        out["metrics"] = list(self.metrics)
        out["regressed"] = self.regressed
        return out


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def diff(
    baseline: dict,
    new: dict,
    factor: float = DEFAULT_FACTOR,
    metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS,
    floor: float = DEFAULT_METRIC_FLOOR,
) -> Diff:
    """Compare two reports of one op.

    - ``new_failures``: now fail/error/timeout/crash, and was pass/skip or absent.
    - ``new_passes``: now pass, was fail/error/timeout/crash.
    - ``newly_skipped``: now skip, was run (coverage lost: a regression).
    - ``disappeared``: in the baseline, missing from the new report (a regression).
    - ``appeared``: new results not in the baseline (not failing ones: those are new failures).
    - ``metric_regressions``: same key, both pass or both failing, and a metric in
      ``metrics`` went from ``old`` to ``new`` with ``new > factor * old`` and
      ``new > floor`` (a non-finite new value over a finite old one counts too).
    """
    validate_report(baseline, "baseline")
    validate_report(new, "new")
    if baseline["op"] != new["op"]:
        raise UsageError(f"cannot diff: baseline is op {baseline['op']}, new is op {new['op']}")
    if factor < 1.0 or math.isnan(factor):
        raise UsageError(f"--factor: expected a number >= 1, got {factor}")
    metrics = tuple(metrics)
    d = Diff(
        factor=factor,
        metrics=metrics,
        floor=floor,
        baseline_total=len(baseline["results"]),
        new_total=len(new["results"]),
    )
    for fld in ("op_version", "device"):
        if baseline.get(fld) != new.get(fld):
            d.notes.append(f"{fld} changed: {baseline.get(fld)!r} -> {new.get(fld)!r}")
    if spec_digest(baseline) and spec_digest(new) and spec_digest(baseline) != spec_digest(new):
        d.notes.append("the spec changed (spec_digest differs)")
    base = {result_key(r): r for r in baseline["results"]}
    cur = {result_key(r): r for r in new["results"]}

    def change(key, b, n) -> Change:
        src = n if n is not None else b
        return Change(
            case_id=src["case_id"],
            check=src["check"],
            before=b["status"] if b is not None else None,
            after=n["status"] if n is not None else None,
            message=src.get("message", "") or "",
            repro=src.get("repro", "") or "",
            key=key,
        )

    for key, n in cur.items():
        b = base.get(key)
        after = n["status"]
        before = b["status"] if b is not None else None
        if after in FAILING:
            if before is None or before not in FAILING:
                d.new_failures.append(change(key, b, n))
            else:
                d.still_failing.append(change(key, b, n))
        elif b is None:
            d.appeared.append(change(key, b, n))
        elif after == "pass" and before in FAILING:
            d.new_passes.append(change(key, b, n))
        elif after == "skip" and before != "skip":
            d.newly_skipped.append(change(key, b, n))
        if b is not None and (
            before == after == "pass" or (before in FAILING and after in FAILING)
        ):
            d.metric_regressions.extend(_metric_regressions(key, b, n, metrics, factor, floor))

    gone_by_case: dict[str, int] = Counter()
    for key, b in base.items():
        if key not in cur:
            d.disappeared.append(change(key, b, None))
            gone_by_case[_case_group(key)] += 1
    base_by_case: dict[str, int] = Counter(_case_group(k) for k in base)
    d.disappeared_cases = [c for c, n in gone_by_case.items() if n == base_by_case[c]]
    unavailable = (new.get("summary") or {}).get("unavailable_candidates") or {}
    for cand in sorted({c.key[KEY_FIELDS.index("candidate")] for c in d.disappeared}):
        if cand in unavailable:
            d.notes.append(f"candidate {cand} did not run in the new report: {unavailable[cand]}")
    for case_id in (new.get("summary") or {}).get("not_run") or []:
        if case_id in gone_by_case:
            d.notes.append(f"case {case_id} did not run in the new report (interrupted)")
    return d


def _case_group(key: tuple) -> str:
    return key[KEY_FIELDS.index("case_id")]


def _metric_regressions(key, b, n, metrics, factor, floor) -> list[MetricRegression]:
    out = []
    bm, nm = b.get("metrics") or {}, n.get("metrics") or {}
    for m in metrics:
        old, now = _number(bm.get(m)), _number(nm.get(m))
        if old is None or now is None or not math.isfinite(old) or math.isnan(now):
            continue
        if now > factor * abs(old) and now > floor:
            out.append(
                MetricRegression(
                    case_id=n["case_id"],
                    check=n["check"],
                    metric=m,
                    before=old,
                    after=now,
                    status=n["status"],
                    repro=n.get("repro", "") or "",
                    key=key,
                )
            )
    return out


# --- rendering ---------------------------------------------------------------------------


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


__all__ = [
    "Change",
    "Diff",
    "MetricRegression",
    "diff",
    "merge",
    "render_diff",
    "render_diff_markdown",
    "result_key",
    "fingerprint",
    "op_spec_digest",
    "plan_digest",
    "spec_digest",
    "validate_report",
]


def read_report(path: Path) -> dict:
    """A kernelcheck JSON report from ``path``; :class:`UsageError` saying why not."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a kernelcheck JSON report (invalid JSON: {exc})") from None
    return validate_report(data, str(path))
