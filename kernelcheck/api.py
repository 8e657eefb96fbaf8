"""The library API: plan a run, execute it, list what exists, diagnose the machine.

The CLI, the tests and the pytest plugin all call these functions; nothing here prints.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from kernelcheck import candidates, dtypes
from kernelcheck.candidates import devices
from kernelcheck.candidates.siblings import with_siblings
from kernelcheck.cases import run_folder
from kernelcheck.cases.grid import (
    Case,
    fmt_attr,
    parse_shard,
    shard,
    share_invariance_pools,
    sweep_shapes,
)
from kernelcheck.cases.inputs import DISTRIBUTIONS, is_distribution
from kernelcheck.checks import CHECKS, Outcome
from kernelcheck.checks.far_rows import far_rows_unjudged
from kernelcheck.checks.shape_sweep import (
    LONG_ROWS,
    WIDE_BLOCK_ROWS,
    huge_rows_shape,
    narrowest_dtype,
    swept_dims,
)
from kernelcheck.compare import op_spec_digest, plan_digest
from kernelcheck.errors import Interrupted, SpecError, UsageError
from kernelcheck.fresh_memory import poisoned_allocations
from kernelcheck.results import CheckResult, Report, environment
from kernelcheck.runner import sanitize
from kernelcheck.runner.case import RunOptions, make_result
from kernelcheck.runner.execute import Executor
from kernelcheck.runner.schedule import Schedule, concurrency, shared_groups, with_threads
from kernelcheck.spec.imports import ImportPathError, resolve
from kernelcheck.spec.load import DEVICE_ALIASES, Catalog, load_catalog, resolve_shape
from kernelcheck.spec.model import OpSpec


@dataclass
class Plan:
    """A validated run: the op, the device, the cases and what could not run here."""

    op: OpSpec
    device: str
    cases: list[Case]
    options: RunOptions
    unavailable: dict[str, str] = field(default_factory=dict)
    shard: tuple[int, int] | None = None
    isolate: bool | None = None  # None: native candidates isolated, Python ones in process
    timeout_s: float | None = None  # None: the spec's per-case timeout
    plan_digest: str = ""  # what the whole (unsharded) run covers: merge refuses a mismatch
    # native candidates whose library is missing on their own device (not --allow-missing):
    # name -> the probe's reason. Also in ``unavailable``, but reported as errors: a kernel
    # the run was meant to test and could not is a failure, not a silent gap
    missing: dict[str, str] = field(default_factory=dict)
    missing_cases: list[Case] = field(default_factory=list)  # each one's first case (shard's)
    not_planned: dict[str, str] = field(default_factory=dict)  # ``dtypes bf16``: why not


def _split(values: Iterable[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def resolve_device(name: str) -> str:
    if name == "auto":
        return devices.pick_auto()
    if name not in devices.DEVICES:
        alias = DEVICE_ALIASES.get(name.lower())
        hint = f" (did you mean {alias!r}?)" if alias else ""
        raise UsageError(
            f"unknown device {name!r}{hint}; valid: auto, {', '.join(devices.DEVICES)}"
        )
    status = devices.status(name)
    if not status.available:
        raise UsageError(f"device {name} is not available here: {status.reason}")
    return name


def plan(
    catalog: Catalog,
    op: str,
    candidate_names: Iterable[str] | None = None,
    device: str = "auto",
    dtype_names: Iterable[str] | str | None = None,
    shape: dict[str, int] | None = None,
    check_names: Iterable[str] | str | None = None,
    check_grad: bool = True,
    seeds: list[int] | None = None,
    distributions: Iterable[str] | str | None = None,
    shard_spec: str | None = None,
    isolate: bool | None = None,
    timeout_s: float | None = None,
    include_bench_only: bool = False,
    attributes: dict[str, object] | None = None,
    allow_missing: Iterable[str] | str | None = None,
    sweeps: bool = False,
    sanitize: str | None = None,
    threads: int | None = None,
) -> Plan:
    """Validate every choice before anything runs; raise :class:`UsageError` with the fix."""
    spec = catalog.op(op)
    wanted = _split(candidate_names)
    for name in wanted:
        if name not in spec.candidates:
            raise UsageError(
                f"unknown candidate {name!r} for op {op}; valid: {', '.join(spec.candidates)}"
            )
    dts = []
    for d in _split(dtype_names) or list(spec.grid.dtypes):
        short = dtypes.canonical(d)
        if short is None:
            raise UsageError(f"unknown dtype {d!r}; valid: fp32, bf16, fp16")
        dts.append(short)
    checks = _split(check_names) or [n for n in CHECKS if spec.check_enabled(n)]
    for c in checks:
        if c not in CHECKS:
            raise UsageError(f"unknown check {c!r}; valid: {', '.join(CHECKS)}")
    dists = _split(distributions) or list(spec.grid.distributions)
    for d in dists:
        if not is_distribution(d):
            raise UsageError(
                f"unknown distribution {d!r}; valid: {', '.join(DISTRIBUTIONS)} "
                "(or several joined with '+')"
            )
    if shape:
        shapes = [resolve_shape(shape, spec.dims, _shape_error)]
    else:
        shapes = list(spec.grid.shapes)
    seed_list = list(seeds) if seeds else list(spec.grid.seeds)
    shard_kn = None
    if shard_spec:
        try:
            shard_kn = parse_shard(shard_spec)
        except ValueError as exc:
            raise UsageError(f"--shard: {exc}") from None

    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"--timeout: expected a number of seconds > 0, got {timeout_s}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads: expected a count >= 1, got {threads}")
    _resolve_gold(spec)
    dev = resolve_device(device)
    shapes = _sanitized_shapes(sanitize, dev, isolate, shapes, given=bool(shape))
    probed = _probe_candidates(spec, dev, device, wanted, include_bench_only, allow_missing)
    spec, runnable = with_siblings(spec, catalog.ops, probed.runnable), probed.runnable
    cases = _cases(
        spec, dev, dts, shapes, seed_list, dists, checks, runnable, attributes or {}, sweeps
    )
    digest = plan_digest(cases, check_grad)  # before sharding: the same in every shard
    if shard_kn:
        cases = shard(cases, *shard_kn)
    cases = with_threads(spec, cases, isolate, threads)
    options = RunOptions(check_grad=check_grad, user_specs=catalog.user_specs, sanitize=sanitize)
    blocked = _first_cases(
        _cases(
            spec,
            dev,
            dts,
            shapes,
            seed_list,
            dists,
            checks,
            probed.missing,
            attributes or {},
            sweeps,
        )
    )
    return Plan(
        spec, dev, cases, options, probed.unavailable, shard_kn, isolate, timeout_s, digest,
        missing={n: probed.unavailable[n] for n in probed.missing},
        missing_cases=shard(blocked, *shard_kn) if shard_kn else blocked,
        not_planned=_not_planned(spec, dts, checks, runnable, sweeps and not attributes, shapes),
    )  # fmt: skip


def _sanitized_shapes(
    tool: str | None, dev: str, isolate: bool | None, shapes: list[dict], given: bool
) -> list[dict]:
    """``--sanitize``: checked (a usage error when it cannot run here), and the grid cut
    to its smallest shape unless one was given (the sanitizer is slow)."""
    if tool is None:
        return shapes
    import torch

    why = sanitize.problem(tool, dev, isolate, torch.cuda.is_available())
    if why:
        raise UsageError(why)
    return shapes if given else [min(shapes, key=lambda s: math.prod(s.values()))]


@dataclass
class _Probed:
    """The candidates of a run: those that run, those that cannot (name: why), and of
    those the native ones missing on their own device (errors, unless allowed)."""

    runnable: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def _probe_candidates(
    spec: OpSpec,
    dev: str,
    device: str,
    wanted: list[str],
    include_bench_only: bool,
    allow_missing: Iterable[str] | str | None,
) -> _Probed:
    """Probe each candidate on ``dev``; raise :class:`UsageError` for a named one that
    cannot run or any one that cannot load."""
    allowed = _split(allow_missing)
    for name in allowed:
        if name not in spec.candidates:
            raise UsageError(
                f"--allow-missing: unknown candidate {name!r} for op {spec.name}; "
                f"valid: {', '.join(spec.candidates)}"
            )
    out = _Probed()
    for name, cand in spec.candidates.items():
        if wanted and name not in wanted:
            continue
        if cand.bench_only and not wanted and not include_bench_only:
            continue  # a bench baseline is not under test unless named
        reason = candidates.probe(cand, dev)
        if reason is None:
            # one rule, named or not: a candidate about to run that cannot be loaded stops
            # the run before it starts (exit 2), so a broken kernel module fails the gate
            # loudly instead of as a pile of per-check errors
            try:
                with poisoned_allocations():  # its import's allocations read NaN, as in a case
                    candidates.load(cand)
            except ImportPathError as exc:
                raise UsageError(
                    f"{cand.source}: candidate.{name}.callable: cannot load: {exc}"
                ) from None
            out.runnable.append(name)
        elif wanted and device == "auto" and dev not in cand.devices:
            why = "; ".join(f"{d}: {devices.status(d).reason}" for d in cand.devices if d != dev)
            raise UsageError(
                f"candidate {name} needs device {' or '.join(cand.devices)}, but --device auto "
                f"picked {dev}" + (f" ({why})" if why else "")
            )
        elif wanted:
            raise UsageError(f"candidate {name} cannot run on {dev}: {reason}")
        else:
            if device == "auto" and dev not in cand.devices:  # say who picked the device
                reason = reason.replace(f"(asked for {dev})", f"(--device auto picked {dev})")
            out.unavailable[name] = reason
            # on its own device a native kernel's missing library is a broken build
            if cand.native and dev in cand.devices and name not in allowed:
                out.missing.append(name)
    return out


def _first_cases(cases: list[Case]) -> list[Case]:
    """The first case of each candidate: where a missing one reports its errors."""
    first: dict[str, Case] = {}
    for case in cases:
        first.setdefault(case.candidate, case)
    return list(first.values())


def _not_planned(spec: OpSpec, dts, checks, runnable, sweeps: bool, shapes) -> dict[str, str]:
    """What the plan leaves out (``what: why``), for the summary's list of what was not
    checked."""
    return {
        **_dtype_gaps(spec, dts),
        **_in_range_gaps(spec, runnable),
        **_sweep_gaps(spec, dts, checks, sweeps, shapes),
        **_far_rows_gap(spec, dts, checks),
        **_huge_rows_gap(spec, dts, checks, sweeps),
    }


def _dtype_gaps(spec: OpSpec, dts: list[str]) -> dict[str, str]:
    """The op's grid dtypes this run left out (``--dtype``)."""
    left = [d for d in spec.grid.dtypes if (dtypes.canonical(d) or d) not in dts]
    if not left:
        return {}
    what = f"dtype{'s' if len(left) > 1 else ''} {', '.join(left)}"
    return {what: f"not in the plan (--dtype {','.join(dts)})"}


