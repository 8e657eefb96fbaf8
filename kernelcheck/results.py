"""The data that flows from the runner to the reporters: one result per case x check.

Results hold metrics, never tensor data, so a report's size is bounded by the number
of results.
"""

from __future__ import annotations

import platform
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from kernelcheck import coverage

SCHEMA_VERSION = 2  # 2: results carry ``plots``; schema 1 reports (without) still load
READABLE_SCHEMAS = (1, 2)
STATUSES = ("pass", "fail", "error", "timeout", "crash", "skip")
FAILING = ("fail", "error", "timeout", "crash")


@dataclass
class CheckResult:
    op: str
    candidate: str
    device: str
    dtype: str
    shape: dict
    check: str
    status: str
    case_id: str
    metrics: dict = field(default_factory=dict)
    tolerance: dict | None = None
    seed: int | None = None
    distribution: str | None = None  # a failure's: the trial that reruns it (--distributions)
    message: str = ""
    repro: str = ""
    duration_s: float = 0.0
    implementation: str = ""
    failing_distribution: str | None = None  # the failing row's, when a mixed trial held it
    # the op attributes that tell this case from its neighbours (a grid axis, an --attr)
    attributes: dict = field(default_factory=dict)
    # where the error sits, bounded whatever the shape (ULP histogram, worst error by column
    # bucket and by distribution, invariance grid, precision against the reference): the
    # data behind the HTML report's plots; empty where a check has none, and in schema 1
    plots: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Report:
    """A whole run: what ran, what it found, and what did not run."""

    op: str
    op_version: str
    device: str
    results: list[CheckResult] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    interrupted: str | None = None
    not_run: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    extra: dict = field(default_factory=dict)
    # parts of the op's grid the plan left out by choice (``dtypes bf16``: why), so the
    # summary can say what a green run did not check
    not_planned: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        c = Counter(r.status for r in self.results)
        return {s: c.get(s, 0) for s in STATUSES}

    @property
    def passed(self) -> bool:
        counts = self.counts()
        return not any(counts[s] for s in FAILING) and self.interrupted is None

    @property
    def pairs_run(self) -> int:
        """(candidate, check) pairs with a result that is not a skip: 0 means the run
        tested nothing, which is not a pass (exit 5)."""
        return coverage.pairs_run(self.results)

    def not_checked(self) -> list[coverage.NotChecked]:
        """What was not checked and why, one entry per distinct reason."""
        return coverage.not_checked(self.results, self.unavailable, self.not_planned)

    def summary(self) -> dict:
        counts = self.counts()
        ran = sum(counts[s] for s in STATUSES if s != "skip")
        return {
            "passed": self.passed,
            "total": len(self.results),
            "counts": counts,
            "pass_rate": counts["pass"] / ran if ran else 0.0,
            "unavailable_candidates": dict(self.unavailable),
            "interrupted": self.interrupted,
            "not_run": list(self.not_run),
            "wall_time_s": round((self.finished or time.time()) - self.started, 3),
            "pairs_run": self.pairs_run,
            "not_checked": [asdict(n) for n in self.not_checked()],
            **self.extra,
        }

    def to_dict(self, results: bool = True) -> dict:
        """The report as JSON data; ``results=False`` leaves the results list empty (a
        writer that keeps their text already made fills it)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "op": self.op,
            "op_version": self.op_version,
            "device": self.device,
            "environment": self.environment,
            "results": [r.to_dict() for r in self.results] if results else [],
            "summary": self.summary(),
        }


def environment() -> dict:
    import torch

    from kernelcheck import __version__

    return {
        "kernelcheck": __version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "argv": sys.argv[1:],
    }
