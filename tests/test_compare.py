"""kernelcheck merge and diff: shards merge back into the unsharded run; diff gates CI."""

from __future__ import annotations

import copy
import json

import pytest
import typer
from typer.testing import CliRunner

from kernelcheck import api
from kernelcheck.commands import compare as commands
from kernelcheck.compare import (
    diff,
    merge,
    op_spec_digest,
    plan_digest,
    render_diff,
    render_diff_markdown,
)
from kernelcheck.errors import UsageError
from kernelcheck.spec import load_catalog

from .conftest import SMALL

RUN = dict(device="cpu", dtype_names="fp32,bf16", shape=SMALL, seeds=[0], distributions="normal")


@pytest.fixture(scope="module")
def runs(catalog):
    """The unsharded run and its two shards, as JSON report dicts."""
    full = api.run(catalog, "logp", **RUN).to_dict()
    shards = [api.run(catalog, "logp", shard_spec=f"{k}/2", **RUN).to_dict() for k in (1, 2)]
    return full, shards


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(commands.merge)
    app.command()(commands.diff)
    return app


def _invoke(*args):
    return CliRunner().invoke(_app(), [str(a) for a in args])


def _table(report: dict) -> dict:
    return {(r["case_id"], r["check"]): (r["status"], r["metrics"]) for r in report["results"]}


def test_merged_shards_equal_the_unsharded_run(runs):
    full, shards = runs
    assert all(s["results"] for s in shards), "both shards hold cases"
    merged = merge(shards, ["s1.json", "s2.json"])
    assert _table(merged) == _table(full)  # same case ids, checks, statuses and metrics
    assert merged["summary"]["counts"] == full["summary"]["counts"]
    assert merged["summary"]["total"] == full["summary"]["total"]
    assert merged["summary"]["passed"] == full["summary"]["passed"]
    assert merged["summary"]["pass_rate"] == full["summary"]["pass_rate"]
    assert [m["source"] for m in merged["merged_from"]] == ["s1.json", "s2.json"]
    assert [m["shard"] for m in merged["merged_from"]] == ["1/2", "2/2"]
    assert "shard" not in merged["summary"]
    assert not diff(full, merged).regressed


def test_merge_refuses_overlapping_reports(runs):
    full, shards = runs
    with pytest.raises(UsageError, match=r"overlapping: .* appears in A.json and B.json"):
        merge([full, shards[0]], ["A.json", "B.json"])


@pytest.mark.parametrize(
    ("field", "value"), [("op_version", "2"), ("op", "log_softmax"), ("device", "cuda")]
)
def test_merge_refuses_mismatched_reports(runs, field, value):
    _, shards = runs
    other = copy.deepcopy(shards[1])
    other[field] = value
    with pytest.raises(UsageError, match=f"{field} differs: .* in A.json, '{value}' in B.json"):
        merge([shards[0], other], ["A.json", "B.json"])


def test_merge_refuses_another_spec_or_schema(runs):
    a, b = copy.deepcopy(runs[1])
    a["spec_digest"], b["summary"]["spec_digest"] = "a" * 64, "b" * 64
    with pytest.raises(UsageError, match="different specs .* in A.json, .* in B.json"):
        merge([a, b], ["A.json", "B.json"])
    b["summary"]["spec_digest"] = "a" * 64
    assert merge([a, b])["spec_digest"] == "a" * 64
    a["plan_digest"], b["plan_digest"] = "p1", "p2"
    with pytest.raises(UsageError, match="different run parameters"):
        merge([a, b], ["A.json", "B.json"])
    b["plan_digest"] = "p1"
    b["schema_version"] = 3
    with pytest.raises(UsageError, match="B.json: schema_version 3 is not supported"):
        merge([a, b], ["A.json", "B.json"])


def schema_1(report: dict) -> dict:
    """``report`` as kernelcheck wrote it before schema 2: no ``plots`` in its results."""
    old = copy.deepcopy(report)
    old["schema_version"] = 1
    for r in old["results"]:
        del r["plots"]
    return old


def test_schema_1_reports_still_load_merge_and_diff(runs, tmp_path):
    from kernelcheck.results import CheckResult

    full, (a, b) = runs
    assert full["schema_version"] == 2 and any(r["plots"] for r in full["results"])
    assert CheckResult.from_dict(schema_1(full)["results"][0]).plots == {}
    merged = merge([schema_1(a), b])  # an old shard beside a new one
    assert merged["schema_version"] == 2
    assert _table(merged) == _table(full)
    assert not diff(schema_1(full), full).regressed and not diff(full, schema_1(full)).regressed
    old = tmp_path / "old.json"
    old.write_text(json.dumps(schema_1(a)))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(b))
    result = _invoke("merge", "-o", tmp_path / "all.json", old, new)
    assert result.exit_code == 0, result.output
    assert _invoke("diff", old, old).exit_code == 0


def test_merge_combines_not_run_and_interrupted(runs):
    _, shards = runs
    a, b = copy.deepcopy(shards)
    b["summary"]["interrupted"] = "SIGTERM"
    b["summary"]["not_run"] = ["torch-bf16-2x4x257"]
    merged = merge([a, b], ["A.json", "B.json"])
    assert merged["summary"]["interrupted"] == "B.json: SIGTERM"
    assert merged["summary"]["not_run"] == ["torch-bf16-2x4x257"]
    assert merged["summary"]["passed"] is False