def _in_range_gaps(spec: OpSpec, names: Iterable[str]) -> dict[str, str]:
    """What each candidate's narrower input contract (``in_range``) leaves unchecked."""
    gaps = {}
    for name in names:
        for inp in spec.candidates[name].in_range:
            what = f"out-of-range {inp} ({', '.join(spec.out_of_range_uses(inp))}) for {name}"
            gaps[what] = f'candidate {name} declares in_range = ["{inp}"]: it is never passed one'
    return gaps


@dataclass(frozen=True)
class AttributeSet:
    """One combination of attribute values a run checks: ``attrs`` every attribute's value,
    ``shown`` the names its case ids show, ``sweep`` whether it is an attribute sweep's
    (one attribute off its default), which runs on the cheap shapes only."""

    attrs: tuple[tuple[str, object], ...]
    shown: tuple[str, ...]
    sweep: bool = False


def swept_at_first_dtype(checks: Iterable[str]) -> list[str]:
    """The ``checks`` an attribute sweep runs at the grid's first dtype only
    (``Check.sweep_first_dtype_only``)."""
    return [n for n in checks if CHECKS[n].sweep_first_dtype_only]


def _far_rows_gap(spec: OpSpec, dts: list[str], checks) -> dict[str, str]:
    """``shape_sweep``'s far-rows lead, where the op's outputs cannot be judged row by row
    (:func:`far_rows_unjudged`), and its WIDE_BLOCK_ROWS rows at the dtypes other than the
    grid's narrowest, for the summary's list of what was not checked."""
    if "shape_sweep" not in checks:
        return {}
    why = far_rows_unjudged(spec)
    if why:
        return {f"shape_sweep's {LONG_ROWS}-row lead at its widest row": why}
    if not swept_dims(spec):
        return {}
    at, others = _narrowest_and_others(spec, dts)
    if not others:
        return {}
    what = f"shape_sweep's {WIDE_BLOCK_ROWS}-row lead (65,535 blocks of two rows) at "
    return {what + ", ".join(others): f"judged at {at} alone (twice the {LONG_ROWS}-row lead)"}


