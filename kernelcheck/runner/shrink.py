"""Shrink a failing case: the smallest shape and simplest inputs that still fail the check.

Starting from a failing result, the search reruns the one failing check on the one
failing trial (its seed and distribution) and keeps a reduction only when the check
still ends with the same status:

1. rows: every lead dim to 1 (optional ones dropped first), else each lead dim halved,
   then bisected to the smallest size that still fails;
2. the other dims (vocab): the classic small sizes 1, 2, 16, 257 below the current one,
   else halving, then bisection;
3. the distribution, simplest first: normal, equal, heavy, masked, lm, large, then the
   narrower ones (``SIMPLEST_FIRST``: every one). A mixed trial (row r from the r-th of
   several distributions) is first narrowed to one distribution, before the rows, so
   that fewer rows still hold the failing kind;
4. the stages repeat until none reduces the case: the result is minimal, and shrinking
   its repro again finds nothing smaller.

Attempts run through the run's :class:`~kernelcheck.runner.execute.Executor` (isolated
or in process, as the run was). The search stops when ``budget_s`` is spent: it is
checked before each attempt and caps each attempt's timeout (at least 1 s), so the search
overruns by at most one attempt's start-up; it reports what it reached. A library
function: nothing is printed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

from kernelcheck.cases.grid import Case
from kernelcheck.cases.inputs import MIX
from kernelcheck.checks import CHECKS
from kernelcheck.results import CheckResult
from kernelcheck.runner.case import RunOptions
from kernelcheck.runner.execute import Executor
from kernelcheck.runner.repro import repro_command
from kernelcheck.spec.load import Catalog

# every distribution, the shapes of rows a reader takes in at a glance first
SIMPLEST_FIRST = (
    *("normal", "equal", "heavy", "masked", "lm", "large", "zero_rows", "tiny_rows"),
    *("drifted", "bands", "peaked", "spikes", "edges"),
)
# what a search makes smaller: a kernel's own failure. An ``error`` (the candidate raised,
# a library is missing, a value it cannot take) is no failing input to make smaller.
SHRINKABLE = ("fail", "timeout", "crash")
CLASSIC_SIZES = (1, 2, 16, 257)


@dataclass
class ShrinkOutcome:
    """Where the search got: the smallest failing case found and how to rerun it."""

    original_case_id: str
    check: str
    status: str
    original_shape: dict
    shape: dict
    distribution: str | None
    seed: int | None
    case_id: str
    repro: str
    original_repro: str
    message: str = ""
    attempts: int = 0
    elapsed_s: float = 0.0
    budget_s: float = 0.0
    exhausted_budget: bool = False
    reproduced: bool = True
    steps: list[str] = field(default_factory=list)

    @property
    def shrunk(self) -> bool:
        return self.case_id != self.original_case_id or bool(self.steps)

    def to_dict(self) -> dict:
        return asdict(self)


class _Budget(Exception):
    pass


class _Search:
    def __init__(self, op, check, status, options, budget_s, executor):
        self.op = op
        self.check = check
        self.status = status
        self.options = options
        self.budget_s = budget_s
        self.executor = executor
        self.base_timeout = executor.timeout_s if executor.timeout_s is not None else op.timeout_s
        self.t0 = time.perf_counter()
        self.attempts = 0
        self.exhausted = False
        self.last: CheckResult | None = None
        self.best: Case | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def fails(self, case: Case) -> bool:
        """True when ``case`` still fails the check with the same status."""
        remaining = self.budget_s - self.elapsed()
        if remaining <= 0:
            self.exhausted = True
            raise _Budget
        self.attempts += 1
        # a hanging attempt is cut at the budget's end (a timeout is only "the same
        # failure" when the attempt had the run's full timeout)
        timeout = min(self.base_timeout, max(remaining, 1.0))
        saved, self.executor.timeout_s = self.executor.timeout_s, timeout
        try:
            results = list(self.executor.run(self.op, case, self.options))
        finally:
            self.executor.timeout_s = saved
        res = next((r for r in results if r.check == self.check), None)
        if res is None or res.status != self.status:
            return False
        if res.status == "timeout" and timeout < self.base_timeout:
            return False
        self.last, self.best = res, case  # every stage keeps a case that still fails
        return True


def _with_sizes(case: Case, sizes: dict[str, int]) -> Case:
    """``case`` at ``sizes``, keeping the original dim order (a dim missing is dropped)."""
    return replace(case, shape=tuple((k, sizes[k]) for k, _ in case.shape if k in sizes))


def _minimize_dim(search: _Search, case: Case, dim: str, first_tries=()) -> Case:
    """Smallest size of ``dim`` that still fails: quick tries, halving, then bisection."""
    size = case.sizes[dim]
    passing = 0  # the largest size known to pass (0: none known)
    for s in first_tries:
        if s >= size:
            break
        trial = _with_sizes(case, {**case.sizes, dim: s})
        if search.fails(trial):
            case, size = trial, s
            break
        passing = s
    while size // 2 > passing:
        trial = _with_sizes(case, {**case.sizes, dim: size // 2})
        if not search.fails(trial):
            passing = size // 2
            break
        case, size = trial, size // 2
    # bisect between the largest passing and the smallest failing size, to the last one:
    # a shrunk case must be minimal, so that shrinking its repro again finds nothing
    while size - passing > 1:
        mid = (passing + size) // 2
        trial = _with_sizes(case, {**case.sizes, dim: mid})
        if search.fails(trial):
            case, size = trial, mid
        else:
            passing = mid
    return case


def _shrink_rows(search: _Search, case: Case) -> Case:
    op = search.op
    lead = [d for d in op.lead if d in case.sizes]
    if not lead or all(case.sizes[d] == 1 for d in lead):
        return case
    optional = [d for d in lead if op.dims.get(d) is not None and op.dims[d].optional]
    required = [d for d in lead if d not in optional]
    one_row = []
    if optional and required:
        one_row.append(
            _with_sizes(case, {d: 1 if d in required else v for d, v in _keep(case, optional)})
        )
    one_row.append(_with_sizes(case, {d: 1 if d in lead else v for d, v in case.sizes.items()}))
    for trial in one_row:
        if trial.sizes != case.sizes and search.fails(trial):
            return trial
    if optional and required:
        trial = _with_sizes(case, dict(_keep(case, optional)))
        if search.fails(trial):
            case = trial
    for d in [d for d in lead if d in case.sizes]:
        case = _minimize_dim(search, case, d)
    return case


def _keep(case: Case, drop: list[str]):
    return [(d, v) for d, v in case.sizes.items() if d not in drop]


def _shrink_other_dims(search: _Search, case: Case) -> Case:
    for d in [d for d in case.sizes if d not in search.op.lead]:
        case = _minimize_dim(search, case, d, CLASSIC_SIZES)
    return case


def _shrink_distribution(search: _Search, case: Case) -> Case:
    """The simplest single distribution that still fails (a mixed trial's parts too)."""
    current = case.distributions[0] if case.distributions else None
    order = list(SIMPLEST_FIRST)
    if len(case.distributions) > 1 or (current and MIX in current):  # any single one
        simpler = order
    elif current in order:
        simpler = order[: order.index(current)]
    else:
        return case
    for dist in simpler:
        trial = replace(case, distributions=(dist,))
        if search.fails(trial):
            return trial
    return case


def _rows(op, sizes: dict) -> int:
    n = 1
    for d in op.lead:
        n *= sizes.get(d, 1)
    return n


def shrink(
    catalog: Catalog,
    op_name: str,
    result: CheckResult | dict,
    options: RunOptions,
    budget_s: float = 60.0,
    executor: Executor | None = None,
) -> ShrinkOutcome:
    """Search for the smallest failing variant of ``result``'s case; see the module doc.

    Attempts run through ``executor`` (the run's, so isolation and timeouts match it);
    without one, a default :class:`~kernelcheck.runner.execute.Executor` is made and closed.
    """
    r = result if isinstance(result, CheckResult) else CheckResult.from_dict(result)
    op = catalog.op(op_name)
    seed = r.seed if r.seed is not None else (op.grid.seeds[0] if op.grid.seeds else 0)
    dists = (r.distribution,) if r.distribution else tuple(op.grid.distributions)
    original = Case(
        op.name,
        r.candidate,
        r.device,
        r.dtype,
        tuple(r.shape.items()),
        (seed,),
        dists,
        (r.check,),
        # the failing case's attributes (logp's with_mask, a temperature): the others at
        # their defaults, and the same ones shown in ids and repros
        attrs=tuple((k, r.attributes.get(k, v[0])) for k, v in op.attributes.items()),
        shown=tuple(k for k in op.attributes if k in r.attributes),
        pinned=tuple(op.attribute_sweeps),
    )
    own = executor is None
    executor = executor or Executor()
    search = _Search(op, r.check, r.status, options, budget_s, executor)
    steps: list[str] = []
    reproduced = False
    message = r.message
    try:
        reproduced = search.fails(original)
        if reproduced:
            if len(dists) > 1 or MIX in dists[0]:  # several kinds in one trial: one first
                _stage(_shrink_distribution, search, steps)
            # to a fixpoint: a simpler distribution may let fewer rows or a smaller vocab
            # fail, and the other way round
            changed = True
            while changed:
                changed = _stage(_shrink_rows, search, steps)
                changed |= _stage(_shrink_other_dims, search, steps)
                changed |= _stage(_shrink_distribution, search, steps)
    except _Budget:
        pass
    finally:
        if own:
            executor.close()
    best = search.best or original
    if search.last is not None:
        message = search.last.message
    dist = best.distributions[0] if len(best.distributions) == 1 else r.distribution
    return ShrinkOutcome(
        original_case_id=original.id,
        check=r.check,
        status=r.status,
        original_shape=dict(r.shape),
        shape=best.sizes,
        distribution=dist,
        seed=seed,
        case_id=best.id,
        repro=repro_command(best, r.check, seed, dist, options.user_specs, options.check_grad),
        original_repro=r.repro
        or repro_command(original, r.check, seed, dist, options.user_specs, options.check_grad),
        message=message,
        attempts=search.attempts,
        elapsed_s=round(search.elapsed(), 3),
        budget_s=budget_s,
        exhausted_budget=search.exhausted,
        reproduced=reproduced,
        steps=steps,
    )


def _stage(fn, search: _Search, steps: list[str]) -> bool:
    """Run one stage from the best case so far; record (and say) whether it reduced it."""
    start = search.best
    try:
        fn(search, start)
    finally:
        if search.best != start:
            steps.append(_describe(search.op, start, search.best))
    return search.best != start


def _describe(op, before: Case, after: Case) -> str:
    if before.distributions != after.distributions:
        return f"distribution {before.distributions[0]} -> {after.distributions[0]}"
    b, a = before.sizes, after.sizes
    dims = [f"{d} {b[d]} -> {a[d] if d in a else 'dropped'}" for d in b if a.get(d) != b[d]]
    return f"{', '.join(dims)} (rows {_rows(op, b)} -> {_rows(op, a)})"


def format_shrink(o: ShrinkOutcome) -> str:
    """One line for a report, next to the original repro: the shrunk repro and the search."""
    b = "budget spent, " if o.exhausted_budget else ""
    if not o.reproduced:
        return (
            f"shrink: did not reproduce on seed {o.seed} alone "
            f"({b}{o.attempts} attempt(s), {o.elapsed_s:.1f} s)"
        )
    if not o.shrunk:
        return f"shrink: no smaller failing case ({b}{o.attempts} attempt(s), {o.elapsed_s:.1f} s)"
    return (
        f"shrunk: {o.repro}  [{o.original_case_id} -> {o.case_id}, {o.distribution}; "
        f"{b}{o.attempts} attempt(s), {o.elapsed_s:.1f} s]"
    )


def shrinkable(r: CheckResult) -> bool:
    """A kernel's own failure (no ``error``) of a check that a smaller case can show."""
    return r.status in SHRINKABLE and getattr(CHECKS.get(r.check), "shrinkable", True)


def shrink_failures(
    catalog: Catalog, plan, report, budget_s: float = 60.0
) -> dict[tuple[str, str], ShrinkOutcome]:
    """Shrink a run's failures within one shared budget; ``{(case_id, check): outcome}``.

    One search per (candidate, dtype, check), started from its fewest-rows failing case
    (the cheapest start; the other shapes usually fail for the same reason). Attempts
    run with the plan's isolation and timeout. The outcomes are also recorded in
    ``report.extra["shrunk"]`` (the JSON summary), keyed ``"<case_id> <check>"``.
    """
    failing = [r for r in report.results if shrinkable(r)]
    first: dict[tuple, CheckResult] = {}
    for r in sorted(failing, key=lambda r: (_rows(plan.op, r.shape), sum(r.shape.values()))):
        first.setdefault((r.candidate, r.dtype, r.check), r)
    out: dict[tuple[str, str], ShrinkOutcome] = {}
    if not first:
        return out
    executor = Executor(plan.isolate, plan.timeout_s)
    t0 = time.perf_counter()
    try:
        for r in first.values():
            left = budget_s - (time.perf_counter() - t0)
            if left <= 0:
                break
            out[(r.case_id, r.check)] = shrink(
                catalog, plan.op.name, r, plan.options, left, executor
            )
    finally:
        executor.close()
        phases = report.extra.setdefault("phase_seconds", {})
        phases["shrink"] = round(phases.get("shrink", 0.0) + time.perf_counter() - t0, 3)
        report.finished = time.time()  # the reported total includes the shrinking
    report.extra["shrunk"] = {f"{k[0]} {k[1]}": o.to_dict() for k, o in out.items()}
    return out


__all__ = [
    "SHRINKABLE",
    "SIMPLEST_FIRST",
    "ShrinkOutcome",
    "format_shrink",
    "shrink",
    "shrink_failures",
    "shrinkable",
]
