"""Merging the shards of a run into one report (pure functions on dicts).

:func:`merge` joins reports of one op, op version, schema and device (the N shards of a
run) into one report, refusing overlapping or mismatched inputs with the reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from kernelcheck.compare.identity import FINGERPRINTS, Key, fingerprint, result_key
from kernelcheck.compare.validation import validate_report
from kernelcheck.errors import UsageError
from kernelcheck.results import FAILING, STATUSES


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
    _check_same_run(reports, names)
    recorded = _recorded_fingerprints(reports, names)
    _check_shards(reports, names)
    results = _joined_results(reports, names)
    first = reports[0]
    out = {
        "schema_version": max(rep["schema_version"] for rep in reports),
        "op": first["op"],
        "op_version": first.get("op_version"),
        "device": first.get("device"),
    }
    out.update(recorded)
    out["environment"] = first.get("environment") or {}
    out["merged_from"] = _merged_from(reports, names)
    out["results"] = results
    out["summary"] = _merged_summary(reports, names, results)
    return out


def _check_same_run(reports: list[dict], names: list[str]) -> None:
    """Every report is of the first one's op, op version and device."""
    first, first_name = reports[0], names[0]
    for rep, name in zip(reports[1:], names[1:]):
        for fld in ("op", "op_version", "device"):
            if rep.get(fld) != first.get(fld):
                raise UsageError(
                    f"cannot merge: {fld} differs: {first.get(fld)!r} in {first_name}, "
                    f"{rep.get(fld)!r} in {name}"
                )


def _recorded_fingerprints(reports: list[dict], names: list[str]) -> dict[str, str]:
    """The fingerprints the reports record, one value each (else the reports differ)."""
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
    return recorded


def _joined_results(reports: list[dict], names: list[str]) -> list[dict]:
    """Every result, each key once (two reports holding one key overlap: refused)."""
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
    return results


def _merged_from(reports: list[dict], names: list[str]) -> list[dict]:
    """Where the merged results came from: each input (a merged input's own sources)."""
    merged_from = []
    for rep, name in zip(reports, names):
        if rep.get("merged_from"):
            merged_from.extend(rep["merged_from"])
            continue
        s = rep.get("summary") or {}
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
    return merged_from


def _merged_summary(reports: list[dict], names: list[str], results: list[dict]) -> dict:
    """The summary recomputed over the merged results, the inputs' notes combined."""
    summaries = [rep.get("summary") or {} for rep in reports]
    unavailable: dict[str, str] = {}
    for s in summaries:
        unavailable.update(s.get("unavailable_candidates") or {})
    ran = {r["candidate"] for r in results}
    unavailable = {k: v for k, v in unavailable.items() if k not in ran}
    interrupted = [
        f"{name}: {s['interrupted']}" for s, name in zip(summaries, names) if s.get("interrupted")
    ]
    counts = Counter(r["status"] for r in results)
    full_counts = {st: counts.get(st, 0) for st in STATUSES}
    full_counts.update({st: n for st, n in counts.items() if st not in full_counts})
    executed = sum(n for st, n in full_counts.items() if st != "skip")
    failing = any(full_counts.get(st) for st in FAILING)
    summary = {
        "passed": not failing and not interrupted,
        "total": len(results),
        "counts": full_counts,
        "pass_rate": full_counts["pass"] / executed if executed else 0.0,
        "unavailable_candidates": unavailable,
        "interrupted": "; ".join(interrupted) or None,
        "not_run": [c for s in summaries for c in s.get("not_run") or []],
        "wall_time_s": max((s.get("wall_time_s") or 0.0 for s in summaries), default=0.0),
    }
    shrunk = {k: v for s in summaries for k, v in (s.get("shrunk") or {}).items()}
    if shrunk:  # the failures' shrink outcomes (kernelcheck.runner.shrink.shrink_failures)
        summary["shrunk"] = shrunk
    return summary


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