def _narrowest_and_others(spec: OpSpec, dts: list[str]) -> tuple[str, list[str]]:
    """The grid's narrowest dtype (where the largest leads run) and the planned others."""
    narrowest = narrowest_dtype(spec)
    at = dtypes.canonical(narrowest) or narrowest
    return at, [d for d in dts if d != at]


def _huge_rows_gap(spec: OpSpec, dts: list[str], checks, sweeps: bool) -> dict[str, str]:
    """``shape_sweep``'s huge leads (past 2^31 elements; the short-row one), judged at the
    grid's narrowest dtype and attributes alone, where the op has one
    (:func:`huge_rows_shape`), for the summary's list of what was not checked."""
    if "shape_sweep" not in checks:
        return {}
    what = (
        "shape_sweep's rows past 2^31 elements (and past 65,535 blocks of 16,384 elements, "
        "and 2^21 rows of 128)"
    )
    shape = huge_rows_shape(spec)
    why = far_rows_unjudged(spec) or (None if shape else "no row-wise float input is wide enough")
    if why:
        return {what: why}
    at, others = _narrowest_and_others(spec, dts)
    gaps = {f"{what} (2^32 and past)": "judged past 2^31 elements only (a signed 32-bit offset)"}
    if sweeps and spec.attribute_sweeps:
        gaps[f"{what} at the attribute sweeps' values"] = "judged at the grid's attributes"
    if at not in dts:
        gaps[what] = f"judged at {at} alone (the grid's narrowest dtype), not in the plan"
    elif others:
        gaps[f"{what} at {', '.join(others)}"] = (
            f"judged once per candidate at {at}, the grid's narrowest dtype: 4 GiB, 2 GiB and "
            "512 MiB of input"
        )
    return gaps


