"""scripts/check_repros.py: reruns a report's printed repros and says whether each fails again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_repros.py"


def _script(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True
    )


@pytest.mark.slow
def test_a_planted_bugs_repro_reproduces_and_a_wrong_one_does_not(tmp_path):
    report = tmp_path / "run.json"
    run = subprocess.run(
        [sys.executable, "-m", "kernelcheck", "run", "--op", "logp",
         "--spec", str(FIXTURES / "planted.toml"), "--candidate", "splits-when-few-rows",
         "--device", "cpu", "--dtype", "fp32", "--shape", "batch=2,vocab=257",
         "--checks", "forward_invariance", "--json-out", str(report)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    ok = _script(report)
    assert ok.returncode == 0 and ok.stdout.startswith("reproduces:"), ok.stdout + ok.stderr
    # the same failure with a repro that runs another, passing check: must be caught
    data = json.loads(report.read_text())
    bad = next(r for r in data["results"] if r["status"] == "fail")
    bad["repro"] = bad["repro"].replace("--checks forward_invariance", "--checks contract")
    data["results"] = [bad]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    no = _script(wrong)
    assert no.returncode == 1 and "DOES NOT reproduce" in no.stdout, no.stdout


def test_nothing_to_reproduce_and_a_bad_report(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"results": [{"status": "pass"}]}))
    assert _script(empty).returncode == 0
    assert _script(empty, "--expect-failures").returncode == 1  # a negative control passed
    missing = _script(tmp_path / "missing.json")
    assert missing.returncode == 2 and "cannot read" in missing.stdout
