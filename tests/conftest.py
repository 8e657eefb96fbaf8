"""Shared fixtures: the built-in catalog and a helper that runs one small case."""

from __future__ import annotations

import os

# Two xdist workers share two cores: OpenMP threads that spin while waiting turn every
# small torch op into a scheduler quantum. Sleep instead (set before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The suite's many short `kernelcheck run`s would each start workers they never use
# (runner/spares.py); tests/runner/test_spares.py turns them back on.
os.environ.setdefault("KERNELCHECK_NO_SPARES", "1")

from pathlib import Path

import pytest

from kernelcheck import api
from kernelcheck.checks import CHECKS
from kernelcheck.spec import load_catalog
from kernelcheck.spec.model import CandidateSpec

TESTS = Path(__file__).parent
REPO_ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SPECS = TESTS / "specs"
SMALL = {"batch": 2, "seq": 4, "vocab": 257}
# a test subprocess's hang guard, never a speed limit: a CI host under load ran a default
# grid run 2.5x slower than an idle one
HANG_S = 1800


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


def with_candidate(catalog, name: str, callable_: str, backward: bool = True, isolate=None):
    """The built-in catalog plus one logp candidate from ``tests/fixtures`` (as a spec would)."""
    return with_op_candidate(catalog, "logp", name, callable_, backward, isolate)


def with_op_candidate(
    catalog, op_name: str, name: str, callable_: str, backward: bool = True, isolate=None
):
    """The catalog plus one candidate of ``op_name`` from ``tests/fixtures``."""
    from dataclasses import replace

    op = catalog.ops[op_name]
    cand = CandidateSpec(
        name, callable_, ("cpu",), FIXTURES / "spec.toml", backward=backward, isolate=isolate
    )
    ops = dict(catalog.ops)
    ops[op_name] = replace(op, candidates={**op.candidates, name: cand})
    return replace(catalog, ops=ops)


def run_small(catalog, candidate: str, checks, dtype="fp32", shape=None, **kw):
    """Run a few checks of one candidate on a small shape; returns {check: result}.

    In process unless ``isolate`` is given: these tests judge the checks, not isolation.
    """
    kw.setdefault("isolate", False)
    kw.setdefault("sweeps", False)
    report = api.run(
        catalog,
        "logp",
        candidate_names=[candidate],
        device="cpu",
        dtype_names=dtype,
        shape=shape or SMALL,
        check_names=checks,
        **kw,
    )
    return {r.check: r for r in report.results}


def run_one(catalog, op: str, candidate: str, check: str, dtype: str, shape: dict, **kw):
    """The one result of one check of one candidate on one shape, in process."""
    kw.setdefault("sweeps", False)
    report = api.run(
        catalog,
        op,
        candidate_names=[candidate],
        dtype_names=dtype,
        shape=shape,
        check_names=[check],
        isolate=False,
        **kw,
    )
    (res,) = report.results
    return res


# The honest side of the planted-bug tests: (op spec, check, dtype, shape, options) ->
# the shipped ``torch`` candidate's result. That candidate is pure and every run seeded,
# so one run per worker answers each test asking the same question. Never for a test
# that patches the checks (its answer is not the question's).
_HONEST_RESULTS: dict[tuple, object] = {}


def honest_result(catalog, op: str, check: str, dtype: str, shape: dict, **kw):
    """``run_one`` of the shipped ``torch`` candidate, computed once per worker."""
    options = repr(sorted(shape.items())), repr(sorted(kw.items()))
    key = (repr(catalog.op(op)), check, dtype, *options)
    if key not in _HONEST_RESULTS:
        _HONEST_RESULTS[key] = run_one(catalog, op, "torch", check, dtype, shape, **kw)
    return _HONEST_RESULTS[key]


def failed_sweep_reproduces(spec: str, candidate: str, tmp_path) -> dict:
    """Run a planted spec's candidate through the CLI's bf16 ``shape_sweep`` (it must fail
    once), rerun the report's repro (it must fail again); the failed result."""
    import json
    import subprocess
    import sys

    report = tmp_path / "run.json"
    run = subprocess.run(
        [sys.executable, "-m", "kernelcheck", "run", "--op", "logp",
         "--spec", str(FIXTURES / spec), "--candidate", candidate,
         "--dtype", "bf16", "--checks", "shape_sweep", "--no-sweep", "--json-out", str(report)],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    script = REPO_ROOT / "scripts" / "check_repros.py"
    # no rerun limit that a loaded machine could pass: a sweep's repro runs it all again
    # (at bf16 the 131,071-row and 2^31-element leads: past 90 s under CI's load)
    again = subprocess.run(
        [sys.executable, str(script), str(report), "--timeout", "1800"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and again.stdout.startswith("reproduces:"), again.stdout
    (failed,) = [r for r in json.loads(report.read_text())["results"] if r["status"] == "fail"]
    return failed


def with_grid_shapes(catalog, op_name: str, shapes) -> object:
    """The catalog with ``op_name``'s grid holding ``shapes`` instead of the spec's."""
    from dataclasses import replace

    op = catalog.ops[op_name]
    op = replace(op, grid=replace(op.grid, shapes=tuple(shapes)))
    return replace(catalog, ops={**catalog.ops, op_name: op})


def run_fp32(catalog, candidates: list[str], checks: list[str], **kw):
    """One fp32 logp run on the CPU of ``candidates`` and ``checks``: the report."""
    return api.run(
        catalog,
        "logp",
        candidate_names=candidates,
        device="cpu",
        dtype_names="fp32",
        check_names=checks,
        **kw,
    )


SHARD_RUN = dict(
    device="cpu",
    dtype_names="fp32,bf16",
    shape=SMALL,
    seeds=[0],
    distributions="normal",
    sweeps=False,  # the attribute sweeps are cases like any other: merge and diff need none
    # every check but shape_sweep (nine tenths of the run's time; a result like any other)
    check_names=[name for name in CHECKS if name != "shape_sweep"],
)


@pytest.fixture(scope="session")
def shard_runs(catalog):
    """A small logp run and its two shards, as JSON report dicts (merge and diff read them)."""
    full = api.run(catalog, "logp", **SHARD_RUN).to_dict()
    shards = [api.run(catalog, "logp", shard_spec=f"{k}/2", **SHARD_RUN).to_dict() for k in (1, 2)]
    return full, shards


def result_table(report: dict) -> dict:
    """(case id, check) -> (status, metrics) of a report's results."""
    return {(r["case_id"], r["check"]): (r["status"], r["metrics"]) for r in report["results"]}
