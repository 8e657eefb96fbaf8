"""What a run checked, and what it did not and why.

A run whose every result is a skip, or that has no results, tested nothing: a gate must
not read it as green. These pure functions count the (candidate, check) pairs that ran
and say, one line per distinct reason rather than one per case, what was left out: the
skipped checks, the dtypes the plan left out, the candidates unavailable here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelcheck.results import CheckResult

MAX_SHAPES_NAMED = 3  # more skipped shapes than this are counted, not listed


@dataclass(frozen=True)
class NotChecked:
    """One reason something was not checked: ``what`` (``temperature=0.7 not checked for
    cpu``) and ``reason`` (the skip's message, the probe's reason)."""

    what: str
    reason: str

    def line(self) -> str:
        return f"{self.what}: {self.reason}"


def pairs_run(results: Iterable[CheckResult]) -> int:
    """The distinct (candidate, check) pairs with at least one result that is not a skip."""
    return len({(r.candidate, r.check) for r in results if r.status != "skip"})


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _shape(r: CheckResult) -> str:
    return "x".join(map(str, r.shape.values()))


@dataclass(frozen=True)
class _Axis:
    """One way to name part of a run: ``kind`` (attribute, dtype, check, shape), the text
    before its values (``temperature=``) and each result's value on it."""

    kind: str
    prefix: str
    value: Callable[[CheckResult], str]


def _axes(group: Sequence[CheckResult]) -> list[_Axis]:
    """The axes, most telling first: each attribute (a result that does not name it ran
    at its default, ""), then the dtype, the check, the shape."""
    from kernelcheck.cases.grid import fmt_attr  # here: results (and so this) loads light

    def attr(key: str) -> Callable[[CheckResult], str]:
        return lambda r: fmt_attr(r.attributes[key]) if key in r.attributes else ""

    keys = _unique(k for r in group for k in r.attributes)
    return [
        *(_Axis("attribute", f"{k}=", attr(k)) for k in keys),
        _Axis("dtype", "", lambda r: r.dtype),
        _Axis("check", "", lambda r: r.check),
        _Axis("shape", "", _shape),
    ]


def _scope(group: Sequence[CheckResult], whole: Sequence[CheckResult]) -> tuple[str, str]:
    """(checks, case): the fewest axis values that single the group out of ``whole`` (its
    candidates' results), added in :func:`_axes` order until what they select is all in
    the group: ``temperature=0.7``, not every check and shape that case happened to have."""
    members = {id(r) for r in group}
    selected, checks, case = list(whole), "", []
    for axis in _axes(group):
        if all(id(r) in members for r in selected):
            break
        values = _unique(axis.value(r) for r in group)
        if "" in values or set(values) == {axis.value(r) for r in selected}:
            continue  # spans this axis: naming it would not narrow anything
        selected = [r for r in selected if axis.value(r) in values]
        if axis.kind == "check":
            checks = ", ".join(values)
        elif axis.kind == "shape" and len(values) > MAX_SHAPES_NAMED:
            case.append(f"{len(values)} shapes")
        else:
            case.append(axis.prefix + " or ".join(values))
    return checks, " ".join(case)


def _describe(group: Sequence[CheckResult], results: Sequence[CheckResult]) -> str:
    """``temperature=0.7 not checked for cpu``, ``backward_accuracy at bf16 not checked
    for torch``; ``nothing checked for cpu`` when the group is every result of its
    candidates."""
    cands = _unique(r.candidate for r in group)
    checks, case = _scope(group, [r for r in results if r.candidate in cands])
    subject = f"{checks} at {case}" if checks and case else checks or case
    who = ", ".join(cands)
    return f"{subject} not checked for {who}" if subject else f"nothing checked for {who}"


def skipped(results: Sequence[CheckResult]) -> list[NotChecked]:
    """The skip results grouped by their reason, in order of first appearance."""
    groups: dict[str, list[CheckResult]] = defaultdict(list)
    for r in results:
        if r.status == "skip":
            groups[r.message].append(r)
    return [NotChecked(_describe(group, results), reason) for reason, group in groups.items()]


def unjudged(results: Sequence[CheckResult]) -> list[NotChecked]:
    """The parts a check that ran could not judge (``metrics["not_judged"]``: [part, why]
    pairs, a call past its memory budget), named with the check, candidate and dtype."""
    found = []
    for r in results:
        for part, why in (r.metrics or {}).get("not_judged", ()):
            found.append(NotChecked(f"{r.check}'s {part} for {r.candidate} at {r.dtype}", why))
    return found


def unavailable(candidates: dict[str, str]) -> list[NotChecked]:
    """The candidates that cannot run here, one line per distinct reason."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for name, reason in candidates.items():
        by_reason[reason].append(name)
    return [
        NotChecked(f"candidate{'s' if len(names) > 1 else ''} {', '.join(names)} not checked", why)
        for why, names in by_reason.items()
    ]


def not_checked(
    results: Sequence[CheckResult],
    unavailable_candidates: dict[str, str],
    not_planned: dict[str, str],
) -> list[NotChecked]:
    """Everything a run left out: skipped checks, parts of checks that could not judge,
    what the plan left out (``what: why``), unavailable candidates."""
    planned = [NotChecked(f"{what} not checked", why) for what, why in not_planned.items()]
    return skipped(results) + unjudged(results) + planned + unavailable(unavailable_candidates)
