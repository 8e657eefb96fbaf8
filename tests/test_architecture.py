"""The package's shape: imports follow the pipeline, no circles, short functions.

Read from the source (``ast``), so an import inside a function counts like one at the top;
one under ``if TYPE_CHECKING:`` does not (it never runs: an annotation's name only).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import kernelcheck

PACKAGE = Path(kernelcheck.__file__).parent

# The pipeline's stages, earliest first, as the code layers them. A module imports only
# from its own stage or an earlier one; a module belongs to the stage of its longest
# prefix listed here.
#
# - foundation: no stage of its own; every stage may use it (errors, dtypes, the clock,
#   memory calls, the environment, the shared exp numerics of the gold and the honest
#   candidates, the /proc/self/smaps reader).
# - spec model: what a spec says, as dataclasses.
# - cases and gold: the grid, the inputs, the trial store; the ops' float64 golds. The gold
#   never imports a candidate.
# - candidates: the kernels under test and their loaders.
# - checks: judges of one case's trials; they call the candidate, so they come after it.
# - spec loader: reading a spec file validates check names, their parameters and the
#   distributions against the registries of checks and cases, so the loader comes after
#   them (the spec's data model stays first; only the loader reads the registries).
# - results: a case's result records and the coverage they add up to.
# - runner: runs the checks of a case (isolated workers, schedule, shrink, repros): it
#   drives the checks, so it comes after them (not before, as the README's first sketch
#   of the pipeline drew it).
# - report and compare: render, merge and diff results; never run kernels.
# - api: the one entry point over all of the above.
# - bench: times candidates through the api's plan.
# - commands: the CLI's command bodies.
# - shells: the typer CLI, ``python -m kernelcheck`` and the pytest plugin.
STAGES = [
    (
        "foundation",
        [
            "kernelcheck",
            "kernelcheck.errors",
            "kernelcheck.dtypes",
            "kernelcheck.timing",
            "kernelcheck.memory",
            "kernelcheck.environment",
            "kernelcheck.flushed_exp",
            "kernelcheck.fresh_memory",
            "kernelcheck.smaps",
            "kernelcheck.native_files",
        ],
    ),
    ("spec model", ["kernelcheck.spec.model", "kernelcheck.spec.imports"]),
    ("cases and gold", ["kernelcheck.cases", "kernelcheck.ops", "kernelcheck.gold"]),
    ("candidates", ["kernelcheck.candidates"]),
    ("checks", ["kernelcheck.checks"]),
    ("spec loader", ["kernelcheck.spec", "kernelcheck.spec.load"]),
    ("results", ["kernelcheck.results", "kernelcheck.coverage"]),
    ("runner", ["kernelcheck.runner"]),
    ("report and compare", ["kernelcheck.report", "kernelcheck.compare"]),
    ("api", ["kernelcheck.api"]),
    ("bench", ["kernelcheck.bench"]),
    ("commands", ["kernelcheck.commands"]),
    ("shells", ["kernelcheck.cli", "kernelcheck.__main__", "kernelcheck.pytest_plugin"]),
]

MAX_BODY_LINES = 80
LONG_FUNCTIONS_EXEMPT: set[str] = set()  # none: typer's option declarations don't count


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.AST) -> list[str]:
    """The package's modules that one import statement names."""
    known = modules()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".")
    else:
        base = node.module or ""
    out = []
    for alias in node.names:
        if f"{base}.{alias.name}" in known:  # a submodule: ``from pkg import module``
            out.append(f"{base}.{alias.name}")
        elif base in known:
            out.append(base)
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node, but none under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        test = getattr(node, "test", None) if isinstance(node, ast.If) else None
        if test is not None and "TYPE_CHECKING" in ast.unparse(test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


@cache
def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {m for node in _runtime_nodes(tree) for m in _imported(name, path, node)}
        graph[name].discard(name)
    return graph


def stage_of(module: str) -> int:
    best, stage = -1, None
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, stage = len(prefix), index
    assert stage is not None, f"{module} is in no stage: add it to STAGES"
    return stage


def test_every_module_has_a_stage():
    for module in modules():
        stage_of(module)


def test_imports_never_go_back_to_an_earlier_stage():
    backwards = [
        f"{a} ({STAGES[stage_of(a)][0]}) imports {b} ({STAGES[stage_of(b)][0]})"
        for a, targets in import_graph().items()
        for b in targets
        if stage_of(b) > stage_of(a)
    ]
    assert backwards == []


def test_the_gold_never_imports_a_candidate():
    gold = [m for m in modules() if m.startswith("kernelcheck.ops") or m == "kernelcheck.gold"]
    for module in gold:
        assert not any(t.startswith("kernelcheck.candidates") for t in import_graph()[module])


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_circles_finds_a_circle():
    """The circle finder itself: a two-module circle and a three-module one are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(circles(graph)) == [["a", "b"], ["c", "d", "e"]]


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the end of the signature (its first statement, the docstring included)
    to the function's last line: typer's option declarations sit in the signature."""
    return node.end_lineno - node.body[0].lineno + 1


def test_no_function_body_over_80_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"
                if body_lines(node) > MAX_BODY_LINES and where not in LONG_FUNCTIONS_EXEMPT:
                    long.append(f"{where} ({body_lines(node)} lines)")
    assert long == []


def test_body_lines_start_after_the_signature():
    source = "def f(\n    a: int = 1,\n    b: int = 2,\n):\n    x = a\n    return x\n"
    assert body_lines(ast.parse(source).body[0]) == 2


def test_the_graph_reads_runtime_imports_only():
    """An import at the top and one inside a function count; a TYPE_CHECKING one does not
    (coverage names results' CheckResult for annotations only)."""
    graph = import_graph()
    assert "kernelcheck.checks.fastpath" in graph["kernelcheck.checks.metrics"]
    assert "kernelcheck.runner.malloc_tuning" in graph["kernelcheck.runner.worker"]
    assert "kernelcheck.results" not in graph["kernelcheck.coverage"]