def _sweep_gaps(spec: OpSpec, dts, checks, sweeps: bool, shapes: list) -> dict[str, str]:
    """What the attribute sweeps leave to the first dtype (:func:`swept_at_first_dtype`),
    to the first shape and to the defaults (``shape_sweep``'s residues and batches), for
    the summary's list of what was not checked."""
    left = swept_at_first_dtype(checks)
    sweep = "shape_sweep" in checks
    if not (sweeps and spec.attribute_sweeps and (left or sweep)):
        return {}
    defaults = {n: v[0] for n, v in spec.attributes.items()}
    values = ", ".join(  # each sweep set by its values off the defaults, as it was planned
        " with ".join(f"{n}={fmt_attr(v)}" for n, v in a.attrs if v != defaults[n])
        for a in attribute_sets(spec, {})
        if a.sweep
    )
    gaps = {}
    if len(dts) > 1 and left:
        gaps[f"{', '.join(left)} at {values} for {', '.join(dts[1:])}"] = (
            f"attribute sweeps judge bitwise invariance at {dts[0]}; every dtype at the defaults"
        )
    if sweep:
        what = f"shape_sweep's residues mod 64, wide batches and {LONG_ROWS}-row leads at {values}"
        gaps[what] = (
            "attribute sweeps take the size edges (1-16, 2^k-1/2^k/2^k+1, vocabularies) and,"
            f" at {narrowest_dtype(spec)}, each dim's widest size at 2^28 elements"
        )
    if sweep and len(dts) > 1:
        others = ", ".join(dts[1:])
        what = f"shape_sweep's size edges within the sweeps' shapes at {values} for {others}"
        gaps[what] = "the sweeps' own shapes judge those widths there; the wider edges are swept"
    for k in sweep_shapes(spec, shapes)[1:] if left else []:
        size = "x".join(str(v) for v in shapes[k].values())
        gaps[f"{', '.join(left)} at {values} at {size}"] = (
            "the sweeps' long-row shape judges an attribute across tiles (accuracy, precision, "
            "contract); its invariance in every layout at the first shape, and in every grid "
            "case 48 rows alone against one batch of 97 at each value"
        )
    return gaps