def test_diff_catches_a_metric_regression_and_a_dropped_case(runs):
    full, _ = runs
    new = copy.deepcopy(full)
    bumped = next(r for r in new["results"] if r["check"] == "forward_accuracy")
    bumped["metrics"]["max_abs"] *= 3
    dropped, dropped_cand = new["results"][-1]["case_id"], new["results"][-1]["candidate"]
    new["summary"]["unavailable_candidates"] = {dropped_cand: "library missing"}
    new["results"] = [r for r in new["results"] if r["case_id"] != dropped]
    flipped = new["results"][2]
    flipped["status"], flipped["message"] = "fail", "injected"

    d = diff(full, new)
    assert d.regressed
    assert [(m.case_id, m.check, m.metric) for m in d.metric_regressions] == [
        (bumped["case_id"], "forward_accuracy", "max_abs")
    ]
    assert d.disappeared_cases == [dropped]
    assert {c.case_id for c in d.disappeared} == {dropped}
    assert f"candidate {dropped_cand} did not run in the new report: library missing" in d.notes
    assert [(c.case_id, c.check, c.before, c.after) for c in d.new_failures] == [
        (flipped["case_id"], flipped["check"], "pass", "fail")
    ]
    text = render_diff(d)
    assert text.startswith("kernelcheck diff: REGRESSED")
    assert f"{dropped}: the whole case" in text
    assert "max_abs" in text and "injected" in text
    assert "REGRESSED" in render_diff_markdown(d)
    # the other way round: the fixed failure is a new pass, the dropped case appeared
    back = diff(new, full)
    assert [c.check for c in back.new_passes] == [flipped["check"]]
    assert {c.case_id for c in back.appeared} == {dropped}


def test_diff_factor_and_floor(runs):
    full, _ = runs
    new = copy.deepcopy(full)
    r = next(r for r in new["results"] if r["check"] == "forward_accuracy")
    r["metrics"]["max_abs"] *= 3
    assert diff(full, new, factor=4.0).metric_regressions == []
    assert diff(full, new, metrics=("mean_abs",)).metric_regressions == []
    tiny_old, tiny_new = copy.deepcopy(full), copy.deepcopy(full)
    tiny_old["results"][0]["metrics"]["max_abs"] = 0.0
    tiny_new["results"][0]["metrics"]["max_abs"] = 1e-12  # below the floor: noise
    assert not diff(tiny_old, tiny_new).regressed
    newly_skipped = copy.deepcopy(full)
    newly_skipped["results"][0]["status"] = "skip"
    assert [c.before for c in diff(full, newly_skipped).newly_skipped] == ["pass"]


def test_cli_merge_and_diff_exit_codes(runs, tmp_path):
    full, shards = runs
    paths = []
    for i, rep in enumerate([full, *shards]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(rep))
    base, s1, s2 = paths
    merged = tmp_path / "ALL.json"

    res = _invoke("merge", "-o", merged, s1, s2)
    assert res.exit_code == 0, res.output
    assert _table(json.loads(merged.read_text())) == _table(full)

    assert _invoke("diff", base, merged).exit_code == 0
    res = _invoke("diff", base, merged, "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["regressed"] is False

    worse = copy.deepcopy(full)
    worse["results"][0]["metrics"]["max_abs"] *= 3
    worse_path = tmp_path / "worse.json"
    worse_path.write_text(json.dumps(worse))
    res = _invoke("diff", base, worse_path)
    assert res.exit_code == 1
    assert "Metric regressions (1)" in res.stdout
    assert _invoke("diff", base, worse_path, "--factor", "4").exit_code == 0
    assert _invoke("diff", base, worse_path, "--metrics", "ratio").exit_code == 0
    res = _invoke("diff", base, worse_path, "--format", "markdown")
    assert res.exit_code == 1 and res.stdout.startswith("### kernelcheck diff")


def test_cli_usage_errors_are_one_line_exit_2(runs, tmp_path):
    full, _ = runs
    good = tmp_path / "good.json"
    good.write_text(json.dumps(full))
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    cases = [
        (("merge", "-o", tmp_path / "o.json", good, good), "overlapping"),
        (("merge", "-o", tmp_path / "o.json", tmp_path / "missing.json"), "no such file"),
        (("merge", "-o", "/dev/null/nodir/o.json", good), "--output: cannot make folder"),
        (("diff", good, junk), "invalid JSON"),
        (("diff", other, good), "not a kernelcheck JSON report"),
        (("diff", good, good, "--format", "xml"), "unknown format"),
        (("diff", good, good, "--factor", "0.5"), "--factor"),
    ]
    for args, why in cases:
        res = _invoke(*args)
        assert res.exit_code == 2, (args, res.output)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kernelcheck: error: "), res.stderr
        assert why in lines[0]
    assert not (tmp_path / "o.json").exists()


def test_fingerprints_for_the_run_to_record(catalog, tmp_path):
    addon = tmp_path / "addon.toml"
    addon.write_text(
        'op = "logp"\n[[candidate]]\nname = "x"\ncallable = "m:f"\ndevices = ["cpu"]\n'
    )
    with_addon = load_catalog([addon])
    assert op_spec_digest(catalog.ops["logp"]) == op_spec_digest(load_catalog().ops["logp"])
    assert op_spec_digest(catalog.ops["logp"]) != op_spec_digest(with_addon.ops["logp"])
    override = tmp_path / "override.toml"
    override.write_text("[override.logp.checks.determinism]\nrepeats = 5\n")
    overridden = load_catalog([override]).ops["logp"]
    assert op_spec_digest(catalog.ops["logp"]) != op_spec_digest(overridden)
    p0 = api.plan(catalog, "logp", device="cpu", seeds=[0])
    p1 = api.plan(catalog, "logp", device="cpu", seeds=[1])
    assert plan_digest(p0.cases) == plan_digest(list(reversed(p0.cases)))
    assert plan_digest(p0.cases) != plan_digest(p1.cases)
    assert plan_digest(p0.cases) != plan_digest(p0.cases, check_grad=False)
