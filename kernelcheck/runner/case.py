"""Run every check of one case and yield one :class:`CheckResult` per check.

Trials are shared: for each (seed, distribution) the candidate runs once for the
accuracy checks, the gold once, and every check observes that trial before the next is
drawn, so memory holds one trial at a time. A fault in the candidate becomes an
``error`` result of the checks it hit; the run goes on.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from kernelcheck import candidates
from kernelcheck.candidates.devices import torch_device
from kernelcheck.cases.grid import Case, fmt_attr, rows
from kernelcheck.cases.inputs import MIX
from kernelcheck.cases.trial_store import SharedTrials
from kernelcheck.checks import CHECKS, CandidateFault, CaseContext, Check, Outcome, Trial
from kernelcheck.checks.context import no_progress
from kernelcheck.checks.threads import torch_threads
from kernelcheck.fresh_memory import poisoned_allocations
from kernelcheck.results import CheckResult
from kernelcheck.runner.poison import poison_cached_device_memory
from kernelcheck.runner.pristine import (
    PristineProcesses,
    candidate_module,
    private_module_dir,
    spawned,
)
from kernelcheck.runner.repro import repro_command
from kernelcheck.spec.imports import ImportPathError, resolve
from kernelcheck.spec.model import OpSpec
from kernelcheck.timing import PhaseClock


@dataclass(frozen=True)
class RunOptions:
    check_grad: bool = True
    user_specs: tuple[Path, ...] = ()
    shared_dir: str | None = None  # where trials are shared by every candidate (None: not)
    shared_budget: int = 0
    sanitize: str | None = None  # the compute-sanitizer tool the isolated workers run under


def make_result(
    case: Case,
    check: str,
    outcome: Outcome,
    options: RunOptions,
    seconds: float = 0.0,
    implementation: str = "",
) -> CheckResult:
    """One check's outcome on one case, with the command that reruns just that."""
    seed = outcome.seed if outcome.seed is not None else (case.seeds[0] if case.seeds else None)
    failing = outcome.status not in ("pass", "skip")
    # a failure's repro reruns the very trial that failed: a mixed trial's whole name
    trial_dist = outcome.trial_distribution or outcome.distribution
    dist = trial_dist if failing else None
    return CheckResult(
        op=case.op,
        candidate=case.candidate,
        device=case.device,
        dtype=case.dtype,
        shape=case.sizes,
        check=check,
        status=outcome.status,
        case_id=case.id,
        metrics=outcome.metrics,
        tolerance=outcome.tolerance,
        seed=seed,
        distribution=dist if failing else outcome.distribution,
        failing_distribution=(
            outcome.distribution if failing and outcome.distribution != trial_dist else None
        ),
        message=outcome.message,
        repro=repro_command(case, check, seed, dist, options.user_specs, options.check_grad),
        duration_s=round(seconds, 4),
        implementation=implementation,
        attributes={k: v for k, v in case.attrs if k in case.shown},
        plots=outcome.plots,
    )