def _cases(spec, dev, dts, shapes, seeds, dists, checks, runnable, overrides, sweeps) -> list[Case]:
    """The plan's cases: every (shape, dtype, attribute set, candidate), the candidates of
    one (dtype, shape, attributes) one after another (they share trials). The attribute
    sweeps run on the shapes :func:`sweep_shapes` picks (every check on the first, all
    but invariance on the long-row one: the attribute's numerics across tiles; a fraction
    of the time of the whole grid); ``shape_sweep`` once per (candidate, dtype), in the
    first shape's case at the defaults. Without ``sweeps`` (the API default; the CLI and the
    pytest plugin sweep, as the default run does) the attribute sweeps are left out."""
    sets = [a for a in attribute_sets(spec, overrides) if sweeps or not a.sweep]
    swept = tuple(spec.attribute_sweeps) if not overrides else ()
    at = sweep_shapes(spec, shapes)
    cases = []
    # shape-major: a candidate's cases of one shape follow each other, so its worker forks
    # a fresh case process per shape, not per (dtype, shape) (runner/execute.py)
    for (k, s), d in itertools.product(enumerate(shapes), dts):
        for a, c in itertools.product([a for a in sets if k in at or not a.sweep], runnable):
            own = tuple(n for n in checks if n != "shape_sweep" or k == 0)
            if a.sweep and (d != dts[0] or k != 0):  # invariance: first dtype, first shape
                own = tuple(n for n in own if n not in swept_at_first_dtype(own))
            if not own:
                continue
            cases.append(
                Case(spec.name, c, dev, d, tuple(s.items()), tuple(seeds), tuple(dists), own)
            )
            cases[-1] = replace(cases[-1], attrs=a.attrs, shown=a.shown, pinned=swept)
    return share_invariance_pools(spec, cases)


def attribute_sets(spec: OpSpec, overrides: dict[str, object]) -> list[AttributeSet]:
    """Every combination of the op's grid attribute values (``--attr`` pins one); then,
    unless an ``--attr`` pins anything, each sweep value of each attribute, the others
    at their defaults, and each pair of swept attributes at their first sweep values at
    once (a kernel whose masked path forgets the temperature is right with either alone).
    Case ids show the grid axes, the pinned and the swept names."""
    for name, value in overrides.items():
        if name not in spec.attributes:
            valid = ", ".join(spec.attributes) or "none"
            raise UsageError(
                f"--attr: unknown attribute {name!r} for op {spec.name}; valid: {valid}"
            )
        if name in spec.switches and not isinstance(value, bool):
            raise UsageError(f"--attr: {name} switches an input on or off: true or false")
        default = spec.attributes[name][0]
        if not _same_kind(value, default):
            kind = "finite float" if type(default) is float else type(default).__name__
            raise UsageError(f"--attr: {name}={value!r}: expected a {kind} like {default!r}")
    values = {
        n: ([overrides[n]] if n in overrides else list(v)) for n, v in spec.attributes.items()
    }
    shown = tuple(n for n, v in spec.attributes.items() if len(v) > 1 or n in overrides)
    sets = [
        AttributeSet(tuple(zip(values, combo)), shown)
        for combo in itertools.product(*values.values())
    ]
    if overrides:
        return sets
    defaults = {n: v[0] for n, v in spec.attributes.items()}
    for name, extra in spec.attribute_sweeps.items():
        for value in extra:
            attrs = tuple({**defaults, name: value}.items())
            sets.append(AttributeSet(attrs, tuple(dict.fromkeys((*shown, name))), sweep=True))
    firsts = [(n, v[0]) for n, v in spec.attribute_sweeps.items() if v]
    for (a, va), (b, vb) in itertools.combinations(firsts, 2):
        attrs = tuple({**defaults, a: va, b: vb}.items())
        sets.append(AttributeSet(attrs, tuple(dict.fromkeys((*shown, a, b))), sweep=True))
    return sets


