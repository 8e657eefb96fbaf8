"""``kernelcheck bench``: the library, its renderers and the command, on tiny shapes.

Timings are never compared with thresholds here: only their presence and sanity.
"""

from __future__ import annotations

import json

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from kernelcheck import bench as lib
from kernelcheck.bench import RESULT_KEYS, TOP_KEYS, bench_to_json, render_bench_table
from kernelcheck.errors import UsageError
from tests.conftest import with_candidate

TINY = {"batch": 4, "vocab": 300}
FAST = {"warmup": 1, "reps": 3, "min_time_s": 0.0, "max_reps": 3}
ISSUE_KEYS = (
    "candidate",
    "device",
    "dtype",
    "shape",
    "median_s",
    "p10_s",
    "p90_s",
    "bytes",
    "gbps",
    "fraction_of_peak",
)


def raising_logp(logits, target):
    """A candidate that always fails: bench reports it, it does not crash."""
    raise RuntimeError("kernel launch failed")


@pytest.fixture(scope="module")
def report(catalog):
    names = ["eager", "torch", "cpu"] if _cpu_runs(catalog) else ["eager", "torch"]
    return lib.bench(catalog, "logp", names, "cpu", "fp32,bf16", TINY, **FAST)


def _cpu_runs(catalog) -> bool:
    from kernelcheck import candidates

    return candidates.probe(catalog.ops["logp"].candidates["cpu"], "cpu") is None


def test_results_have_every_field_and_positive_numbers(report):
    assert report.device == "cpu"
    assert len(report.results) == 2 * len({r.candidate for r in report.results})
    for r in report.results:
        assert r.error is None
        assert r.dtype in ("fp32", "bf16")
        assert r.shape == TINY
        assert r.reps >= 3
        assert 0 < r.min_s <= r.p10_s <= r.median_s <= r.p90_s
        assert r.gbps > 0 and r.fraction_of_peak > 0
        assert r.implementation and r.baseline == "eager" and r.speedup_vs_baseline > 0
        itemsize = 4 if r.dtype == "fp32" else 2
        # logits read once + int64 targets + fp32 output
        assert r.bytes == 4 * 300 * itemsize + 4 * 8 + 4 * 4
    eager_rows = [r for r in report.results if r.candidate == "eager"]
    assert eager_rows and all(r.speedup_vs_baseline == 1.0 for r in eager_rows)


def test_json_has_exactly_the_documented_keys(report):
    data = json.loads(bench_to_json(report))
    assert set(data) == set(TOP_KEYS)
    assert data["device"] == "cpu"
    assert data["peak_bandwidth_bytes_per_s"] > 0 and data["peak_source"]
    assert data["environment"]["torch"]
    assert len(data["results"]) == len(report.results)
    for r in data["results"]:
        assert set(r) == set(RESULT_KEYS)
        assert set(ISSUE_KEYS) <= set(r)
        assert r["median_s"] > 0 and r["gbps"] > 0


def test_table_renders(report):
    console = Console(record=True, width=200)
    render_bench_table(report, console)
    text = console.export_text()
    assert "vs eager" in text and "peak bandwidth" in text
    assert "measured once: streaming read" in text and "runs spread" in text


def test_cpu_peak_bandwidth_is_measured():
    bw, source = lib.peak_bandwidth("cpu")
    assert bw is not None and bw > 0
    assert source.startswith("measured once: streaming read") and "runs spread" in source
    assert lib.peak_bandwidth("cpu") == (bw, source)  # cached per process


def test_small_streaming_read_measures_something():
    bw, nbytes = lib.measure_cpu_read_bandwidth(nbytes=4 * 2**20, runs=1)
    assert bw > 0 and nbytes == 4 * 2**20


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H200 NVL", 4.8e12),
        ("NVIDIA GH200 480GB", 4.0e12),
        ("NVIDIA H20", 4.0e12),
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA A100-SXM4-80GB", 2.039e12),
        ("NVIDIA A100-SXM4-40GB", 1.555e12),
        ("NVIDIA A10G", 0.6e12),
        ("NVIDIA L40S", 0.864e12),
        ("NVIDIA L4", 0.3e12),
        ("Some Future GPU", None),
    ],
)
def test_gpu_peak_table(name, expected):
    bw, source = lib.gpu_peak_from_name(name)
    assert bw == expected
    assert name in source


def test_npu_peak_table():
    assert lib.npu_peak_from_name("Ascend910B3")[0] == 1.6e12
    assert lib.npu_peak_from_name("Ascend310P")[0] is None


