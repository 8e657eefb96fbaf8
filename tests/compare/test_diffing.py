"""diff: new failures, lost coverage and grown metrics gate CI."""

from __future__ import annotations

import copy

from kernelcheck.compare import diff, render_diff, render_diff_markdown


def test_diff_catches_a_metric_regression_and_a_dropped_case(shard_runs):
    full, _ = shard_runs
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


def test_diff_factor_and_floor(shard_runs):
    full, _ = shard_runs
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
