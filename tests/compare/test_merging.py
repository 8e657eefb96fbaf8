"""merge: shards merge back into the unsharded run; mismatched inputs are refused."""

from __future__ import annotations

import copy

import pytest

from kernelcheck.compare import diff, merge
from kernelcheck.errors import UsageError
from tests.conftest import result_table


@pytest.mark.slow
def test_merged_shards_equal_the_unsharded_run(shard_runs):
    full, shards = shard_runs
    assert all(s["results"] for s in shards), "both shards hold cases"
    merged = merge(shards, ["s1.json", "s2.json"])
    assert result_table(merged) == result_table(full)  # same case ids, checks, statuses and metrics
    assert merged["summary"]["counts"] == full["summary"]["counts"]
    assert merged["summary"]["total"] == full["summary"]["total"]
    assert merged["summary"]["passed"] == full["summary"]["passed"]
    assert merged["summary"]["pass_rate"] == full["summary"]["pass_rate"]
    assert [m["source"] for m in merged["merged_from"]] == ["s1.json", "s2.json"]
    assert [m["shard"] for m in merged["merged_from"]] == ["1/2", "2/2"]
    assert "shard" not in merged["summary"]
    assert not diff(full, merged).regressed


def test_merge_refuses_overlapping_reports(shard_runs):
    full, shards = shard_runs
    with pytest.raises(UsageError, match=r"overlapping: .* appears in A.json and B.json"):
        merge([full, shards[0]], ["A.json", "B.json"])


@pytest.mark.parametrize(
    ("field", "value"), [("op_version", "2"), ("op", "log_softmax"), ("device", "cuda")]
)
def test_merge_refuses_mismatched_reports(shard_runs, field, value):
    _, shards = shard_runs
    other = copy.deepcopy(shards[1])
    other[field] = value
    with pytest.raises(UsageError, match=f"{field} differs: .* in A.json, '{value}' in B.json"):
        merge([shards[0], other], ["A.json", "B.json"])


def test_merge_refuses_another_spec_or_schema(shard_runs):
    a, b = copy.deepcopy(shard_runs[1])
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


def test_merge_combines_not_run_and_interrupted(shard_runs):
    _, shards = shard_runs
    a, b = copy.deepcopy(shards)
    b["summary"]["interrupted"] = "SIGTERM"
    b["summary"]["not_run"] = ["torch-bf16-2x4x257"]
    merged = merge([a, b], ["A.json", "B.json"])
    assert merged["summary"]["interrupted"] == "B.json: SIGTERM"
    assert merged["summary"]["not_run"] == ["torch-bf16-2x4x257"]
    assert merged["summary"]["passed"] is False
