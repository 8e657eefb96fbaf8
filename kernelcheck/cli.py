"""The ``kernelcheck`` command: a thin typer shell over :mod:`kernelcheck.api`.

Exit codes: 0 every check that ran passed; 1 a check failed or a candidate errored (a
native candidate whose library is missing on its own device included, unless
``--allow-missing``); 2 a usage or spec error, or a requested device or candidate is
unavailable; 5 nothing was checked (every result a skip, or no results: pytest's "no
tests collected"), since a run that tested nothing is not green.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernelcheck.commands.common import STATE, stdout_console
from kernelcheck.commands.common import catalog as _catalog
from kernelcheck.commands.common import fail as _fail
from kernelcheck.commands.common import parse_attrs as _parse_attrs
from kernelcheck.commands.common import parse_shape as _parse_shape
from kernelcheck.commands.options import (
    AttrOpt,
    BaselineFactorOpt,
    BatchOpt,
    CandidateOpt,
    DeviceOpt,
    DtypeOpt,
    SeqOpt,
    ShapeOpt,
    SpecOpt,
    VocabOpt,
    check_at_least,
    check_baseline_factor,
)
from kernelcheck.commands.running import EXIT_FOR_SIGNAL
from kernelcheck.commands.verdict import (
    baseline_diff,
    exit_code,
    read_baseline,
    render,
    shrink_and_notes,
    write_step_summary,
)
from kernelcheck.compare import DEFAULT_FACTOR
from kernelcheck.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_USAGE,
    Interrupted,
    UsageError,
)
from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap

app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,  # click's plain help: readable at 80 columns and in logs
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Verify compute kernels against a float64 gold: accuracy, precision, "
    "bitwise batch invariance.",
)


@app.callback()
def main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    STATE["debug"] = debug


@app.command()
def run(
    op: Annotated[str, typer.Option("--op", help="Operator to check, e.g. logp.", metavar="NAME")],
    spec: SpecOpt = None,
    candidate: CandidateOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    batch: BatchOpt = None,
    seq: SeqOpt = None,
    vocab: VocabOpt = None,
    shape: ShapeOpt = None,
    attr: AttrOpt = None,
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep/--no-sweep",
            help="Also check each attribute's sweep values (on the grid's first shape and "
            "its longest row up to 2^14).",
        ),
    ] = True,
    check_grad: Annotated[
        bool, typer.Option("--check-grad/--no-check-grad", help="Run the backward checks.")
    ] = True,
    allow_missing: Annotated[
        Optional[list[str]],
        typer.Option(
            "--allow-missing",
            help="Native candidate whose missing library is no error (repeatable).",
            metavar="NAME",
        ),
    ] = None,
    checks: Annotated[
        Optional[str], typer.Option("--checks", help="Comma-separated check names.", metavar="LIST")
    ] = None,
    seed: Annotated[
        Optional[int],
        typer.Option("--seed", help="Run this one seed instead of the spec's.", metavar="N"),
    ] = None,
    distributions: Annotated[
        Optional[str],
        typer.Option(
            "--distributions", help="Comma-separated input distributions.", metavar="LIST"
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table, plain, markdown or json.", metavar="FORMAT")
    ] = "table",
    json_out: Annotated[
        Optional[Path],
        typer.Option(
            "--json-out", help="Write the JSON report here, as results complete.", metavar="FILE"
        ),
    ] = None,
    junit_out: Annotated[
        Optional[Path], typer.Option("--junit-out", help="Write JUnit XML here.", metavar="FILE")
    ] = None,
    html_out: Annotated[
        Optional[Path],
        typer.Option(
            "--html-out",
            help="Write the HTML report here (needs the 'report' extra).",
            metavar="FILE",
        ),
    ] = None,
    shard: Annotated[
        Optional[str],
        typer.Option("--shard", help="Run shard K of N (1-based): 2/4.", metavar="K/N"),
    ] = None,
    isolate: Annotated[
        Optional[bool],
        typer.Option(
            "--isolate/--no-isolate",
            help="Run each candidate in its own child process (default: isolated).",
        ),
    ] = None,
    timeout: Annotated[
        Optional[float],
        typer.Option(
            "--timeout",
            help="Per-case timeout in seconds (default: the spec's).",
            metavar="SECONDS",
        ),
    ] = None,
    threads: Annotated[
        Optional[int],
        typer.Option(
            "--threads",
            help="CPU threads per case (default: its share of the cores side by side, "
            "all of them alone); repros pin it.",
            metavar="N",
        ),
    ] = None,
    baseline: Annotated[
        Optional[Path],
        typer.Option(
            "--baseline",
            help="Diff against this JSON report; exit 1 on a regression.",
            metavar="FILE",
        ),
    ] = None,
    baseline_factor: BaselineFactorOpt = DEFAULT_FACTOR,
    sanitize: Annotated[
        Optional[str],
        typer.Option(
            "--sanitize",
            help="Run the CUDA workers under compute-sanitizer: memcheck, racecheck, "
            "initcheck or synccheck (a memory_safety result per case; smallest shape).",
            metavar="TOOL",
        ),
    ] = None,
    shrink: Annotated[
        bool, typer.Option("--shrink/--no-shrink", help="Shrink failing cases to a minimal repro.")
    ] = True,
    shrink_budget: Annotated[
        float,
        typer.Option(
            "--shrink-budget",
            help="Seconds for shrinking, all failures together.",
            metavar="SECONDS",
        ),
    ] = 60.0,
) -> None:
    """Run the checks of an op's candidates over its dtype x shape grid."""
    from kernelcheck import api
    from kernelcheck.commands.outputs import Outputs
    from kernelcheck.commands.running import run_plan
    from kernelcheck.report import FORMATS

    outputs = Outputs(json_out, junit_out, html_out)
    try:
        base = read_baseline(baseline, op)
        check_baseline_factor(baseline_factor)
        check_at_least("--shrink-budget", shrink_budget, 0)
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
        outputs.check()
        catalog = _catalog(spec)
        plan = api.plan(
            catalog,
            op,
            candidate_names=candidate,
            device=device,
            dtype_names=dtype,
            shape=_parse_shape(batch, seq, vocab, shape),
            attributes=_parse_attrs(attr),
            check_names=checks,
            check_grad=check_grad,
            seeds=[seed] if seed is not None else None,
            distributions=distributions,
            shard_spec=shard,
            isolate=isolate,
            timeout_s=timeout,
            allow_missing=allow_missing,
            sweeps=sweep,
            sanitize=sanitize,
            threads=threads,
        )
    except UsageError as exc:
        _fail(str(exc))
    writer = outputs.json_writer()
    report = run_plan(plan, writer)
    notes = shrink_and_notes(catalog, plan, report, shrink_budget if shrink else None)
    written = outputs.write(report, writer, base, baseline_factor)
    changes = baseline_diff(base, report, baseline_factor)
    render(fmt, report, plan, notes, stdout_console(), changes, unwritten=not written)
    write_step_summary(report, changes)
    if report.interrupted:
        typer.echo(
            f"kernelcheck: interrupted by {report.interrupted}; "
            f"{len(report.not_run)} case(s) did not run",
            err=True,
        )
        raise typer.Exit(EXIT_FOR_SIGNAL.get(report.interrupted, EXIT_SIGINT))
    regressed = changes is not None and changes.regressed
    raise typer.Exit(exit_code(report, regressed or not written))