def takes(fn, names) -> set[str]:
    """Which of ``names`` ``fn`` declares as parameters (all, when it takes ``**kwargs`` or
    its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(names)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(names)
    return {p.name for p in params} & set(names)


def with_attributes(fn, attrs: dict):
    """``fn`` with the attribute values it declares bound as keyword arguments.

    A callable that does not declare an attribute is called without it: an op can gain
    an attribute (logp's temperature, say) and every existing candidate keeps working at
    the default value. ``run_case`` skips a candidate asked for another value.
    """
    if fn is None or not attrs:
        return fn
    bound = {k: v for k, v in attrs.items() if k in takes(fn, attrs)}
    return functools.partial(fn, **bound) if bound else fn


def unhonoured(fn, op: OpSpec, attrs: dict) -> list[str]:
    """Attributes set away from their default that ``fn`` does not take."""
    missing = set(attrs) - takes(fn, attrs)
    return [f"{k}={v}" for k, v in attrs.items() if k in missing and v != op.attributes[k][0]]


def swept_taken(fn, op: OpSpec, switches_taken) -> frozenset[str]:
    """The swept attributes ``fn`` can be called at: the value attributes it declares,
    and the switches whose inputs it takes (``switches_taken``: :func:`_switched_ops`'s)."""
    names = set(op.attribute_sweeps)
    return frozenset(takes(fn, names - op.switches) | (names & set(switches_taken)))


def _siblings(op: OpSpec, name: str) -> tuple[tuple[str, OpSpec, Callable], ...]:
    """(label, op, callable) of each sibling of candidate ``name`` (``OpSpec.siblings``)
    at its op's defaults and at each other value of a value attribute it takes (the
    grid's and the sweep's: logp at temperature 0.7): a sibling's state may follow them.
    One that cannot be loaded is left out: it is judged as a candidate of its own op."""
    found = []
    for cand, sib in op.siblings:
        if cand != name:
            continue
        try:
            fn = candidates.load(sib.candidates[cand]).fn
        except ImportPathError:
            continue
        defaults = {k: v[0] for k, v in sib.attributes.items() if k not in sib.switches}
        at_defaults = sib.for_attributes({})
        found.append((sib.name, at_defaults, with_attributes(fn, defaults)))
        for attr, values in other_attribute_values(sib, defaults, takes(fn, defaults)).items():
            for v in values:
                label = f"{sib.name} at {attr}={fmt_attr(v)}"
                found.append((label, at_defaults, with_attributes(fn, {**defaults, attr: v})))
    return tuple(found)


def _rebinder(fn, gold_fn, attrs: dict):
    """``rebound(changes)`` -> (fn, gold_fn) bound to ``attrs`` updated with ``changes``."""

    def rebound(changes: dict) -> tuple:
        return with_attributes(fn, {**attrs, **changes}), with_attributes(
            gold_fn, {**attrs, **changes}
        )

    return rebound


def other_attribute_values(op: OpSpec, attrs: dict, taken: set[str]) -> dict[str, tuple]:
    """Each value attribute in ``taken`` (switches aside): its grid's and sweep's values
    other than ``attrs``'s, in the spec's order."""
    found = {}
    for name in sorted(taken - op.switches):
        values = (*op.attributes.get(name, ()), *op.attribute_sweeps.get(name, ()))
        others = tuple(dict.fromkeys(v for v in values if v != attrs.get(name)))
        if others:
            found[name] = others
    return found


def _switched_ops(op: OpSpec, case: Case, fn) -> dict[str, tuple[bool, OpSpec]]:
    """Each switch whose inputs ``fn`` takes -> (its other value, the op as a case at that
    value sees it, the case's other attributes kept): a kernel cache keyed without the
    switch serves one setting's build to both."""
    found = {}
    for name in sorted(op.switches):
        inputs = [i.name for i in op.inputs if i.when == name]
        if takes(fn, inputs) != set(inputs):
            continue
        value = not case.attributes.get(name, op.attributes[name][0])
        flipped = op.for_attributes({**case.attributes, name: value})
        found[name] = (value, flipped.for_candidate(case.candidate))
    return found


def trial_distributions(op: OpSpec, case: Case) -> list[str]:
    """One mixed trial per seed when there are rows enough for every distribution.

    Row r of a mixed trial ("normal+large+...") is drawn from the r-th distribution mod D,
    so one candidate call covers every distribution: at the Qwen3 vocab with 4096 rows a
    trial costs minutes, and D separate trials would cost D times as much. Checks judge
    and report per distribution (the row's), never across them.
    """
    dists = list(case.distributions)
    if len(dists) > 1 and rows(op, case.sizes) >= len(dists):
        return [MIX.join(dists)]
    return dists


def run_case(
    op: OpSpec,
    case: Case,
    options: RunOptions,
    progress=no_progress,
    clock: PhaseClock | None = None,
    pristine: PristineProcesses | None = None,
) -> Iterator[CheckResult]:
    """Yield one result per check of ``case``; ``progress(check, probe)`` hears each step,
    ``clock`` collects the phase times; ``pristine``: where checks make a process's first
    call (None: a zygote interpreter started on first use). At ``case.threads`` CPU
    threads, if set."""
    with torch_threads(case.threads) if case.threads is not None else nullcontext():
        yield from _run_case(op, case, options, progress, clock or PhaseClock(), pristine)


@dataclass
class Prepared:
    """A case ready to run: its context and candidate, or why no check can run."""

    ctx: CaseContext | None
    fn: object = None
    implementation: str = ""
    refusal: Outcome | None = None  # every check's outcome when the case cannot run


def prepare_case(op: OpSpec, case: Case, options: RunOptions, progress, clock) -> Prepared:
    """Load the candidate and build the checks' :class:`CaseContext` (without a way to
    pristine processes: :func:`run_case` adds it)."""
    cand = op.candidates[case.candidate]
    progress(None, "loading the candidate")
    try:
        with poisoned_allocations():  # what its import allocates reads NaN too
            loaded = candidates.load(cand)
        gold_fn = resolve(op.gold, op.base_dir)
        reference_fn = resolve(op.reference, op.base_dir) if op.reference else None
        gold_backward_fn = resolve(op.gold_backward, op.base_dir) if op.gold_backward else None
        scale_fn = resolve(op.gradient_scale, op.base_dir) if op.gradient_scale else None
    except ImportPathError as exc:
        return Prepared(None, refusal=Outcome("error", f"cannot load: {exc}"))
    # the op's attributes (eps, temperature) are keyword arguments of every callable;
    # a switch attribute (``when``) instead adds an input, which the candidate must take
    attrs = {k: v for k, v in case.attributes.items() if k not in op.switches}
    switchable, switched_ops = (
        {i.name for i in op.inputs if i.when},
        _switched_ops(op, case, loaded.fn),
    )
    sweeps_taken = swept_taken(loaded.fn, op, switched_ops)
    op = op.for_attributes(case.attributes).for_candidate(cand.name)
    switched = [i.name for i in op.inputs if i.name in switchable]
    if cannot := unhonoured(loaded.fn, op, attrs) + sorted(
        set(switched) - takes(loaded.fn, switched)
    ):
        why = f"candidate {cand.name} does not take {', '.join(cannot)} (no such parameter)"
        return Prepared(None, loaded.fn, loaded.implementation, Outcome("skip", why))
    rebound = _rebinder(loaded.fn, gold_fn, attrs)
    gold_fn, reference_fn, gold_backward_fn, scale_fn = (
        with_attributes(f, attrs) for f in (gold_fn, reference_fn, gold_backward_fn, scale_fn)
    )
    grad, grad_reason = _grad_switch(op, cand, options)
    ctx = CaseContext(
        op=op,
        case=case,
        fn=with_attributes(loaded.fn, attrs),
        gold_fn=gold_fn,
        reference_fn=reference_fn,
        device=torch_device(case.device),
        grad=grad,
        grad_reason=grad_reason,
        progress=progress,
        clock=clock,
        gold_backward_fn=gold_backward_fn,
        gradient_scale_fn=scale_fn,
        shared=SharedTrials(options.shared_dir, options.shared_budget),
        other_attribute_values=other_attribute_values(op, attrs, takes(loaded.fn, attrs)),
        rebound=rebound,
        switched_ops=switched_ops,
        swept_taken=sweeps_taken,
        siblings=_siblings(op, cand.name),
    )
    return Prepared(ctx, loaded.fn, loaded.implementation)


def run_prepared(op: OpSpec, case: Case, options: RunOptions, private: bool, program, *args):
    """``program(ctx, *args)`` on the case prepared afresh, in a pristine process: its
    inputs drawn here (never shared with the case process's store); the candidate's
    module imported from a private copy where ``private`` (``private_module_dir``)."""
    with torch_threads(case.threads) if case.threads is not None else nullcontext():
        poison_cached_device_memory(case.device)  # CUDA: the cache's free blocks read NaN
        unshared = replace(options, shared_dir=None)
        cand = op.candidates[case.candidate]
        home = private_module_dir(cand.base_dir, cand.callable) if private else cand.base_dir
        if home != cand.base_dir:  # the candidate's module from this process's own copy
            cand = replace(cand, source=home / cand.source.name)
            op = replace(op, candidates={**op.candidates, case.candidate: cand})
        prepared = prepare_case(op, case, unshared, no_progress, PhaseClock())
        if prepared.ctx is None:
            raise RuntimeError(f"the case did not prepare again: {prepared.refusal.message}")
        return program(prepared.ctx, *args)


def _run_case(op, case, options, progress, clock, pristine) -> Iterator[CheckResult]:
    prepared = prepare_case(op, case, options, progress, clock)

    def result(check: str, outcome: Outcome, seconds: float = 0.0) -> CheckResult:
        # a wrapper may record what actually ran (a replaced kernel entry, say)
        impl = getattr(prepared.fn, "last_implementation", None) or prepared.implementation
        return make_result(case, check, outcome, options, seconds, impl)

    if prepared.ctx is None:
        for name in case.checks:
            yield result(name, prepared.refusal)
        return

    own = pristine is not None  # only a worker's case process is handed its pristine ones
    ctx = replace(prepared.ctx, own_process=own)
    ctx.in_pristine_process = _pristine_runner(op, case, options, pristine, ctx)
    active: dict[str, Check] = {}
    for name in case.checks:
        check = CHECKS[name](ctx, ctx.op.check_params(name))
        reason = check.skip_reason()
        if reason:
            yield result(name, Outcome("skip", reason))
        else:
            active[name] = check
    broken, spent = _observe_trials(ctx, active)
    for name, check in active.items():
        if name in broken:
            yield result(name, broken[name], spent[name])
            continue
        try:
            with clock.phase("checks"):
                outcome = check.outcome()
        except Exception as exc:
            outcome = Outcome(
                "error", f"internal error in check {name}: {type(exc).__name__}: {exc}"
            )
        yield result(name, outcome, spent[name])


def _pristine_runner(op, case, options, pristine, ctx: CaseContext):
    """``in_pristine_process(program, *args)`` for the case's checks: each run imports
    the candidate's module from a private copy of it. A run that fails there is run
    again in a pristine process that imports it from its own folder (a module that finds
    its files by its folder's parent, or a link's target, may not load from a copy);
    where that one succeeds, the case's later runs do the same, and the context's
    ``shared_module_folder`` says why: files kept beside the module went unchecked."""
    cand = op.candidates[case.candidate]
    private = candidate_module(cand.base_dir, cand.callable) is not None

    def in_pristine_process(program, *args):
        nonlocal private
        zygote = pristine if pristine is not None else spawned()
        if not private:
            return zygote.run(run_prepared, op, case, options, False, program, *args)
        try:
            return zygote.run(run_prepared, op, case, options, True, program, *args)
        except (CandidateFault, RuntimeError) as exc:
            if zygote.broken:
                raise
            value = zygote.run(run_prepared, op, case, options, False, program, *args)
            private = False
            why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            ctx.shared_module_folder.append(f"the module's private copy failed: {why}")
            return value

    return in_pristine_process


def _grad_switch(op: OpSpec, cand, options: RunOptions) -> tuple[bool, str]:
    """Whether the backward checks run, and why not."""
    if not options.check_grad:
        return False, "backward checks are off (--no-check-grad)"
    if not cand.backward:
        return False, f"candidate {cand.name} declares backward = false"
    if not op.grad_inputs:
        return False, f"op {op.name} declares no backward inputs"
    return True, ""


def _observe_order(active: dict[str, Check]) -> list[tuple[str, Check]]:
    """Case order, except that checks drawing inputs of their own (invariance pools, other
    shapes) come last, those reading the gradient first among them, and before them those
    reading none of the trial's results (integrity): a trial's Qwen3-sized gradient is
    freed before an invariance pool is drawn beside it."""
    return sorted(
        active.items(),
        key=lambda item: (
            item[1].draws_own,
            item[1].draws_own and "grads" not in item[1].uses,
            not item[1].uses,
        ),
    )


def _observe_trials(
    ctx: CaseContext, active: dict[str, Check]
) -> tuple[dict[str, Outcome], dict[str, float]]:
    """Every active check observes its trials, one trial at a time (each released before
    the next is drawn): the checks broken on the way, and each check's seconds."""
    case = ctx.case
    trials = [Trial(ctx, s, d) for d in trial_distributions(ctx.op, case) for s in case.seeds]
    wanted = {name: set(map(id, c.trials_wanted(trials))) for name, c in active.items()}
    for trial in trials:  # integrity reads the inputs after the trial's own calls
        trial.watch = id(trial) in wanted.get("integrity", ())
        for part in Trial.PARTS:
            trial.readers[part] = {
                n for n, c in active.items() if id(trial) in wanted[n] and part in c.uses
            }
    spent = dict.fromkeys(active, 0.0)
    broken: dict[str, Outcome] = {}
    order = _observe_order(active)
    for trial in trials:
        # once the checks left to observe a trial need small inputs only, the trial lets
        # go of its inputs when the store can map them again (a reader that does need
        # them maps them back)
        last_full = max(
            (
                k
                for k, (name, check) in enumerate(order)
                if not check.small_inputs and id(trial) in wanted[name]
            ),
            default=-1,
        )
        for k, (name, check) in enumerate(order):
            if name in broken or id(trial) not in wanted[name]:
                trial.finished(name)
                continue
            if k > last_full:
                trial.unmap_inputs()
            t0 = time.perf_counter()
            ctx.progress(name, f"seed {trial.seed}")
            fault = _observe(check, trial, ctx.clock)
            if fault is not None:
                broken[name] = fault
            trial.finished(name)
            spent[name] += time.perf_counter() - t0
        trial.release()  # free this trial's tensors before drawing the next
    return broken, spent


def _observe(check: Check, trial: Trial, clock: PhaseClock) -> Outcome | None:
    """``check`` observes ``trial``; the error outcome that ends the check, if any."""
    where = dict(seed=trial.seed, distribution=trial.distribution)
    try:
        with clock.phase("checks"):
            check.observe(trial)
    except CandidateFault as exc:
        return Outcome("error", f"{exc} [seed {trial.seed}, {trial.distribution}]", **where)
    except Exception as exc:  # a bug in a check is reported, not raised
        why = f"internal error in check {check.name}: {type(exc).__name__}: {exc}"
        return Outcome("error", why, **where)
    return None
