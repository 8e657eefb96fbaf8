"""Diffing a baseline report against a new run (pure functions on dicts).

:func:`diff` finds new failures and passes, checks or cases that disappeared (a silent
loss of coverage is a regression), and metrics that grew by more than a factor even
while still within tolerance. Rendering the :class:`Diff` is ``compare/rendering.py``'s.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

from kernelcheck.compare.identity import KEY_FIELDS, result_key, spec_digest
from kernelcheck.compare.validation import validate_report
from kernelcheck.errors import UsageError
from kernelcheck.results import FAILING

DEFAULT_FACTOR = 2.0
DEFAULT_METRICS = ("max_abs", "ratio")
# A metric below this absolute value never counts as regressed, whatever its growth:
# 0 -> 1e-12 (or 1e-12 -> 1e-10) is noise far below any tolerance, not a regression.
DEFAULT_METRIC_FLOOR = 1e-9


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
