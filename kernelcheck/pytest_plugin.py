"""pytest plugin: one test item per case x check of a kernelcheck plan.

Registered through the ``pytest11`` entry point, so it is loaded by every pytest run but
does nothing unless ``--kernelcheck-spec`` is given::

    pytest --kernelcheck-spec specs/logp.toml --kernelcheck-device cpu -k forward_accuracy -n auto

``--kernelcheck-only`` drops every other collected test (inside a repository that has
its own tests).

Items are named ``f"{op}[{case.id}-{check}]"`` (``logp[torch-bf16-2x16x257-forward_invariance]``)
under a ``kernelcheck`` collector, so ``-k``, ``-x``, ``--junitxml`` and pytest-xdist work
as for any test. A failing item shows the CLI's one-line reason and its ``repro:``
command, not a traceback. The plan is built in ``pytest_configure`` (a bad option is a
``pytest.UsageError`` before anything runs) and is deterministic, so every xdist worker
collects the same items in the same order.

The checks of one case share one run, as in the CLI: the first item of a case to run
runs the case once for every selected item's check (one gold and one set of candidate
calls per trial), and the other items read their results (:class:`CaseResults`). Under
xdist each worker that gets items of a case runs it once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernelcheck.errors import UsageError

_PLUGIN_NAME = "kernelcheck-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelcheck", "kernelcheck: verify compute kernels")
    group.addoption(
        "--kernelcheck-spec",
        action="append",
        default=[],
        metavar="FILE",
        help="kernelcheck spec file (repeatable): an op, or candidates added to one. "
        "Without it the plugin does nothing.",
    )
    group.addoption(
        "--kernelcheck-only",
        action="store_true",
        default=False,
        help="Run only kernelcheck's items, none of the tests collected from files "
        "(inside a repository with its own tests).",
    )
    group.addoption(
        "--kernelcheck-op",
        action="append",
        default=[],
        metavar="NAME",
        help="Op to check (repeatable); default: the ops the spec files declare or extend.",
    )
    group.addoption(
        "--kernelcheck-device",
        default="auto",
        metavar="DEVICE",
        help="auto (cuda, then npu, then cpu), cpu, cuda or npu.",
    )
    group.addoption(
        "--kernelcheck-candidate",
        action="append",
        default=[],
        metavar="NAME",
        help="Candidate (repeatable or comma-separated); default: all that run here.",
    )
    group.addoption("--kernelcheck-dtype", default=None, metavar="DTYPES", help="e.g. fp32,bf16.")
    group.addoption(
        "--kernelcheck-shape",
        default=None,
        metavar="DIM=N,...",
        help="One shape instead of the spec's grid, e.g. batch=2,seq=16,vocab=257.",
    )
    group.addoption(
        "--kernelcheck-checks", default=None, metavar="NAMES", help="Comma-separated checks."
    )
    group.addoption(
        "--kernelcheck-seed",
        type=int,
        default=None,
        metavar="N",
        help="One seed instead of the spec's.",
    )
    group.addoption(
        "--kernelcheck-isolate",
        action="store_true",
        default=None,
        help="Run every candidate in a child process (default: native candidates only).",
    )
    group.addoption(
        "--kernelcheck-timeout",
        type=float,
        default=None,
        metavar="S",
        help="Per-case timeout in seconds (default: the spec's).",
    )
    group.addoption(
        "--kernelcheck-distributions",
        default=None,
        metavar="NAMES",
        help="Comma-separated input distributions.",
    )


def parse_shape(text: str | None) -> dict[str, int] | None:
    from kernelcheck.cases.grid import parse_sizes

    if not text:
        return None
    try:
        return parse_sizes(text, "--kernelcheck-shape")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def spec_ops(paths: list[Path]) -> list[str]:
    """The ops the spec files declare or add candidates to, in file order."""
    from kernelcheck.spec.load import read_toml

    ops: list[str] = []
    for path in paths:
        name = read_toml(path).get("op")
        if isinstance(name, str) and name not in ops:
            ops.append(name)
    return ops


def build_plans(config: pytest.Config) -> list:
    """One :class:`kernelcheck.api.Plan` per op; :class:`UsageError` for a bad option."""
    from kernelcheck import api
    from kernelcheck.spec import load_catalog
    from kernelcheck.spec.load import builtin_spec_dir

    paths = [Path(p) for p in config.getoption("kernelcheck_spec")]
    for path in paths:
        if not path.is_file():
            raise UsageError(f"--kernelcheck-spec: {path}: spec file not found")
    # a built-in spec (specs/logp.toml) is already in the catalog: name it, do not load it twice
    builtin = {p.resolve() for p in builtin_spec_dir().glob("*.toml")}
    catalog = load_catalog([p for p in paths if p.resolve() not in builtin])
    ops = config.getoption("kernelcheck_op") or spec_ops(paths)
    if not ops:
        raise UsageError("--kernelcheck-spec: the spec files name no op")
    seed = config.getoption("kernelcheck_seed")
    common = {
        "candidate_names": config.getoption("kernelcheck_candidate") or None,
        "device": config.getoption("kernelcheck_device"),
        "dtype_names": config.getoption("kernelcheck_dtype"),
        "shape": parse_shape(config.getoption("kernelcheck_shape")),
        "check_names": config.getoption("kernelcheck_checks"),
        "seeds": [seed] if seed is not None else None,
        "distributions": config.getoption("kernelcheck_distributions"),
        "isolate": config.getoption("kernelcheck_isolate"),
        "timeout_s": config.getoption("kernelcheck_timeout"),
        "sweeps": True,  # the default run's coverage, as the CLI's
    }
    plans = []
    for op in ops:
        plan = api.plan(catalog, op, **common)
        if not plan.cases:
            why = "; ".join(f"{k}: {v}" for k, v in plan.unavailable.items())
            raise UsageError(f"no candidate of {op} can run on {plan.device} ({why})")
        plans.append(plan)
    return plans


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("kernelcheck_spec", default=None):
        return
    try:
        plans = build_plans(config)
    except UsageError as exc:
        raise pytest.UsageError(f"kernelcheck: {exc}") from None
    config.pluginmanager.register(KernelcheckSession(plans), _PLUGIN_NAME)


class KernelcheckSession:
    """Registered only when ``--kernelcheck-spec`` is given: adds the planned items."""

    def __init__(self, plans: list):
        self.plans = plans
        # one executor per op (its isolation and timeout, its workers), shared by the items
        self.executors: dict = {}
        self.case_results = CaseResults()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for executor in self.executors.values():
            executor.close()

    @pytest.hookimpl(tryfirst=True)  # before -k / -m deselection and xdist's ordering
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list
    ) -> None:
        collector = KernelcheckCollector.from_parent(
            session,
            name="kernelcheck",
            nodeid="kernelcheck",
            plans=self.plans,
            executors=self.executors,
            case_results=self.case_results,
        )
        if config.getoption("kernelcheck_only") and items:
            # the repository's own tests are deselected, as -k would, and said so
            config.hook.pytest_deselected(items=list(items))
            items.clear()
        # genitems reports the collection (collected N items, --collect-only) like any file's
        items.extend(session.genitems(collector))

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = []
        for plan in self.plans:
            n = sum(len(c.checks) for c in plan.cases)
            lines.append(
                f"kernelcheck: op {plan.op.name} v{plan.op.version} on {plan.device}: "
                f"{len(plan.cases)} case(s), {n} item(s)"
            )
            lines.extend(
                f"kernelcheck: candidate {k} unavailable: {v}" for k, v in plan.unavailable.items()
            )
        return lines


class KernelcheckCollector(pytest.Collector):
    """The session-level parent of every item: node ids read ``kernelcheck::logp[...]``."""

    def __init__(
        self,
        *,
        plans: list,
        executors: dict | None = None,
        case_results: CaseResults | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.plans = plans
        self.executors = executors if executors is not None else {}
        self.case_results = case_results if case_results is not None else CaseResults()

    def collect(self):
        from kernelcheck.runner.execute import Executor

        for plan in self.plans:
            executor = self.executors.setdefault(
                plan.op.name, Executor(plan.isolate, plan.timeout_s)
            )
            for case in plan.cases:
                for check in case.checks:
                    yield KernelcheckItem.from_parent(
                        self,
                        name=f"{plan.op.name}[{case.id}-{check}]",
                        plan=plan,
                        case=case,
                        check=check,
                        executor=executor,
                        case_results=self.case_results,
                    )


class CaseResults:
    """Each case's results, by check: run once, on the first of its items to run.

    The case runs with the checks of every item of it still selected in this session
    (``-k`` and ``-m`` leave the others out), in the case's order; each item takes its own
    result. A run that raises caches nothing: the next item of the case runs it again.
    """

    def __init__(self):
        self._results: dict[tuple[str, str], dict] = {}

    def take(self, item: KernelcheckItem):
        """``item``'s result (None: the case's run gave none for its check)."""
        key = (item.plan.op.name, item.case.id)
        if key not in self._results:
            selected = {
                other.check
                for other in item.session.items
                if isinstance(other, KernelcheckItem)
                and other.plan is item.plan
                and other.case.id == item.case.id
            } | {item.check}
            checks = tuple(c for c in item.case.checks if c in selected)
            case = dataclasses.replace(item.case, checks=checks)
            # the run's executor: in process or isolated, with the per-case timeout, as the CLI
            results = item.executor.run(item.plan.op, case, item.plan.options)
            self._results[key] = {r.check: r for r in results}
        found = self._results[key]
        result = found.pop(item.check, None)
        if not found:  # every item of the case has its result: let go of the case
            del self._results[key]
        return result


class KernelcheckFailure(Exception):
    """A failing result; shown as the CLI's one line plus its repro command."""

    def __init__(self, result):
        self.result = result
        super().__init__(format_failure(result))


def format_failure(result) -> str:
    return (
        f"{result.status.upper()} {result.case_id} {result.check}: {result.message}\n"
        f"  repro: {result.repro}"
    )


class KernelcheckItem(pytest.Item):
    def __init__(self, *, plan, case, check, executor, case_results=None, **kwargs):
        super().__init__(**kwargs)
        self.plan = plan
        self.case = case  # the whole case: the checks of all its items
        self.check = check
        self.executor = executor
        self.case_results = case_results if case_results is not None else CaseResults()
        self.result = None

    def runtest(self) -> None:
        self.result = self.case_results.take(self)
        if self.result is None:
            raise RuntimeError(f"kernelcheck: check {self.check} returned no result")
        self.user_properties.append(("kernelcheck_status", self.result.status))
        self.user_properties.append(("kernelcheck_repro", self.result.repro))
        if self.result.status == "skip":
            pytest.skip(self.result.message)
        if self.result.status != "pass":
            raise KernelcheckFailure(self.result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, KernelcheckFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.plan.op.source, None, self.name


__all__ = ["KernelcheckCollector", "KernelcheckItem", "format_failure"]
