"""The merge and diff commands: exit codes, one-line usage errors, old schemas."""

from __future__ import annotations

import copy
import json

import typer
from typer.testing import CliRunner

from kernelcheck.commands import compare as commands
from kernelcheck.compare import diff, merge
from tests.conftest import result_table


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command()(commands.merge)
    app.command()(commands.diff)
    return app


def _invoke(*args):
    return CliRunner().invoke(_app(), [str(a) for a in args])


def schema_1(report: dict) -> dict:
    """``report`` as kernelcheck wrote it before schema 2: no ``plots`` in its results."""
    old = copy.deepcopy(report)
    old["schema_version"] = 1
    for r in old["results"]:
        del r["plots"]
    return old


def test_schema_1_reports_still_load_merge_and_diff(shard_runs, tmp_path):
    from kernelcheck.results import CheckResult

    full, (a, b) = shard_runs
    assert full["schema_version"] == 2 and any(r["plots"] for r in full["results"])
    assert CheckResult.from_dict(schema_1(full)["results"][0]).plots == {}
    merged = merge([schema_1(a), b])  # an old shard beside a new one
    assert merged["schema_version"] == 2
    assert result_table(merged) == result_table(full)
    assert not diff(schema_1(full), full).regressed and not diff(full, schema_1(full)).regressed
    old = tmp_path / "old.json"
    old.write_text(json.dumps(schema_1(a)))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(b))
    result = _invoke("merge", "-o", tmp_path / "all.json", old, new)
    assert result.exit_code == 0, result.output
    assert _invoke("diff", old, old).exit_code == 0


def test_cli_merge_and_diff_exit_codes(shard_runs, tmp_path):
    full, shards = shard_runs
    paths = []
    for i, rep in enumerate([full, *shards]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(rep))
    base, s1, s2 = paths
    merged = tmp_path / "ALL.json"

    res = _invoke("merge", "-o", merged, s1, s2)
    assert res.exit_code == 0, res.output
    assert result_table(json.loads(merged.read_text())) == result_table(full)

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


def test_cli_usage_errors_are_one_line_exit_2(shard_runs, tmp_path):
    full, _ = shard_runs
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