@app.command("list")
def list_(
    spec: SpecOpt = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table or json.", metavar="FORMAT")
    ] = "table",
) -> None:
    """Ops, candidates (and whether each can run here, and why not) and checks."""
    from kernelcheck import api
    from kernelcheck.commands.describe import render_list

    try:
        info = api.describe(_catalog(spec))
    except UsageError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(info, indent=2))
        return
    render_list(info, stdout_console())


@app.command()
def doctor(
    fmt: Annotated[
        str, typer.Option("--format", help="table or json.", metavar="FORMAT")
    ] = "table",
) -> None:
    """torch, the devices (with the reason one is missing), native libraries, the NPU stack."""
    from kernelcheck import api
    from kernelcheck.commands.describe import render_doctor

    info = api.doctor()
    if fmt == "json":
        typer.echo(json.dumps(info, indent=2))
        return
    render_doctor(info, stdout_console())


def _register_commands() -> None:
    from kernelcheck.commands.bench import bench
    from kernelcheck.commands.compare import diff, merge
    from kernelcheck.commands.report import report

    app.command()(bench)
    app.command()(merge)
    app.command()(diff)
    app.command()(report)


_register_commands()


_EXPECTED = (("valid integer", "an integer"), ("valid number", "a number"))


def _plain_usage(exc) -> str:
    """click's usage error in kernelcheck's words: ``--seed: expected an integer, got 'abc'``
    (typer words a bad value in pydantic's terms)."""
    text = exc.format_message()
    try:
        flag = max(exc.param.opts, key=len)
    except (AttributeError, TypeError, ValueError):
        return text
    for phrase, expected in _EXPECTED:
        if phrase in text:
            got = ""
            errors = getattr(exc.__cause__, "errors", None)
            if callable(errors) and errors():
                got = f", got {errors()[0].get('input')!r}"
            return f"{flag}: expected {expected}{got}"
    return text if text.startswith(flag) else f"{flag}: {text}"


def entry(argv: list[str] | None = None) -> None:
    """Console-script entry: one line and exit 2 for usage errors; a traceback only with --debug."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    keep_chunks_in_heap()  # the command's own process: chunk temporaries without page faults
    try:
        code = app(args=args, prog_name="kernelcheck", standalone_mode=False)
    except UsageError as exc:
        if debug:
            traceback.print_exc()
        typer.echo(f"kernelcheck: error: {exc}", err=True)
        code = EXIT_USAGE
    except Interrupted as exc:
        typer.echo(f"kernelcheck: interrupted by {exc.signame}", err=True)
        code = EXIT_FOR_SIGNAL.get(exc.signame, EXIT_SIGINT)
    except Exception as exc:
        # click's (typer vendors it) usage errors: a bad flag, a bad value, a missing option
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None):
            typer.echo(exc.ctx.get_help())
            sys.exit(EXIT_USAGE)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            if debug:
                traceback.print_exc()
            typer.echo(f"kernelcheck: error: {_plain_usage(exc)}", err=True)
            sys.exit(exc.exit_code or EXIT_USAGE)
        if type(exc).__name__ == "Abort":
            sys.exit(EXIT_SIGINT)
        if debug:
            raise
        typer.echo(
            f"kernelcheck: internal error: {type(exc).__name__}: {exc} (rerun with --debug)",
            err=True,
        )
        code = EXIT_FAILED
    sys.exit(code if isinstance(code, int) else EXIT_OK)
