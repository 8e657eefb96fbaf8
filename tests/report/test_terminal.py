"""What a user reads: an 80-column table, every line of a log within 80 columns (a repro
wrapped so that it still runs), per-case progress lines in CI, honest metrics, shrink
lines before the verdict, data printed literally."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from kernelcheck.checks.metrics import ErrorStats
from tests.conftest import FIXTURES, HANG_S, REPO_ROOT, run_small, with_candidate

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
        timeout=HANG_S,
    )


@pytest.mark.slow
def test_table_fits_80_columns_and_log_lines_are_whole():
    """A failing run in a log (not a terminal) with COLUMNS=200: every line fits 80
    columns, every check and status is whole, each FAIL is followed by its repro (wrapped
    with backslash continuations: joined, the same command), shrink lines come before the
    verdict, and stderr has one progress line per case with an ETA."""
    p = kc("run", "--op", "logp", "--spec", str(PLANTED), "--candidate", "off-by-small",
           "--candidate", "stores-bf16", "--dtype", "fp32", "--shape", "batch=8,vocab=257",
           "--shrink-budget", "30", "--no-sweep", columns=200)  # fmt: skip
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert all(len(x) <= 80 for x in lines), max(lines, key=len)
    for check in ("forward_accuracy", "backward_invariance", "forward_precision"):
        assert any(x.strip().startswith(check) for x in lines), check
    fails = [i for i, x in enumerate(lines) if x.startswith("FAIL ")]
    assert fails
    for i in fails:
        k = next(k for k in range(i + 1, len(lines)) if not lines[k].startswith("    "))
        assert lines[k].startswith("  repro: kernelcheck run "), lines[i : k + 1]
        end = next(e for e in range(k, len(lines)) if not lines[e].endswith("\\"))
        repro = " ".join(x.rstrip("\\").strip() for x in lines[k : end + 1])
        # the trial's distributions, then the thread count the case ran at (side by side)
        _, sep, tail = repro.partition("--distributions normal+large+masked+peaked+heavy+lm+equal")
        assert sep and re.fullmatch(r"( --threads [0-9]+)?", tail), repro
    shrunk = [i for i, x in enumerate(lines) if ": shrunk: " in x or ": shrink: " in x]
    verdict = next(i for i, x in enumerate(lines) if x.startswith("FAILED: "))
    assert shrunk and max(shrunk) < verdict == len(lines) - 1
    progress = [x for x in p.stderr.splitlines() if x.startswith("[")]
    assert len(progress) == 2 and progress[0].startswith("[1/2] off-by-small-fp32-8x257: ")
    assert " eta " in progress[0] and " fail" in progress[0]


@pytest.mark.slow
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


def test_backward_precision_shows_its_relative_error_against_its_limit(catalog):
    from kernelcheck.report.terminal import headline

    res = run_small(catalog, "torch", ["backward_precision"], seeds=[0])["backward_precision"]
    worst, limit = headline(res)
    m = res.metrics
    assert res.status == "pass" and m["rel_l1"] <= res.tolerance["limit"]
    assert worst == f"{m['rel_l1']:.2e} ({m['ratio']:.2f}x)"
    assert limit == f"{res.tolerance['limit']:.2e}"


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


@pytest.mark.slow
def test_json_tolerance_has_limit(tmp_path):
    out = tmp_path / "r.json"
    kc("run", "--op", "logp", "--candidate", "torch", "--dtype", "bf16", "--shape",
       "batch=4,vocab=33", "--checks", "forward_precision", "--no-sweep", "--json-out",
       str(out))  # fmt: skip
    (r,) = json.loads(out.read_text())["results"]
    assert r["tolerance"]["limit"] > 0


def _result(**kw):
    from kernelcheck.results import CheckResult

    base = dict(op="rms_norm", candidate="mine", device="cpu", dtype="fp32",
                shape={"batch": 2, "hidden": 8}, check="backward_accuracy", status="fail",
                case_id="mine-fp32-2x8", metrics={"max_abs": 1.0},
                tolerance={"atol": 1e-5, "rtol": 0.0})  # fmt: skip
    return CheckResult(**{**base, **kw})


def test_data_prints_literally_never_as_markup_or_emoji():
    """rms_norm's input is ``x``: ``gradient:x:`` must not become an emoji, ``[bold]``
    in a message must not become a style, whatever the console's defaults."""
    from rich.console import Console

    from kernelcheck.report.terminal import render_table
    from kernelcheck.results import Report

    message = "gradient:x: 2955 of 4096 elements outside [bold]atol[/bold] :thumbs_up:"
    report = Report("rms_norm", "1", "cpu", results=[_result(message=message, repro="kc :x:")])
    console = Console(record=True, width=80, file=open(os.devnull, "w"))  # emoji on
    render_table(report, console, notes=["mine :x: [red]note[/red]"])
    text = console.export_text()
    assert "gradient:x: 2955 of 4096" in text and "[bold]atol[/bold] :thumbs_up:" in text
    assert "kc :x:" in text and "mine :x: [red]note[/red]" in text
    assert "❌" not in text and "👍" not in text


def test_piped_lines_fit_80_columns_and_a_wrapped_repro_still_runs():
    """Not a terminal: the legend, a failure's message, its repro (with backslash
    continuations that join back into the same command) and the verdict fit 80."""
    import shlex

    from rich.console import Console

    from kernelcheck.report.terminal import render_table
    from kernelcheck.results import Report

    repro = ("kernelcheck run --op rms_norm --spec '/tmp/a dir/mine.toml' --candidate mine "
             "--device cpu --dtype fp32 --shape batch=2,hidden=8 --checks backward_accuracy "
             "--seed 0 --distributions normal+large+masked+equal+heavy+lm")  # fmt: skip
    long = "gradient:x: " + "2955 of 4096 elements outside atol; " * 6
    report = Report("rms_norm", "1", "cpu", results=[_result(message=long, repro=repro)])
    console = Console(record=True, width=200, file=open(os.devnull, "w"))  # COLUMNS=200
    render_table(report, console)
    lines = console.export_text().splitlines()
    assert all(len(x) <= 80 for x in lines), max(lines, key=len)
    i = next(i for i, x in enumerate(lines) if x.startswith("  repro: "))
    j = next(j for j in range(i, len(lines)) if not lines[j].endswith("\\"))
    command = " ".join(x.rstrip("\\").strip() for x in lines[i : j + 1])[len("repro: ") :]
    assert shlex.split(command) == shlex.split(repro)
    assert lines[-1].startswith("FAILED: ")


def test_a_regression_against_the_baseline_is_the_last_line():
    from rich.console import Console

    from kernelcheck.report import to_plain
    from kernelcheck.report.terminal import render_table
    from kernelcheck.results import Report
    from kernelcheck.spec import load_catalog

    report = Report("rms_norm", "1", "cpu", results=[_result(status="pass")])
    console = Console(record=True, width=80, file=open(os.devnull, "w"))
    render_table(report, console, ["kernelcheck diff: REGRESSED: 1 metric regression(s)"], True)
    lines = console.export_text().splitlines()
    assert lines[-2].startswith("kernelcheck diff: REGRESSED") and lines[-1].startswith(
        "REGRESSED: 1 pass"
    )
    plain = to_plain(report, load_catalog().op("rms_norm"), [], regressed=True)
    assert plain.splitlines()[-1].startswith("REGRESSED: 1 pass")
