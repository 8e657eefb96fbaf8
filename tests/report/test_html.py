"""The HTML report: a planted-bug run's page, merged shards, a diff, old reports, the
browser's view of it, and the install hint without matplotlib."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the HTML report needs the 'report' extra")

from kernelcheck import api  # noqa: E402
from kernelcheck.checks import CHECKS  # noqa: E402
from kernelcheck.checks.invariance import REMAINDER_BATCH  # noqa: E402
from kernelcheck.compare import diff, result_key  # noqa: E402
from kernelcheck.report.html import to_html  # noqa: E402
from kernelcheck.results import FAILING  # noqa: E402
from kernelcheck.spec import load_catalog  # noqa: E402
from tests.commands.test_compare import schema_1  # noqa: E402
from tests.conftest import FIXTURES, HANG_S, REPO_ROOT  # noqa: E402
from tests.report import browser  # noqa: E402

# Each planted bug shows in some plot: a batch-dependent sum (every accuracy plot and both
# invariance grids), a bias (ULP histogram), bf16 accumulation (precision against the
# reference), a batch-dependent backward (the backward grid), NaN on 'large' (NaN/Inf in
# the histogram), a nondeterministic kernel (a failure with no plot data).
PLANTED = [
    "torch",
    "batch-dependent-order",
    "perturbed-backward-in-batches",
    "off-by-small",
    "bf16-accumulation",
    "no-max-subtraction",
    "nondeterministic",
]
# the plots a failing result of each check must show (backward_accuracy adds its columns)
PLOTS = {
    "forward_accuracy": {"ulp_histogram", "distribution_errors"},
    "backward_accuracy": {"ulp_histogram", "column_errors", "distribution_errors"},
    "forward_precision": {"precision"},
    "forward_invariance": {"invariance_grid"},
    "backward_invariance": {"invariance_grid"},
}
SCREENSHOT = REPO_ROOT / "docs" / "report.png"


@pytest.fixture(scope="module")
def planted() -> dict:
    """A run of the planted bugs (and the honest torch candidate) as a JSON report dict."""
    catalog = load_catalog([FIXTURES / "planted.toml"])
    report = api.run(
        catalog, "logp", candidate_names=PLANTED, device="cpu", dtype_names="fp32",
        shape={"batch": 2, "seq": 16, "vocab": 263}, seeds=[0], isolate=False, sweeps=False,
        check_names=[c for c in CHECKS if c != "shape_sweep"],  # its time; its plots: none
    )  # fmt: skip
    data = json.loads(json.dumps(report.to_dict(), default=str))  # as a reader loads it
    for r in data["results"]:  # repros as typed in the checkout (the README's screenshot)
        r["repro"] = r["repro"].replace(f"{REPO_ROOT}/", "")
    assert {r["status"] for r in data["results"]} == {"pass", "fail"}
    return data


class Page(HTMLParser):
    """What the tests look at: ids, links, matrix cells, failure sections and their parts."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: Counter = Counter()
        self.links: list[str] = []
        self.cells: list[dict] = []  # the summary matrix's cells
        self.sections: dict[str, dict] = {}  # failure sections by id
        self.tables: list[str] = []
        self.section: dict | None = None
        self.urls: list[str] = []
        self.csp = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] += 1
        for key in ("src", "href", "xlink:href", "action"):
            if a.get(key) and not a[key].startswith("#"):
                self.urls.append(a[key])
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a.get("content", "")
        if tag == "a" and a.get("href", "").startswith("#"):
            self.links.append(a["href"][1:])
        if tag == "table":
            self.tables.append(a.get("id") or a.get("class", ""))
        if tag == "td" and "cell" in a.get("class", "") and self.tables[-1:] == ["matrix"]:
            self.cells.append(a)
        if tag == "section" and "result" in a.get("class", ""):
            self.section = {"id": a["id"], "check": a["data-check"], "plots": [], "svgs": 0,
                            "copy": None, "text": ""}  # fmt: skip
            self.sections[a["id"]] = self.section
        if self.section is not None:
            if tag == "figure":
                self.section["plots"].append(a["data-plot"])
            if tag == "svg":
                self.section["svgs"] += 1
            if tag == "button" and "copy" in a.get("class", ""):
                self.section["copy"] = a["data-copy"]

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None
        if tag == "table":
            self.tables.pop()

    def handle_data(self, data):
        if self.section is not None:
            self.section["text"] += data


