"""Renderers of a :class:`~kernelcheck.bench.BenchReport`: a rich table and JSON."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelcheck.bench.measure import UNSTABLE_SPREAD, BenchReport, BenchResult
from kernelcheck.wrap import fill, log_width

# The keys of one JSON result: the ten, then what explains them.
RESULT_KEYS = (
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
    "op",
    "implementation",
    "min_s",
    "reps",
    "baseline",
    "speedup_vs_baseline",
    "error",
)
TOP_KEYS = ("device", "peak_bandwidth_bytes_per_s", "peak_source", "environment", "results")


def _shape(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v * 1e3:.3f}"


def result_dict(r: BenchResult) -> dict:
    d = r.to_dict()
    return {k: d[k] for k in RESULT_KEYS}


def bench_to_dict(report: BenchReport) -> dict:
    env = dict(report.environment)
    env.setdefault("device_name", report.device_name)
    env["bench_settings"] = dict(report.settings)
    return {
        "device": report.device,
        "peak_bandwidth_bytes_per_s": report.peak_bandwidth_bytes_per_s,
        "peak_source": report.peak_source,
        "environment": env,
        "results": [result_dict(r) for r in report.results],
    }


def bench_to_json(report: BenchReport) -> str:
    return json.dumps(bench_to_dict(report), indent=2, default=str)


def render_bench_table(report: BenchReport, console: Console) -> None:
    """One table of every candidate x dtype x shape, then the peak's source and any errors.
    Names and errors are data, printed literally (never as markup or emoji codes); not
    on a terminal, every line is wrapped at 80 columns."""
    console.print(Text(f"{report.op} bench on {report.device} ({report.device_name})", "bold"))
    console.print(_bench_table(report))
    if report.peak_bandwidth_bytes_per_s:
        peak = f"{report.peak_bandwidth_bytes_per_s / 1e9:.1f} GB/s"
    else:
        peak = "unknown"
    width = log_width(console.is_terminal, console.width)
    lines = [
        (f"peak bandwidth: {peak} ({report.peak_source})", ""),
        (
            "bytes = each input read once + each output written once; GB/s = bytes / median; "
            f"speed = baseline median / median (baseline: {report.settings.get('baseline', '')})",
            "",
        ),
    ]
    lines += [
        (f"error {r.candidate} {r.dtype} {_shape(r.shape)}: {r.error}", "bold magenta")
        for r in report.results
        if r.error
    ]
    lines += [(f"warning {line}", "bold yellow") for line in spread_warnings(report)]
    for line, style in lines:
        text = fill(line, width)
        head = text.split(" ", 1)[0] if style else ""
        console.print(Text.assemble((head, style), text[len(head) :]), soft_wrap=True)


def _bench_table(report: BenchReport) -> Table:
    baselines = sorted({r.baseline for r in report.results if r.baseline})
    speed_col = f"vs {baselines[0]}" if len(baselines) == 1 else "vs base"  # the speed-up
    # 80 columns hold it: no vertical rules, a cell folds rather than loses digits
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for col in ("candidate", "dtype", "shape"):
        table.add_column(col, overflow="fold")
    for col in ("median ms", "p10-p90 ms", "GB/s", "% peak", speed_col, "reps"):
        table.add_column(col, justify="right", overflow="fold")
    for r in report.results:
        cells = [Text(r.candidate), r.dtype, _shape(r.shape)]
        if r.error:
            table.add_row(*cells, Text("error", style="bold magenta"), "", "", "", "", "")
            continue
        speed = ""
        if r.speedup_vs_baseline is not None:
            speed = f"{r.speedup_vs_baseline:.2f}x"
            if len(baselines) > 1:
                speed += f" ({r.baseline})"
        table.add_row(
            *cells,
            _ms(r.median_s),
            f"{_ms(r.p10_s)}-{_ms(r.p90_s)}",
            "" if r.gbps is None else f"{r.gbps:.2f}",
            "" if r.fraction_of_peak is None else f"{100 * r.fraction_of_peak:.1f}%",
            Text(speed),
            str(r.reps),
        )
    return table


def spread_warnings(report: BenchReport) -> list[str]:
    """Timings whose p90/p10 exceeds 2: too noisy to compare (another load, turbo, a flush)."""
    out = []
    for r in report.results:
        if r.error or not r.p10_s or not r.p90_s:
            continue
        if r.p90_s / r.p10_s > UNSTABLE_SPREAD:
            out.append(
                f"{r.candidate} {r.dtype} {_shape(r.shape)}: p90/p10 = {r.p90_s / r.p10_s:.1f} "
                f"> {UNSTABLE_SPREAD:g}: noisy timing, rerun on a quiet machine or with more --reps"
            )
    return out
