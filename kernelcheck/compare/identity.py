"""What identifies a result and a run: result keys, and the fingerprints a run records.

A result is identified by its key ``(op, candidate, device, dtype, case_id, check)``;
a run by the digests of its spec files and of its plan, which merge compares.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

KEY_FIELDS = ("op", "candidate", "device", "dtype", "case_id", "check")

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