def _same_kind(value: object, default: object) -> bool:
    """An ``--attr`` value fits the attribute: a float takes ints too (a finite number: a
    NaN temperature makes every case an error, not a finding), a bool only bools."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, type(default))


def _resolve_gold(spec: OpSpec) -> None:
    """The gold and the reference are the op's, not a candidate's: resolve them up front."""
    for key, path in (
        ("gold", spec.gold),
        ("reference", spec.reference),
        ("gold_backward", spec.gold_backward),
        ("gradient_scale", spec.gradient_scale),
    ):
        if path is None:
            continue
        try:
            fn = resolve(path, spec.base_dir)
        except ImportPathError as exc:
            raise SpecError(spec.source, key, str(exc)) from None
        if not callable(fn):
            raise SpecError(spec.source, key, f"{path} is not callable")


def _shape_error(key: str, msg: str) -> UsageError:
    """Name the flag the user typed: --batch/--seq/--vocab have their own, any other dim
    (a misspelled one included) can only have come from --shape."""
    if key in ("batch", "seq", "vocab"):
        return UsageError(f"--{key}: {msg}")
    if not key or key in msg:
        return UsageError(f"--shape: {msg}")
    return UsageError(f"--shape: {key}: {msg}")


def execute(
    plan: Plan,
    on_result: Callable[[CheckResult, Report], None] | None = None,
    on_case: Callable[[Case, int, int], None] | None = None,
    on_case_done: Callable[[Case, list[CheckResult], int, int], None] | None = None,
    on_case_end: Callable[[Case, int, int], None] | None = None,
) -> Report:
    """Run the plan; ``on_result`` sees each result as it completes (streaming reports),
    ``on_case``/``on_case_done`` each case as it starts and as it is given out with its
    results (progress). Cases side by side are given out in plan order: ``on_case_end``
    hears each as it really ends, so ``on_case`` to ``on_case_end`` is its own time."""
    import time

    report = Report(plan.op.name, plan.op.version, plan.device, environment=environment())
    report.unavailable = {k: v for k, v in plan.unavailable.items() if k not in plan.missing}
    report.not_planned = dict(plan.not_planned)
    report.extra["spec_digest"] = op_spec_digest(plan.op)
    if plan.plan_digest:
        report.extra["plan_digest"] = plan.plan_digest
    if plan.shard:
        report.extra["shard"] = f"{plan.shard[0]}/{plan.shard[1]}"
    report.not_run = [c.id for c in plan.cases]
    for res in _missing_results(plan):  # before the schedule: every report format shows them
        report.results.append(res)
        if on_result:
            on_result(res, report)
    executor = Executor(plan.isolate, plan.timeout_s)
    folder = run_folder.make_run_folder() if shared_groups(plan.cases) else None
    budget = run_folder.budget_for(folder) if folder is not None else 0
    jobs = concurrency(plan.op, plan.cases, plan.isolate)
    schedule = Schedule(executor, plan.op, plan.cases, plan.options, folder, budget, jobs)
    if on_case:
        schedule.on_start = lambda i: on_case(plan.cases[i], i, len(plan.cases))
    if on_case_end:
        schedule.on_end = lambda i: on_case_end(plan.cases[i], i, len(plan.cases))
    mine: list[CheckResult] = []

    def take(res: CheckResult) -> None:
        report.results.append(res)
        mine.append(res)
        if on_result:
            on_result(res, report)

    try:
        for i, case, res in schedule.run():
            if res is not None:
                take(res)
                continue
            report.not_run.remove(case.id)
            if on_case_done:
                on_case_done(case, mine, i, len(plan.cases))
            mine = []
    except Interrupted as exc:
        report.interrupted = exc.signame
        executor.kill()  # first: the cases side by side stop where they are
        schedule.stop(wait_s=2.0)
        for case, results, finished in schedule.held():  # obtained beside a running case
            mine = []
            for res in results:
                take(res)
            if finished:
                report.not_run.remove(case.id)
    finally:
        schedule.stop()
        executor.close()
        run_folder.remove(folder)
        report.finished = time.time()
        report.extra["phase_seconds"] = {k: round(v, 3) for k, v in executor.phase_seconds.items()}
    return report


def _missing_results(plan: Plan) -> list[CheckResult]:
    """An ``error`` per check a missing native candidate's first case would have run,
    with the probe's reason: the kernel under test did not run, which is no pass."""
    return [
        make_result(case, check, Outcome("error", plan.missing[case.candidate]), plan.options)
        for case in plan.missing_cases
        for check in case.checks
    ]


