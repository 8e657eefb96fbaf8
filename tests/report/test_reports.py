"""Reporters: the old harness's plain lines, markdown, JSON schema and JUnit XML."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from kernelcheck import api
from kernelcheck.checks import CHECKS
from kernelcheck.checks.invariance import (
    OTHER_VALUE_BATCH,
    REMAINDER_BATCH,
    WIDE_ROWS,
    WIDE_THREADS,
)
from kernelcheck.report import render_table, to_json, to_junit, to_markdown, to_plain
from kernelcheck.report.json_report import dumps_report
from tests.conftest import with_candidate

CASE_LINE = re.compile(
    r"^  case=logp-torch\.bfloat16-2x16x257 output=(\d)( gradient:logits)? "
    r"shape=\((\d+(?:, \d+)*)\) "
    r"dtype=torch\.(\w+) max_abs=\d\.\d{8}e[+-]\d\d mean_abs=\d\.\d{8}e[+-]\d\d "
    r"max_rel=\d\.\d{8}e[+-]\d\d tol=\(atol=(\d\.\d{3}e-0\d), rtol=0\.000e\+00\) passed=True$"
)


# the checks that run at big sizes of their own (gigabytes at bf16: minutes, once per xdist
# worker) add nothing a reporter shows that the others do not
REPORTED = [name for name in CHECKS if name not in ("shape_sweep", "far_rows")]


@pytest.fixture(scope="module")
def report(catalog):
    cat = with_candidate(catalog, "broken", "broken_logp:negative_zero")
    return api.run(
        cat, "logp", candidate_names=["torch", "broken"], device="cpu", dtype_names="bf16",
        shape={"batch": 2, "seq": 16, "vocab": 257}, seeds=[0], distributions="normal",
        check_names=REPORTED,
    )  # fmt: skip


@pytest.mark.slow
def test_plain_keeps_the_old_harness_lines(report, catalog):
    lines = to_plain(report, catalog.op("logp")).splitlines()
    assert lines[0].startswith("suite=logp passed=False pass_rate=0.9")
    assert lines[1] == "candidate=torch-logp backend=torch passed=True pass_rate=1.0000"
    forward = [m for m in map(CASE_LINE.match, lines) if m and m.group(1) == "0"]
    grad = [m for m in map(CASE_LINE.match, lines) if m and m.group(1) == "1"]
    assert forward and forward[0].group(3) == "2, 16" and forward[0].group(4) == "float32"
    assert forward[0].group(5) == "6.000e-02" and "tol=(atol=6.000e-02, rtol=0.000e+00)" in lines[2]
    assert grad and grad[0].group(2) == " gradient:logits" and grad[0].group(3) == "2, 16, 257"
    assert grad[0].group(4) == "bfloat16"
    assert any(
        line.startswith("candidate=broken-logp backend=broken passed=False") for line in lines
    )
    assert any(line.startswith("    repro: kernelcheck run --op logp") for line in lines)


def test_json_schema(report):
    data = json.loads(to_json(report))
    assert data["schema_version"] == 2
    assert {"environment", "results", "summary"} <= set(data)
    r = data["results"][0]
    for key in ("op", "candidate", "device", "dtype", "shape", "check", "status", "metrics",
                "tolerance", "seed", "message", "repro"):  # fmt: skip
        assert key in r
    assert r["shape"] == {"batch": 2, "seq": 16, "vocab": 257}
    assert {x["status"] for x in data["results"]} <= {
        "pass",
        "fail",
        "error",
        "skip",
        "timeout",
        "crash",
    }
    assert data["summary"]["counts"]["fail"] == 1 and data["summary"]["passed"] is False
    assert all("tensor" not in json.dumps(x["metrics"]) for x in data["results"])


def test_json_plot_data_is_bounded_and_one_line_per_array(report):
    text = to_json(report)
    data = json.loads(text)
    assert data == json.loads(json.dumps(report.to_dict(), default=str))  # only spacing differs
    plots = {r["check"]: r["plots"] for r in data["results"] if r["candidate"] == "torch"}
    (out,) = plots["forward_accuracy"]["errors"]
    assert out["name"] == "output" and out["ulp"]["unit"] == "fp32" and "columns" not in out
    assert sum(out["ulp"]["log2_counts"]) + out["ulp"]["nonfinite"] == 32  # every element
    (grad,) = plots["backward_accuracy"]["errors"]
    assert grad["name"] == "gradient:logits" and grad["ulp"]["unit"] == "bf16"
    cols = grad["columns"]  # 257 columns: 64 buckets of 4, then the 257th alone
    assert (cols["width"], len(cols["max_abs"]), cols["tail_start"]) == (4, 64, 256)
    assert set(grad["by_distribution"]) == {"normal"}
    assert set(plots["forward_precision"]["precision"]["normal"]) == {
        "max_abs", "reference_max_abs", "limit",
    }  # fmt: skip
    grid = plots["forward_invariance"]["invariance"]
    inv = next(
        r
        for r in data["results"]
        if r["candidate"] == "torch" and r["check"] == "forward_invariance"
    )
    compared = sum(sum(row["compared"]) for rows in grid.values() for row in rows)
    others = 2 * OTHER_VALUE_BATCH  # at temperature 0.7 and 1.3
    # a few rows alone at each wide thread count, one batch at 64 threads
    wide = len(WIDE_THREADS) * WIDE_ROWS + REMAINDER_BATCH
    assert (
        compared == inv["metrics"]["comparisons"] == 300 + wide + 98304 + 32 + others
    )  # every placement
    assert re.search(r'"max_abs": \[[-0-9.e, ]+\],?\n', text)  # 64 numbers, one line


def test_junit_one_testcase_per_case_and_check(report):
    root = ET.fromstring(to_junit(report))
    cases = root.findall(".//testcase")
    assert len(cases) == len(report.results)
    failures = root.findall(".//failure")
    assert len(failures) == 1 and "expected exactly 0.0" in failures[0].get("message")
    assert "repro: kernelcheck run" in failures[0].text
    assert cases[0].get("name") == "torch-bf16-2x16x257-forward_accuracy"


@pytest.mark.slow
def test_markdown_table_and_failures(report):
    md = to_markdown(report)
    assert md.startswith("### kernelcheck `logp` on cpu: FAILED")
    assert (
        re.search(r"^\| candidate +\| dtype +\| shape +\|", md, re.M) and "forward_invariance" in md
    )
    assert "#### Failures" in md and "`kernelcheck run --op logp" in md


def test_terminal_table_renders(report):
    console = Console(record=True, width=200)
    render_table(report, console)
    text = console.export_text()
    assert "logp / torch on cpu" in text and "FAILED" in text and "repro:" in text


def test_plot_data_is_bounded_whatever_the_shape(catalog):
    """The same plot data at vocab 257 and 10000 (64 column buckets, fixed histograms), and
    within the 2x the JSON may grow by over a report without it."""

    def run(shape):
        report = api.run(
            catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32",
            shape=shape, seeds=[0], distributions="normal", isolate=False, sweeps=False,
            check_names="forward_accuracy,backward_accuracy,forward_precision,forward_invariance",
        )  # fmt: skip
        return json.loads(to_json(report))

    sizes = []
    for shape in ({"batch": 2, "seq": 16, "vocab": 257}, {"batch": 32, "vocab": 10000}):
        data = run(shape)
        plots = [json.dumps(r["plots"]) for r in data["results"]]
        sizes.append([len(p) for p in plots])
        without = copy.deepcopy(data)
        for r in without["results"]:
            del r["plots"]
        assert len(dumps_report(data)) < 2 * len(dumps_report(without))
    for small, large in zip(*sizes):
        assert abs(small - large) < 0.25 * small, sizes


@pytest.mark.slow
def test_report_without_matplotlib_exits_2_with_the_install_command(report, tmp_path):
    """Runs whether the 'report' extra is installed or not: the import is blocked."""
    path = tmp_path / "r.json"
    path.write_text(to_json(report))
    block = "import sys; sys.modules['matplotlib'] = None; from kernelcheck.cli import entry; "
    for args in (
        ["report", str(path), "--html-out", str(tmp_path / "r.html")],
        ["run", "--op", "logp", "--candidate", "torch", "--html-out", str(tmp_path / "x.html")],
    ):
        p = subprocess.run(
            [sys.executable, "-c", block + f"entry({args!r})"], capture_output=True, text=True
        )
        assert p.returncode == 2, p.stderr
        assert "matplotlib" in p.stderr and "pip install -e '.[report]'" in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "x.html").exists()


def test_the_json_writer_keeps_each_results_text_and_writes_the_same_file(report, tmp_path):
    """Rewritten after every result, the report costs time linear in the run: each
    result's text is made once. The file is byte for byte ``to_json``'s, also after a
    result is replaced (a shrunk failure) and with no results at all."""
    from dataclasses import replace

    from kernelcheck.report.json_report import JsonReportWriter
    from kernelcheck.results import Report

    path = tmp_path / "r.json"
    writer = JsonReportWriter(path)
    growing = Report(report.op, report.op_version, report.device, started=report.started)
    growing.finished = report.started + 1
    writer.write(growing)
    assert path.read_text() == to_json(growing)
    for r in report.results[:5]:
        growing.results.append(r)
        writer(r, growing)
        assert path.read_text() == to_json(growing)
    growing.results[2] = replace(growing.results[2], message="shrunk: a smaller case")
    writer.write(growing)
    assert path.read_text() == to_json(growing)
    assert json.loads(path.read_text())["results"][2]["message"] == "shrunk: a smaller case"


def _result(candidate, check, status, message="", dtype="fp32", **attributes):
    from kernelcheck.results import CheckResult

    shape = {"batch": 2, "vocab": 33}
    tags = "".join(f"-{k}={v}" for k, v in attributes.items())
    return CheckResult("logp", candidate, "cpu", dtype, shape, check, status,
                       f"{candidate}-{dtype}-2x33{tags}", message=message,
                       attributes=attributes)  # fmt: skip


def test_not_checked_names_what_each_skip_reason_left_out_and_the_verdict_is_last(catalog):
    """One line per distinct reason, naming the fewest axes that single the skips out
    (temperature=0.7, not every check of that case); the verdict counts the pairs."""
    from kernelcheck.results import Report

    why = "candidate cpu does not take temperature"
    report = Report("logp", "1", "cpu", unavailable={"cuda": "needs device cuda"})
    report.not_planned = {"dtypes bf16": "not in the plan (--dtype fp32)"}
    report.finished = report.started + 1.5  # a finished run: both formats print one time
    for check in ("forward_accuracy", "contract"):
        report.results += [
            _result("cpu", check, "pass"),
            _result("cpu", check, "skip", why, temperature=0.7),
            _result("torch", check, "pass", temperature=0.7),
        ]
    report.results.append(_result("torch", "backward_accuracy", "skip", "backward checks are off"))
    expected = [
        f"temperature=0.7 not checked for cpu: {why}",
        "backward_accuracy not checked for torch: backward checks are off",
        "dtypes bf16 not checked: not in the plan (--dtype fp32)",
        "candidate cuda not checked: needs device cuda",
    ]
    assert [n.line() for n in report.not_checked()] == expected
    plain = to_plain(report, catalog.op("logp")).splitlines()
    assert plain[-5:-1] == expected
    assert plain[-1].startswith("PASSED: 4 pass, 3 skip in ")
    assert plain[-1].endswith("; 4 (candidate, check) pairs ran")
    console = Console(record=True, width=200)
    render_table(report, console)
    table = console.export_text().rstrip("\n").splitlines()
    assert table[-5:-1] == expected and table[-1] == plain[-1]


def test_a_report_of_skips_only_says_nothing_checked(catalog):
    from kernelcheck.results import Report

    report = Report("logp", "1", "cpu")
    report.results.append(_result("torch", "backward_accuracy", "skip", "backward checks are off"))
    assert report.passed and report.pairs_run == 0
    last = to_plain(report, catalog.op("logp")).splitlines()[-1]
    assert last.startswith("NOTHING CHECKED: 1 skip in ") and "0 (candidate, check) pairs" in last
    assert report.summary()["not_checked"] == [
        {"what": "nothing checked for torch", "reason": "backward checks are off"}
    ]