def test_unknown_candidate_is_a_usage_error(catalog):
    with pytest.raises(UsageError, match="unknown candidate 'nope'"):
        lib.bench(catalog, "logp", ["nope"], "cpu", "fp32", TINY, **FAST)


def test_bad_reps_is_a_usage_error(catalog):
    with pytest.raises(UsageError, match="--reps"):
        lib.bench(catalog, "logp", ["torch"], "cpu", "fp32", TINY, warmup=0, reps=0)


def test_a_raising_candidate_is_an_error_entry(catalog):
    cat = with_candidate(catalog, "raises", "tests.test_bench:raising_logp")
    report = lib.bench(cat, "logp", ["torch", "raises"], "cpu", "fp32", TINY, **FAST)
    by_name = {r.candidate: r for r in report.results}
    assert by_name["torch"].error is None and by_name["torch"].median_s > 0
    bad = by_name["raises"]
    assert "RuntimeError: kernel launch failed" in bad.error
    assert bad.median_s is None and bad.gbps is None and bad.speedup_vs_baseline is None
    assert report.errored
    data = json.loads(bench_to_json(report))
    assert {r["candidate"]: r["error"] for r in data["results"]}["raises"] == bad.error
    console = Console(record=True, width=200)
    render_bench_table(report, console)
    assert "kernel launch failed" in console.export_text()


def test_a_candidate_promised_in_range_ids_is_timed_on_them():
    """in_range = ["target"]: bench draws no out-of-range target, for it or beside it."""
    from kernelcheck.spec import load_catalog
    from tests.conftest import FIXTURES

    cat = load_catalog([FIXTURES / "in_range.toml"])
    report = lib.bench(cat, "logp", ["torch", "masked_ids"], "cpu", "fp32", TINY, **FAST)
    assert {r.candidate: r.error for r in report.results} == {"torch": None, "masked_ids": None}


def test_baseline_is_the_fastest_without_torch(catalog):
    cat = with_candidate(catalog, "other", "tests.fixtures.plain_torch:logp")
    report = lib.bench(cat, "logp", ["other"], "cpu", "fp32", TINY, **FAST)
    (r,) = report.results
    assert r.baseline == "other" and r.speedup_vs_baseline == 1.0


def _app():
    from kernelcheck.commands.bench import bench

    app = typer.Typer()
    app.command()(bench)
    app.command("noop")(lambda: None)  # two commands: typer keeps the subcommand name
    return app


def test_command_json_and_exit_codes(tmp_path):
    out = tmp_path / "bench.json"
    args = ["bench", "--op", "logp", "--device", "cpu", "--candidate", "torch"]
    args += ["--dtype", "fp32", "--batch", "2", "--vocab", "64", "--reps", "2", "--warmup", "0"]
    res = CliRunner().invoke(_app(), [*args, "--format", "json", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data) == set(TOP_KEYS)
    assert json.loads(out.read_text()) == data
    assert data["results"][0]["shape"] == {"batch": 2, "vocab": 64}


def test_command_usage_error_is_one_line_and_exit_2():
    args = ["bench", "--op", "logp", "--device", "cpu", "--candidate", "nope"]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 2
    assert res.stderr.strip().startswith("kernelcheck: error: unknown candidate 'nope'")
    assert len(res.stderr.strip().splitlines()) == 1
    res = CliRunner().invoke(_app(), ["bench", "--op", "logp", "--format", "xml"])
    assert res.exit_code == 2 and "unknown format 'xml'" in res.stderr


def test_eager_is_the_default_baseline_and_bench_only(catalog):
    """The fair baseline is plain eager PyTorch; `run` leaves it out unless named."""
    from kernelcheck import api

    plan = api.plan(catalog, "logp", device="cpu", dtype_names="fp32", shape=TINY)
    assert "eager" not in {c.candidate for c in plan.cases}
    named = api.plan(catalog, "logp", ["eager"], device="cpu", dtype_names="fp32", shape=TINY)
    assert {c.candidate for c in named.cases} == {"eager"}
    rep = lib.bench(catalog, "logp", None, "cpu", "fp32", TINY, **FAST)
    assert "eager" in {r.candidate for r in rep.results}
    assert {r.baseline for r in rep.results} == {"eager"}


def test_noisy_timings_are_warned_about(report):
    from dataclasses import replace

    from kernelcheck.bench import spread_warnings

    noisy = replace(report, results=[replace(report.results[0], p10_s=1.0, p90_s=2.5)])
    (line,) = spread_warnings(noisy)
    assert "p90/p10 = 2.5 > 2" in line
    assert not spread_warnings(
        replace(report, results=[replace(report.results[0], p10_s=1.0, p90_s=1.5)])
    )
