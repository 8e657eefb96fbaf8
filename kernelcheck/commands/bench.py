"""``kernelcheck bench``: time an op's candidates side by side (see :mod:`kernelcheck.bench`).

Registered in :mod:`kernelcheck.cli`; shared CLI helpers come from
:mod:`kernelcheck.commands.common`, never from ``cli.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelcheck.commands.options import (
    BatchOpt,
    CandidateOpt,
    DeviceOpt,
    DtypeOpt,
    SeqOpt,
    ShapeOpt,
    SpecOpt,
    VocabOpt,
)

BENCH_FORMATS = ("table", "json")


def bench(
    op: Annotated[str, typer.Option("--op", help="Operator to time, e.g. logp.", metavar="NAME")],
    spec: SpecOpt = None,
    candidate: CandidateOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    batch: BatchOpt = None,
    seq: SeqOpt = None,
    vocab: VocabOpt = None,
    shape: ShapeOpt = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table or json.", metavar="FORMAT")
    ] = "table",
    reps: Annotated[
        int,
        typer.Option("--reps", help="At least this many timed calls per candidate.", metavar="N"),
    ] = 20,
    warmup: Annotated[
        int,
        typer.Option("--warmup", help="Untimed calls per candidate before timing.", metavar="N"),
    ] = 3,
    json_out: Annotated[
        Optional[Path],
        typer.Option("--json-out", help="Also write the JSON report here.", metavar="FILE"),
    ] = None,
) -> None:
    """Time candidates side by side: median and spread, GB/s and the fraction of peak."""
    from rich.console import Console
    from rich.text import Text

    from kernelcheck import bench as lib
    from kernelcheck.bench import bench_to_json, render_bench_table
    from kernelcheck.commands.common import catalog as _catalog
    from kernelcheck.commands.common import fail as _fail
    from kernelcheck.commands.common import parse_shape as _parse_shape
    from kernelcheck.commands.common import stdout_console
    from kernelcheck.errors import EXIT_FAILED, EXIT_OK, UsageError
    from kernelcheck.report.json_report import check_writable, write_atomic

    err = Console(stderr=True, emoji=False, highlight=False)
    progress = (lambda msg: err.print(Text(f"timing {msg}"))) if err.is_terminal else None
    try:
        if fmt not in BENCH_FORMATS:
            raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(BENCH_FORMATS)}")
        if json_out is not None and (why := check_writable(json_out)):
            raise UsageError(f"--json-out: {why}")
        report = lib.bench(
            _catalog(spec),
            op,
            candidate_names=candidate,
            device=device,
            dtype_names=dtype,
            shape=_parse_shape(batch, seq, vocab, shape),
            warmup=warmup,
            reps=reps,
            on_progress=progress,
        )
    except UsageError as exc:
        _fail(str(exc))
    text = bench_to_json(report)
    if json_out is not None:
        write_atomic(json_out, text + "\n")
    if fmt == "json":
        sys.stdout.write(text + "\n")
    else:
        render_bench_table(report, stdout_console())
    raise typer.Exit(EXIT_FAILED if report.errored else EXIT_OK)
