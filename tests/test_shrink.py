"""Shrinking a failure: a planted bug shrinks to a smaller failing case with a working repro."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time

import pytest

from kernelcheck import api
from kernelcheck.runner.case import RunOptions
from kernelcheck.runner.shrink import format_shrink, shrink, shrink_failures
from kernelcheck.spec import load_catalog
from tests.conftest import HANG_S

from .conftest import FIXTURES

BIG = {"batch": 4, "seq": 8, "vocab": 10000}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """An add-on spec (outside the repo) adding ``broken``: off_by_small, wrong at fp32."""
    folder = tmp_path_factory.mktemp("shrink_spec")
    shutil.copy(FIXTURES / "broken_logp.py", folder / "kc_shrink_broken.py")
    spec = folder / "broken.toml"
    spec.write_text(
        'op = "logp"\n'
        "[[candidate]]\n"
        'name = "broken"\n'
        'callable = "kc_shrink_broken:off_by_small"\n'
        'devices = ["cpu"]\n'
    )
    catalog = load_catalog([spec])
    plan = api.plan(
        catalog,
        "logp",
        candidate_names=["broken"],
        device="cpu",
        dtype_names="fp32",
        shape=BIG,
        check_names="forward_accuracy",
        seeds=[0],
        distributions="large,equal",
    )
    (result,) = api.execute(plan).results
    assert result.status == "fail" and result.failing_distribution == "large"
    assert result.distribution == "large+equal"  # the mixed trial that reruns it
    return catalog, plan, result


@pytest.mark.slow
def test_planted_bug_shrinks_to_a_smaller_failing_case(broken):
    catalog, plan, result = broken
    out = shrink(catalog, "logp", result, plan.options, budget_s=60.0)
    assert out.reproduced and not out.exhausted_budget
    assert out.original_case_id == "broken-fp32-4x8x10000"
    assert out.check == "forward_accuracy" and out.status == "fail"
    rows = out.shape["batch"] * out.shape.get("seq", 1)
    assert rows < 4 * 8
    assert out.shape["vocab"] < BIG["vocab"]
    assert out.distribution == "normal"  # simpler than the failing 'large'
    assert out.seed == 0
    assert out.attempts >= 2 and out.elapsed_s < 60.0
    assert out.steps and out.shrunk
    assert out.original_repro == result.repro
    assert out.to_dict()["case_id"] == out.case_id

    # the shrunk repro is a kernelcheck command line that still fails (exit 1)
    argv = shlex.split(out.repro)
    assert argv[:2] == ["kernelcheck", "run"]
    assert "--spec" in argv and "--checks" in argv
    proc = subprocess.run(
        [sys.executable, "-m", "kernelcheck", *argv[1:], "--format", "plain"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "forward_accuracy" in proc.stdout


def test_shrink_accepts_a_result_dict(broken):
    catalog, plan, result = broken
    out = shrink(catalog, "logp", result.to_dict(), plan.options, budget_s=60.0)
    assert out.shape["vocab"] < BIG["vocab"]


def test_zero_budget_returns_at_once_and_says_so(broken):
    catalog, plan, result = broken
    t0 = time.perf_counter()
    out = shrink(catalog, "logp", result, plan.options, budget_s=0.0)
    assert time.perf_counter() - t0 < 1.0
    assert out.exhausted_budget and out.attempts == 0
    assert out.case_id == out.original_case_id and out.shape == BIG
    assert not out.shrunk


@pytest.mark.slow
def test_a_passing_case_is_not_reproduced(catalog):
    report = api.run(
        catalog,
        "logp",
        candidate_names=["torch"],
        device="cpu",
        dtype_names="fp32",
        shape={"batch": 2, "seq": 4, "vocab": 257},
        check_names="forward_accuracy",
        seeds=[0],
        distributions="normal",
    )
    res = report.results[0].to_dict()
    res["status"] = "fail"  # a flaky 'failure' that no longer reproduces
    out = shrink(catalog, "logp", res, RunOptions())
    assert not out.reproduced and out.attempts == 1
    assert out.case_id == out.original_case_id


@pytest.mark.slow
def test_search_finds_the_size_threshold_of_a_bug(tmp_path):
    """A bug that needs >= 3 rows and vocab >= 300: rows then vocab bisect to the threshold."""
    (tmp_path / "kc_shrink_threshold.py").write_text(
        "from kernelcheck.candidates.torch_logp import logp as honest\n\n\n"
        "def logp(logits, target):\n"
        "    out = honest(logits, target)\n"
        "    rows, vocab = logits.numel() // logits.shape[-1], logits.shape[-1]\n"
        "    return out + 1e-3 if rows >= 3 and vocab >= 300 else out\n"
    )
    spec = tmp_path / "threshold.toml"
    spec.write_text(
        'op = "logp"\n[[candidate]]\nname = "threshold"\n'
        'callable = "kc_shrink_threshold:logp"\ndevices = ["cpu"]\n'
    )
    catalog = load_catalog([spec])
    plan = api.plan(
        catalog,
        "logp",
        candidate_names=["threshold"],
        device="cpu",
        dtype_names="fp32",
        shape=BIG,
        check_names="forward_accuracy",
        seeds=[0],
        distributions="heavy",
    )
    (result,) = api.execute(plan).results
    assert result.status == "fail"
    out = shrink(catalog, "logp", result, plan.options, budget_s=60.0)
    assert out.shape.get("seq", 1) * out.shape["batch"] == 3
    assert 300 <= out.shape["vocab"] <= 300 * 9 // 8
    assert out.distribution == "normal"
    assert "rows 32 -> 3" in " ".join(out.steps)


@pytest.mark.slow
def test_shrink_failures_of_a_run_share_one_budget(broken):
    catalog, _, _ = broken
    plan = api.plan(
        catalog,
        "logp",
        candidate_names=["broken"],
        device="cpu",
        dtype_names="fp32",
        check_names="forward_accuracy,determinism",
        seeds=[0],
        distributions="normal",
        shape={"batch": 4, "seq": 8, "vocab": 1000},
    )
    report = api.execute(plan)
    assert [r.status for r in report.results] == ["fail", "pass"]
    outcomes = shrink_failures(catalog, plan, report, budget_s=60.0)
    (key,) = outcomes
    assert key == ("broken-fp32-4x8x1000", "forward_accuracy")
    line = format_shrink(outcomes[key])
    assert line.startswith("shrunk: kernelcheck run --op logp --spec ")
    assert "broken-fp32-4x8x1000 -> broken-fp32-1x1" in line
    assert report.summary()["shrunk"]["broken-fp32-4x8x1000 forward_accuracy"]["shape"] == {
        "batch": 1,
        "vocab": 1,
    }


@pytest.mark.slow
def test_a_shrunk_case_is_minimal_shrinking_its_repro_finds_nothing(broken):
    catalog, plan, result = broken
    out = shrink(catalog, "logp", result, plan.options, budget_s=60.0)
    assert out.shrunk and not out.exhausted_budget
    # rerun the shrunk case as its repro would, then shrink that failure again
    again_plan = api.plan(
        catalog,
        "logp",
        candidate_names=["broken"],
        device="cpu",
        dtype_names="fp32",
        shape=out.shape,
        check_names="forward_accuracy",
        seeds=[out.seed],
        distributions=out.distribution,
    )
    (again,) = api.execute(again_plan).results
    assert again.status == "fail"
    second = shrink(catalog, "logp", again, again_plan.options, budget_s=60.0)
    assert second.reproduced and not second.shrunk, second.steps


@pytest.mark.slow
def test_a_failure_that_needs_an_attribute_shrinks_with_it(tmp_path):
    """A kernel that ignores logp's mask fails only with --attr with_mask=true: the
    shrinker reruns the case with that attribute (it reproduces), and the shrunk repro
    carries it."""
    shutil.copy(FIXTURES / "broken_logp.py", tmp_path / "kc_shrink_mask.py")
    spec = tmp_path / "mask.toml"
    spec.write_text(
        'op = "logp"\n[[candidate]]\nname = "nomask"\n'
        'callable = "kc_shrink_mask:ignores_mask"\ndevices = ["cpu"]\n'
    )
    catalog = load_catalog([spec])
    plan = api.plan(
        catalog, "logp", candidate_names=["nomask"], device="cpu", dtype_names="fp32",
        shape={"batch": 4, "seq": 8, "vocab": 300}, check_names="forward_accuracy",
        seeds=[0], distributions="normal", attributes={"with_mask": True},
    )  # fmt: skip
    (result,) = api.execute(plan).results
    assert result.status == "fail" and result.attributes == {"with_mask": True}
    out = shrink(catalog, "logp", result, plan.options, budget_s=60.0)
    assert out.reproduced, out.message
    assert "--attr with_mask=true" in out.repro and out.case_id.endswith("-with_mask=true")


def test_an_error_is_never_shrunk_nor_noted():
    """An ``error`` (the candidate raised, say on a value it cannot take) has no failing
    input to make smaller: no search, no "shrunk" line, no "not shrunk" line."""
    from kernelcheck.commands.progress import shrink_notes
    from kernelcheck.results import CheckResult, Report

    err = CheckResult("logp", "torch", "cpu", "fp32", {"batch": 2, "vocab": 33},
                      "forward_accuracy", "error", "torch-fp32-2x33",
                      message="TypeError: bad temperature")  # fmt: skip
    report = Report("logp", "1", "cpu", results=[err])
    assert shrink_failures(None, None, report, budget_s=60.0) == {}
    assert shrink_notes(report, {}) == []
    report.extra["shrunk"] = {}  # a run whose other failures were searched
    assert shrink_notes(report, {}) == []


def test_every_distribution_has_a_place_in_the_simplest_first_order():
    from kernelcheck.cases.inputs import DISTRIBUTIONS
    from kernelcheck.runner.shrink import SIMPLEST_FIRST

    assert sorted(SIMPLEST_FIRST) == sorted(DISTRIBUTIONS)


@pytest.mark.slow  # ~15-30 s: 200 attempts at the Qwen3 vocab and below
def test_a_failure_on_peaked_rows_alone_shrinks_to_them():
    """A mixed trial failing on its one converged-policy row narrows to `peaked`, the one
    distribution that shows the bug (it had stayed mixed: the order lacked it)."""
    catalog = load_catalog([FIXTURES / "planted.toml"])
    plan = api.plan(
        catalog, "logp", candidate_names=["far-tiles-skipped"], device="cpu",
        dtype_names="fp32", shape={"batch": 8, "vocab": 151936},
        check_names="forward_accuracy", seeds=[5], isolate=False, sweeps=False,
    )  # fmt: skip
    (result,) = api.execute(plan).results
    assert result.status == "fail" and result.failing_distribution == "peaked", result.message
    out = shrink(catalog, "logp", result, plan.options, budget_s=120.0)
    assert out.reproduced and out.status == "fail"
    assert out.distribution == "peaked", out.distribution