def run(catalog: Catalog, op: str, **kwargs) -> Report:
    """Plan and execute in one call (what the tests and the pytest plugin use)."""
    return execute(plan(catalog, op, **kwargs))


def describe(catalog: Catalog) -> dict:
    """Ops, candidates (can each run here, and if not, why), checks and the devices (each
    unavailable one's reason, which its candidates' ``runs_here`` repeat)."""
    out = {
        "devices": {
            name: {"available": st.available, "reason": st.reason}
            for name, st in devices.all_status().items()
        },
        "ops": {},
        "checks": {n: c.summary for n, c in CHECKS.items()},
        "distributions": DISTRIBUTIONS,
    }
    for name, op in catalog.ops.items():
        cands = {}
        for cname, cand in op.candidates.items():
            load_error = None
            try:
                with poisoned_allocations():  # its import's allocations read NaN, as in a case
                    candidates.load(cand)
            except ImportPathError as exc:
                load_error = str(exc)
            cands[cname] = {
                "callable": cand.callable,
                "importable": "yes" if load_error is None else f"broken: {load_error}",
                "devices": list(cand.devices),
                "bench_only": cand.bench_only,
                "source": str(cand.source),
                "runs_here": {
                    d: (f"cannot load: {load_error}" if load_error else None)
                    or candidates.probe(cand, d)
                    or "yes"
                    for d in cand.devices
                },
            }
        out["ops"][name] = {
            "description": op.description,
            "source": str(op.source),
            "dtypes": list(op.grid.dtypes),
            "shapes": [dict(s) for s in op.grid.shapes],
            "candidates": cands,
        }
    return out


def _with_cpu_isa(status: dict) -> dict:
    """The cpu library's status plus which build runs (portable, avx2 or avx512) and why not
    a faster one, when it can run, and why the candidate cannot (a bad ``KERNELCHECK_CPU_ISA``)."""
    if status["status"] != "available":
        return status
    from kernelcheck.candidates.native import cpu

    info = {**status, "isa": cpu.isa(), "isa_note": cpu.isa_note()}
    problem = cpu.probe("cpu")
    if problem:  # the reason says it all
        info.update(reason=problem, isa_note=None)
    return info


def doctor() -> dict:
    """torch, the devices with reasons, native libraries, the NPU stack."""
    import torch

    from kernelcheck.candidates import ascend
    from kernelcheck.candidates.native.library import library_status
    from kernelcheck.checks import fastpath
    from kernelcheck.runner.keeper import keeper_status

    devs = {}
    for name, st in devices.all_status().items():
        devs[name] = {"available": st.available, "reason": st.reason, **st.detail}
    home, has_cann = devices.cann_home()
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "devices": devs,
        "native_libraries": {
            "cpu": _with_cpu_isa(library_status("cpu")),
            "cuda": library_status("cuda"),
            "ascend": ascend.library_status(),
        },
        "verifier_libraries": {  # kernelcheck's own native helpers (never judged)
            "metrics": fastpath.status(),
            "keep_large": keeper_status(),
        },
        "npu_stack": {
            "torch_npu": devices.import_torch_npu() or "importable",
            "cann_home": str(home),
            "cann_found": has_cann,
        },
    }


__all__ = ["Plan", "describe", "doctor", "execute", "load_catalog", "plan", "run"]
