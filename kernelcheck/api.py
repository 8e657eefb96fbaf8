"""The library API: plan a run, execute it, list what exists, diagnose the machine.

The CLI, the tests and the pytest plugin all call these functions; nothing here prints.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kernelcheck import candidates, dtypes
from kernelcheck.candidates import devices
from kernelcheck.cases import shared
from kernelcheck.cases.grid import Case, parse_shard, shard
from kernelcheck.cases.inputs import DISTRIBUTIONS, is_distribution
from kernelcheck.checks import CHECKS
from kernelcheck.compare import op_spec_digest, plan_digest
from kernelcheck.errors import Interrupted, SpecError, UsageError
from kernelcheck.results import CheckResult, Report, environment
from kernelcheck.runner.case import RunOptions
from kernelcheck.runner.execute import Executor
from kernelcheck.runner.schedule import Schedule, concurrency, shared_groups
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
    checks = _split(check_names) or [
        n for n in CHECKS if spec.checks.get(n) is None or spec.checks[n].enabled
    ]
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
    _resolve_gold(spec)
    dev = resolve_device(device)
    unavailable: dict[str, str] = {}
    runnable = []
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
                candidates.load(cand)
            except ImportPathError as exc:
                raise UsageError(
                    f"{cand.source}: candidate.{name}.callable: cannot load: {exc}"
                ) from None
            runnable.append(name)
        elif wanted and device == "auto" and dev not in cand.devices:
            missing = "; ".join(
                f"{d}: {devices.status(d).reason}" for d in cand.devices if d != dev
            )
            raise UsageError(
                f"candidate {name} needs device {' or '.join(cand.devices)}, but --device auto "
                f"picked {dev}" + (f" ({missing})" if missing else "")
            )
        elif wanted:
            raise UsageError(f"candidate {name} cannot run on {dev}: {reason}")
        else:
            if device == "auto" and dev not in cand.devices:  # say who picked the device
                reason = reason.replace(f"(asked for {dev})", f"(--device auto picked {dev})")
            unavailable[name] = reason
    axes, shown = attribute_axes(spec, attributes or {})
    # the candidates of one (dtype, shape, attributes) one after another: they share trials
    cases = [
        Case(
            spec.name,
            c,
            dev,
            d,
            tuple(s.items()),
            tuple(seed_list),
            tuple(dists),
            tuple(checks),
            attrs=a,
            shown=shown,
        )
        for d, s, a, c in itertools.product(dts, shapes, axes, runnable)
    ]
    digest = plan_digest(cases, check_grad)  # before sharding: the same in every shard
    if shard_kn:
        cases = shard(cases, *shard_kn)
    options = RunOptions(check_grad=check_grad, user_specs=catalog.user_specs)
    return Plan(spec, dev, cases, options, unavailable, shard_kn, isolate, timeout_s, digest)


def attribute_axes(
    spec: OpSpec, overrides: dict[str, object]
) -> tuple[list[tuple[tuple[str, object], ...]], tuple[str, ...]]:
    """Every combination of the op's attribute values (``--attr`` pins one), and the
    names a case id shows: the grid axes' and the pinned ones."""
    for name in overrides:
        if name not in spec.attributes:
            valid = ", ".join(spec.attributes) or "none"
            raise UsageError(
                f"--attr: unknown attribute {name!r} for op {spec.name}; valid: {valid}"
            )
        if name in spec.switches and not isinstance(overrides[name], bool):
            raise UsageError(f"--attr: {name} switches an input on or off: true or false")
    values = {
        n: ([overrides[n]] if n in overrides else list(v)) for n, v in spec.attributes.items()
    }
    shown = tuple(n for n, v in spec.attributes.items() if len(v) > 1 or n in overrides)
    combos = [tuple(zip(values, combo)) for combo in itertools.product(*values.values())]
    return combos, shown


def _resolve_gold(spec: OpSpec) -> None:
    """The gold and the reference are the op's, not a candidate's: resolve them up front."""
    for key, path in (
        ("gold", spec.gold),
        ("reference", spec.reference),
        ("gold_backward", spec.gold_backward),
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
) -> Report:
    """Run the plan; ``on_result`` sees each result as it completes (streaming reports),
    ``on_case``/``on_case_done`` each case as it starts and ends (progress)."""
    import time

    report = Report(plan.op.name, plan.op.version, plan.device, environment=environment())
    report.unavailable = dict(plan.unavailable)
    report.extra["spec_digest"] = op_spec_digest(plan.op)
    if plan.plan_digest:
        report.extra["plan_digest"] = plan.plan_digest
    if plan.shard:
        report.extra["shard"] = f"{plan.shard[0]}/{plan.shard[1]}"
    report.not_run = [c.id for c in plan.cases]
    executor = Executor(plan.isolate, plan.timeout_s)
    folder = shared.make_run_folder() if shared_groups(plan.cases) else None
    budget = shared.budget_for(folder) if folder is not None else 0
    jobs = concurrency(plan.op, plan.cases, plan.isolate)
    schedule = Schedule(executor, plan.op, plan.cases, plan.options, folder, budget, jobs)
    if on_case:
        schedule.on_start = lambda i: on_case(plan.cases[i], i, len(plan.cases))
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
        shared.remove(folder)
        report.finished = time.time()
        report.extra["phase_seconds"] = {k: round(v, 3) for k, v in executor.phase_seconds.items()}
    return report


def run(catalog: Catalog, op: str, **kwargs) -> Report:
    """Plan and execute in one call (what the tests and the pytest plugin use)."""
    return execute(plan(catalog, op, **kwargs))


def describe(catalog: Catalog) -> dict:
    """Ops, candidates (can each run here, and if not, why) and checks."""
    out = {
        "ops": {},
        "checks": {n: c.summary for n, c in CHECKS.items()},
        "distributions": DISTRIBUTIONS,
    }
    for name, op in catalog.ops.items():
        cands = {}
        for cname, cand in op.candidates.items():
            load_error = None
            try:
                candidates.load(cand)
            except ImportPathError as exc:
                load_error = str(exc)
            cands[cname] = {
                "callable": cand.callable,
                "importable": "yes" if load_error is None else f"broken: {load_error}",
                "devices": list(cand.devices),
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
    """The cpu library's status plus which build runs (avx2 or avx512), when it can run,
    and why the candidate cannot (a bad ``KERNELCHECK_CPU_ISA``)."""
    if status["status"] != "available":
        return status
    from kernelcheck.candidates.native import cpu

    info = {**status, "isa": cpu.isa()}
    problem = cpu.probe("cpu")
    if problem:
        info["reason"] = problem
    return info


def doctor() -> dict:
    """torch, the devices with reasons, native libraries, the NPU stack."""
    import torch

    from kernelcheck.candidates import ascend
    from kernelcheck.candidates.native.library import library_status
    from kernelcheck.checks import fastpath
    from kernelcheck.runner.allocator import keeper_status

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
