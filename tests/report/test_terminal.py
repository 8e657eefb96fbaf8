"""What a user reads: an 80-column table, unwrapped failure lines in logs, per-case
progress lines in CI, honest metrics, shrink lines before the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kernelcheck.checks.metrics import ErrorStats
from tests.conftest import FIXTURES, REPO_ROOT, run_small, with_candidate

PLANTED = FIXTURES / "planted.toml"


def kc(*args, columns: int | None = None):
    env = {**os.environ}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "kernelcheck", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=300,
    )


def test_table_fits_80_columns_and_log_lines_are_whole():
    """A failing run in a log (not a terminal) with COLUMNS=80: the table fits, every
    check and status is whole, FAIL and repro lines are never wrapped, shrink lines come
    before the verdict, and stderr has one progress line per case with an ETA."""
    p = kc("run", "--op", "logp", "--spec", str(PLANTED), "--candidate", "off-by-small",
           "--candidate", "stores-bf16", "--dtype", "fp32", "--shape", "batch=8,vocab=257",
           "--shrink-budget", "30", "--no-sweep", columns=80)  # fmt: skip
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    table = [x for x in lines if not x.startswith(("FAIL", "  repro:", "off-by", "stores"))]
    assert all(len(x) <= 80 for x in table), max(table, key=len)
    for check in ("forward_accuracy", "backward_invariance", "forward_precision"):
        assert any(x.strip().startswith(check) for x in lines), check
    fails = [i for i, x in enumerate(lines) if x.startswith("FAIL ")]
    assert fails and all(lines[i + 1].startswith("  repro: kernelcheck run ") for i in fails)
    assert all(lines[i + 1].rstrip().endswith("normal+large+masked+equal+heavy+lm") for i in fails)
    shrunk = [i for i, x in enumerate(lines) if ": shrunk: " in x or ": shrink: " in x]
    verdict = next(i for i, x in enumerate(lines) if x.startswith("FAILED: "))
    assert shrunk and max(shrunk) < verdict == len(lines) - 1
    progress = [x for x in p.stderr.splitlines() if x.startswith("[")]
    assert len(progress) == 2 and progress[0].startswith("[1/2] off-by-small-fp32-8x257: ")
    assert " eta " in progress[0] and " fail" in progress[0]


def test_title_lines_have_no_trailing_padding():
    p = kc("run", "--op", "logp", "--candidate", "torch", "--dtype", "fp32", "--shape",
           "batch=4,vocab=33", "--checks", "contract", columns=80)  # fmt: skip
    title = next(x for x in p.stdout.splitlines() if x.startswith("logp / torch on cpu"))
    assert title == title.rstrip() and title.endswith("[torch:fp32-formula]")


def test_nonfinite_outputs_are_counted_and_the_finite_error_shown_apart(catalog):
    cat = with_candidate(catalog, "nan", "faulty_logp:returns_nan")
    res = run_small(cat, "nan", ["forward_accuracy", "forward_precision"], seeds=[0])
    from kernelcheck.report.terminal import headline

    for r in res.values():
        assert r.metrics["n_nonfinite"] > 0
        worst, _ = headline(r)
        assert worst.startswith(f"{r.metrics['n_nonfinite']} NaN/Inf, else ")
    assert "> limit" not in res["forward_precision"].message  # the finite error is within it
    assert "NaN/Inf output(s)" in res["forward_precision"].message


def test_ulp_only_where_an_fp32_ulp_applies(catalog):
    res = run_small(catalog, "torch", ["backward_accuracy"], dtype="bf16", seeds=[0])
    assert "max_ulp" not in res["backward_accuracy"].metrics
    st = ErrorStats()
    import torch

    st.update(torch.ones(3, dtype=torch.bfloat16), torch.ones(3, dtype=torch.float64))
    assert "max_ulp" not in st.metrics()


def test_precision_shows_the_limit_it_applied_with_its_own_ratio(catalog):
    res = run_small(catalog, "torch", ["forward_precision"], seeds=[0, 1])["forward_precision"]
    assert res.status == "pass"
    m, t = res.metrics, res.tolerance
    assert m["max_abs"] <= t["limit"]
    assert m["ratio"] == (m["max_abs"] / m["reference_max_abs"] if m["reference_max_abs"] else 0)
    cat = with_candidate(catalog, "b", "broken_logp:bf16_accumulation")
    bad = run_small(cat, "b", ["forward_precision"], dtype="bf16", seeds=[0])["forward_precision"]
    assert bad.status == "fail" and bad.metrics["max_abs"] > bad.tolerance["limit"]
    assert f"limit {bad.tolerance['limit']:.3e}" in bad.message


def test_json_tolerance_has_limit(tmp_path):
    out = tmp_path / "r.json"
    kc("run", "--op", "logp", "--candidate", "torch", "--dtype", "bf16", "--shape",
       "batch=4,vocab=33", "--checks", "forward_precision", "--no-sweep", "--json-out",
       str(out))  # fmt: skip
    (r,) = json.loads(out.read_text())["results"]
    assert r["tolerance"]["limit"] > 0
