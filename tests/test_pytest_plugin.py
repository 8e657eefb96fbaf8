"""The pytest plugin: one item per case x check, -k / -x / xdist, CLI-like failures."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys

import pytest
import tomllib

from .conftest import FIXTURES, HANG_S, TESTS

pytest_plugins = ["pytester"]

SPEC = """\
op = "logp"

[[candidate]]
name = "mine"
callable = "kc_plugin_mine:logp"
devices = ["cpu"]

[[candidate]]
name = "broken"
callable = "kc_plugin_broken:off_by_small"
devices = ["cpu"]

[[candidate]]
name = "noback"
callable = "kc_plugin_mine:logp"
devices = ["cpu"]
backward = false
"""

MINE = """\
import torch


def logp(logits, target):
    x = logits.float()
    valid = (target >= 0) & (target < x.shape[-1])
    lse = torch.logsumexp(x, -1)
    sel = x.gather(-1, target.clamp(0, x.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, sel - lse, 0.0)
"""

SMALL = [
    "--kernelcheck-device=cpu",
    "--kernelcheck-shape=batch=2,seq=4,vocab=257",
    "--kernelcheck-seed=0",
    "--kernelcheck-distributions=normal",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
]
CHECKS = (
    "forward_accuracy",
    "forward_precision",
    "backward_accuracy",
    "backward_precision",
    "forward_invariance",
    "backward_invariance",
    "determinism",
    "contract",
    "integrity",
    "shape_sweep",
)
# each sweep value of logp's attributes (temperature 0.7, 1.3; with_mask true) and the
# pair of first sweep values (0.7 with a mask) is a case of its own, with every check;
# mine takes neither: those items skip
SWEEP_CASES = 4
SWEEP_ITEMS = SWEEP_CASES * len(CHECKS)
# at a dtype after the grid's first, a sweep case runs no invariance checks (api.py);
# its shape_sweep takes the edges past the sweeps' shapes
LATER_SWEEP_ITEMS = SWEEP_CASES * (len(CHECKS) - 2)
GRAD_CHECKS = ("backward_accuracy", "backward_precision", "backward_invariance")


def _installed() -> bool:
    """Whether the pytest11 entry point is installed (then ``-p`` would register it twice)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    return any(ep.value == "kernelcheck.pytest_plugin" for ep in eps)


def _plugin() -> list[str]:
    return [] if _installed() else ["-p", "kernelcheck.pytest_plugin"]


@pytest.fixture
def spec(pytester):
    (pytester.path / "kc_plugin_mine.py").write_text(MINE)
    shutil.copy(FIXTURES / "broken_logp.py", pytester.path / "kc_plugin_broken.py")
    path = pytester.path / "mine.toml"
    path.write_text(SPEC)
    return path


def _run(pytester, spec, *args):
    return pytester.runpytest_inprocess(*_plugin(), f"--kernelcheck-spec={spec}", *SMALL, *args)


def _run_installed(pytester, spec, *args):
    """pytest in a fresh process, the plugin loaded as installed (no ``-p``)."""
    return pytester.run(
        sys.executable,
        "-m",
        "pytest",
        f"--kernelcheck-spec={spec}",
        *SMALL,
        "--kernelcheck-dtype=fp32",
        "--kernelcheck-candidate=mine",
        *args,
        timeout=HANG_S,
    )


@pytest.mark.slow
def test_one_item_per_case_and_check_with_readable_ids(pytester, spec):
    res = _run(pytester, spec, "--kernelcheck-candidate=mine", "--kernelcheck-dtype=fp32,bf16")
    res.assert_outcomes(passed=2 * len(CHECKS), skipped=SWEEP_ITEMS + LATER_SWEEP_ITEMS)
    col = _run(
        pytester,
        spec,
        "--kernelcheck-candidate=mine",
        "--kernelcheck-dtype=fp32,bf16",
        "--collect-only",
        "-q",
    )
    ids = [line for line in col.outlines if line.startswith("kernelcheck::")]
    swept = [i for i in ids if "temperature=" in i or "with_mask=" in i]
    assert len(swept) == SWEEP_ITEMS + LATER_SWEEP_ITEMS
    assert "kernelcheck::logp[mine-bf16-2x4x257-temperature=0.7-forward_invariance]" not in swept
    assert "kernelcheck::logp[mine-fp32-2x4x257-temperature=0.7-forward_accuracy]" in swept
    assert [i for i in ids if i not in swept] == [
        f"kernelcheck::logp[mine-{dt}-2x4x257-{check}]"
        for dt in ("fp32", "bf16")
        for check in CHECKS
    ]


@pytest.mark.slow
def test_keyword_selection_and_failure_output(pytester, spec):
    res = _run(pytester, spec, "--kernelcheck-dtype=fp32", "-k", "forward_accuracy")
    # torch and cpu (built in), mine, broken and noback at fp32; and the sweeps' cases,
    # which only torch takes (temperature, mask): the others' items skip
    outcomes = res.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["passed"] == 4 + SWEEP_CASES
    assert outcomes["skipped"] == 4 * SWEEP_CASES
    out = res.stdout.str()
    assert (
        "FAIL broken-fp32-2x4x257 forward_accuracy: output: 7 of 8 elements outside atol=1e-05"
    ) in out
    assert (
        f"repro: kernelcheck run --op logp --spec {spec} --candidate broken --device cpu "
        "--dtype fp32 --batch 2 --seq 4 --vocab 257 --attr temperature=1.0 --attr with_mask=false "
        "--checks forward_accuracy --seed 0"
    ) in out
    assert "Traceback" not in out and "runtest" not in out
    assert "FAILED kernelcheck::logp[broken-fp32-2x4x257-forward_accuracy]" in out


@pytest.mark.slow
def test_exitfirst_and_skips(pytester, spec):
    res = _run(pytester, spec, "--kernelcheck-dtype=fp32", "--kernelcheck-candidate=broken", "-x")
    res.assert_outcomes(failed=1)  # forward_accuracy is the first item; -x stops there
    res = _run(pytester, spec, "--kernelcheck-dtype=fp32", "--kernelcheck-candidate=noback")
    res.assert_outcomes(
        passed=len(CHECKS) - len(GRAD_CHECKS), skipped=len(GRAD_CHECKS) + SWEEP_ITEMS
    )
    res = _run(pytester, spec, "--kernelcheck-dtype=fp32", "--kernelcheck-candidate=noback", "-rs")
    assert "declares backward = false" in res.stdout.str()


def test_usage_errors(pytester, spec):
    res = _run(pytester, spec, "--kernelcheck-dtype=fp8")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "kernelcheck: unknown dtype 'fp8'" in res.stderr.str()
    res = pytester.runpytest_inprocess(*_plugin(), "--kernelcheck-spec=missing.toml")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "spec file not found" in res.stderr.str()


def test_without_a_spec_the_plugin_does_nothing(pytester):
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    res = pytester.runpytest_inprocess(*_plugin(), "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    out = res.stdout.str()
    assert "kernelcheck: op" not in out and "kernelcheck::" not in out


@pytest.mark.slow
def test_xdist_spreads_the_items(pytester, spec):
    res = pytester.runpytest_subprocess(
        *_plugin(),
        f"--kernelcheck-spec={spec}",
        *SMALL,
        "--kernelcheck-dtype=fp32",
        "--kernelcheck-candidate=mine,broken",
        "-n",
        "2",
        timeout=HANG_S,
    )
    # broken is off in every forward, with grad too: backward_accuracy judges that call's
    # outputs as well (forward_accuracy, forward_precision, backward_accuracy, shape_sweep
    # and contract's exact zeros fail)
    res.assert_outcomes(passed=2 * len(CHECKS) - 5, failed=5, skipped=2 * SWEEP_ITEMS)
    assert "repro: kernelcheck run" in res.stdout.str()


@pytest.mark.slow
def test_the_pytest11_entry_point_loads_the_plugin(pytester, spec, monkeypatch):
    """The pyproject entry point, installed as package metadata, loads the plugin by itself."""
    value = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["project"]["entry-points"][
        "pytest11"
    ]["kernelcheck"]
    assert value == "kernelcheck.pytest_plugin"
    dist = pytester.mkdir("site") / "kc_entry_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kc-entry-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\nkernelcheck = {value}\n")
    env_path = os.pathsep.join([str(dist.parent), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", env_path)
    res = _run_installed(pytester, spec, "--collect-only", "-q")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    assert "kernelcheck::logp[mine-fp32-2x4x257-integrity]" in res.stdout.str()


@pytest.mark.slow
def test_kernelcheck_only_runs_just_the_kernelcheck_items(pytester, spec):
    """Inside a repository with its own tests, --kernelcheck-only deselects them."""
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    mixed = _run(pytester, spec, "--kernelcheck-candidate=mine", "--kernelcheck-dtype=fp32")
    assert mixed.parseoutcomes()["passed"] == len(CHECKS) + 1  # + the repository's own test
    only = _run(
        pytester, spec, "--kernelcheck-candidate=mine", "--kernelcheck-dtype=fp32",
        "--kernelcheck-only",
    )  # fmt: skip
    only.assert_outcomes(passed=len(CHECKS), skipped=SWEEP_ITEMS, deselected=1)


@pytest.mark.slow
def test_the_installed_plugin_runs_clean_outside_the_repo(pytester, spec):
    """The installed plugin (editable included: packaging/kernelcheck-pytest.pth marks
    scikit-build-core's import redirect PYTEST_DONT_REWRITE) warns about nothing."""
    res = _run_installed(pytester, spec, "-p", "no:cacheprovider")
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == 0, out
    assert "PytestAssertRewriteWarning" not in out and "warnings summary" not in out, out


@pytest.mark.parametrize(
    "op,shape",
    [
        ("rms_norm", "batch=2,hidden=64"),
        ("swiglu", "batch=2,inter=64"),
        ("entropy", "batch=2,vocab=64"),
        ("ratio_kl", "batch=2,vocab=64"),
        ("linear_logp", "tokens=4,hidden=8,vocab=64"),
    ],
)
@pytest.mark.slow
def test_every_shipped_op_runs_as_pytest_items(pytester, op, shape):
    res = pytester.runpytest_inprocess(
        *_plugin(),
        f"--kernelcheck-spec={TESTS.parent / 'specs' / f'{op}.toml'}",
        f"--kernelcheck-op={op}",
        "--kernelcheck-device=cpu",
        "--kernelcheck-dtype=fp32",
        f"--kernelcheck-shape={shape}",
    )
    from kernelcheck import api
    from kernelcheck.spec import load_catalog

    # each sweep set (rms_norm's eps values: one attribute, no pair) is a case of every
    # check (at the first dtype and shape)
    extra = sum(a.sweep for a in api.attribute_sets(load_catalog().ops[op], {}))
    res.assert_outcomes(passed=len(CHECKS) * (1 + extra))


COUNTED = [
    f"--kernelcheck-spec={TESTS / 'specs' / 'counted.toml'}",
    "--kernelcheck-device=cpu",
    "--kernelcheck-candidate=first",
    "--kernelcheck-checks=forward_accuracy,forward_precision",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
]


@pytest.mark.slow
def test_the_checks_of_a_case_share_one_gold_and_one_set_of_candidate_calls(pytester, monkeypatch):
    """Two checks reading the same trials: one run of the case, so the gold is computed
    once per trial (2 seeds x one mixed normal+lm trial), not once per check; ``-k``
    runs the case for the selected check alone, at the same cost."""
    count = pytester.path / "gold_calls.txt"  # the counted gold logs each call there
    monkeypatch.setenv("KC_GOLD_COUNT_FILE", str(count))
    res = pytester.runpytest_inprocess(*_plugin(), *COUNTED)
    res.assert_outcomes(passed=2)
    assert len(count.read_text().splitlines()) == 2
    for check in ("forward_accuracy", "forward_precision"):  # one item a session: as before
        count.unlink()
        res = pytester.runpytest_inprocess(*_plugin(), *COUNTED, "-k", check)
        res.assert_outcomes(passed=1, deselected=1)
        assert len(count.read_text().splitlines()) == 2


@pytest.mark.slow
def test_under_xdist_each_worker_runs_a_case_at_most_once(pytester, monkeypatch):
    count = pytester.path / "gold_calls.txt"  # the counted gold logs each call there
    monkeypatch.setenv("KC_GOLD_COUNT_FILE", str(count))
    res = pytester.runpytest_subprocess(*_plugin(), *COUNTED, "-n", "2", timeout=HANG_S)
    res.assert_outcomes(passed=2)
    assert len(count.read_text().splitlines()) in (2, 4)  # one run per worker with items