@pytest.mark.slow
def test_page_of_a_planted_run(planted):
    text = to_html(planted)
    page = Page(text)
    results = planted["results"]
    # the matrix: one cell per result, its counts the JSON's
    assert len(page.cells) == len(results)
    counts = Counter(c["data-status"] for c in page.cells)
    assert counts == Counter({s: n for s, n in planted["summary"]["counts"].items() if n})
    # every link lands, every id is unique (the SVGs' own ids too)
    assert set(page.links) <= set(page.ids)
    assert [i for i, n in page.ids.items() if n > 1] == []
    # every failing result: a section with its message, its repro to copy and its plots
    failing = [(i, r) for i, r in enumerate(results) if r["status"] in FAILING]
    assert len(page.sections) == len(failing) > 10
    for i, r in failing:
        s = page.sections[f"r{i}"]
        assert s["check"] == r["check"] and r["message"][:60] in s["text"]
        assert s["copy"] == r["repro"] and r["repro"] in s["text"]
        want = PLOTS.get(r["check"], set())
        assert set(s["plots"]) == want, (r["case_id"], r["check"])
        assert s["svgs"] == len(s["plots"])
        if not want:
            assert "No plot data" in s["text"]
    assert set(PLOTS) <= {r["check"] for _, r in failing}  # every kind of plot was drawn
    # nothing to fetch: no URL at all, and a policy that forbids any fetch
    assert page.urls == [] and "default-src 'none'" in page.csp
    assert re.findall(r"[a-z]+://", text) == []  # no URL at all, not even a namespace
    assert re.findall(r"url\((?!#)", text) == []  # SVG clip paths refer to ids of the page


def test_invariance_grid_shows_which_batches_broke(planted):
    """batch_dependent_order takes a coarser path for batches over 8 rows: the grid puts
    every mismatch in the batches of 16, the one of 127 at 64 threads, the one of 98,304
    and the case's own 32 rows, none in those of 2 to 7."""
    r = next(
        r for r in planted["results"]
        if r["candidate"] == "batch-dependent-order" and r["check"] == "forward_invariance"
    )  # fmt: skip
    rows = [row for layout in r["plots"]["invariance"].values() for row in layout]
    broke = {row["batch"] for row in rows if any(row.get("mismatched") or [])}
    assert broke == {16, 32, REMAINDER_BATCH, 98304}
    assert sum(sum(row.get("mismatched") or []) for row in rows) == r["metrics"]["mismatched_rows"]


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def kc(*args):
    return subprocess.run(
        [sys.executable, "-m", "kernelcheck", *map(str, args)],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


def _shards(report: dict) -> list[dict]:
    """``report`` as two shards of one run, split by case."""
    cases = list(dict.fromkeys(r["case_id"] for r in report["results"]))
    out = []
    for k, half in enumerate((cases[::2], cases[1::2]), start=1):
        shard = copy.deepcopy(report)
        shard["results"] = [r for r in report["results"] if r["case_id"] in half]
        shard["summary"]["shard"] = f"{k}/2"
        out.append(shard)
    return out


@pytest.mark.slow
def test_report_command_renders_merged_shards_and_a_diff(planted, tmp_path):
    a, b = (_write(tmp_path / f"shard{k}.json", s) for k, s in enumerate(_shards(planted)))
    out = tmp_path / "page.html"
    p = kc("report", a, b, "--html-out", out)
    assert p.returncode == 0, p.stderr
    page = Page(out.read_text())
    assert len(page.cells) == len(planted["results"]) and "merged from 2 reports" in p.stdout + (
        out.read_text()
    )
    # a baseline where everything passed and every error was half as large
    base = copy.deepcopy(planted)
    for r in base["results"]:
        r["status"] = "pass"
        r["metrics"] = {k: v / 2.5 if k == "max_abs" else v for k, v in r["metrics"].items()}
    base_path = _write(tmp_path / "base.json", base)
    new_path = _write(tmp_path / "new.json", planted)
    p = kc("report", new_path, "--baseline", base_path, "--html-out", out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    d = diff(base, planted)
    regressed = {c.key for c in [*d.new_failures, *d.metric_regressions]}
    assert d.new_failures and d.metric_regressions
    marked = [c for c in Page(text).cells if "regressed" in c["class"]]
    assert len(marked) == len(regressed)
    assert 'data-regressed="true"' in text and "REGRESSED" in text
    keys = {result_key(r): i for i, r in enumerate(planted["results"])}
    for c in d.new_failures:
        assert f'href="#r{keys[c.key]}"' in text


@pytest.mark.slow
def test_schema_1_reports_render_without_plots(planted, tmp_path):
    old = schema_1(planted)
    page = Page(to_html(old))
    assert len(page.cells) == len(old["results"])
    assert all(
        s["plots"] == [] and "a schema 1 report" in s["text"] for s in page.sections.values()
    )
    a, b = _shards(planted)
    p = kc("report", _write(tmp_path / "a.json", schema_1(a)), _write(tmp_path / "b.json", b),
           "--html-out", tmp_path / "mixed.html")  # fmt: skip
    assert p.returncode == 0, p.stderr
    sections = Page((tmp_path / "mixed.html").read_text()).sections.values()
    assert any(s["plots"] for s in sections) and any(not s["plots"] for s in sections)


@pytest.mark.slow
def test_run_html_out_writes_the_page(tmp_path):
    out = tmp_path / "run.html"
    p = kc("run", "--op", "logp", "--candidate", "torch", "--dtype", "fp32", "--batch", "2",
           "--seq", "3", "--vocab", "33", "--seed", "0", "--checks", "forward_accuracy,contract",
           "--no-sweep", "--html-out", out)  # fmt: skip
    assert p.returncode == 0, p.stderr
    page = Page(out.read_text())
    assert [c["data-status"] for c in page.cells] == ["pass", "pass"]


@pytest.mark.slow  # a browser
@pytest.mark.skipif(browser.chromium() is None, reason="chromium is not installed")
def test_chromium_shows_the_page_and_it_fetches_nothing(planted, tmp_path):
    page, png = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(to_html(planted))
    requests = browser.screenshot(page, png, window=(1400, 1800))
    assert requests == []
    assert browser.distinct_colours(png) > 50  # not blank: text, the matrix, plots
    # the checks can fail: a blank page that fetches an image
    leaky = tmp_path / "leaky.html"
    leaky.write_text(
        '<html><body><img hidden src="http://kernelcheck.invalid/x.png"></body></html>'
    )
    assert browser.screenshot(leaky, tmp_path / "leaky.png") == ["http://kernelcheck.invalid/x.png"]
    assert browser.distinct_colours(tmp_path / "leaky.png") == 1
    if os.environ.get("KERNELCHECK_UPDATE_SCREENSHOT"):  # the README's screenshot
        shutil.copy(png, SCREENSHOT)


@pytest.mark.slow
def test_the_page_counts_regressions_with_the_gates_factor(planted, tmp_path):
    """`--baseline-factor` decides what the page marks regressed, as it decides `run`'s
    exit code: errors 1.5x the baseline's are regressions at 1.2, not at the default 2."""
    from kernelcheck.commands.report import write_page

    base = copy.deepcopy(planted)
    for r in base["results"]:
        r["metrics"] = {k: v / 1.5 if k == "max_abs" else v for k, v in r["metrics"].items()}
    out = tmp_path / "page.html"
    write_page(out, planted, base)
    assert 'data-regressed="false"' in out.read_text()
    write_page(out, planted, base, factor=1.2)
    assert 'data-regressed="true"' in out.read_text()
    new_path, base_path = _write(tmp_path / "n.json", planted), _write(tmp_path / "b.json", base)
    p = kc("report", new_path, "--baseline", base_path, "--baseline-factor", "1.2",
           "--html-out", out)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert 'data-regressed="true"' in out.read_text()


@pytest.mark.slow
def test_a_report_without_a_summary_renders(planted, tmp_path):
    bare = {k: v for k, v in planted.items() if k != "summary"}
    p = kc("report", _write(tmp_path / "bare.json", bare), "--html-out", tmp_path / "p.html")
    assert p.returncode == 0, p.stderr
    assert "wrote" in p.stdout
