"""The ``kernelcheck`` command: a thin typer shell over :mod:`kernelcheck.api`.

Exit codes: 0 every check that ran passed; 1 a check failed or a candidate errored (a
native candidate whose library is missing on its own device included, unless
``--allow-missing``); 2 a usage or spec error, or a requested device or candidate is
unavailable; 5 nothing was checked (every result a skip, or no results: pytest's "no
tests collected"), since a run that tested nothing is not green.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from kernelcheck.commands.common import STATE
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
    check_baseline_factor,
)
from kernelcheck.commands.progress import CaseTicker
from kernelcheck.commands.verdict import exit_code, render, shrink_and_notes
from kernelcheck.compare.reports import DEFAULT_FACTOR
from kernelcheck.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    Interrupted,
    UsageError,
)
from kernelcheck.runner.allocator import keep_chunks_in_heap

app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,  # click's plain help: readable at 80 columns and in logs
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Verify compute kernels against a float64 gold: accuracy, precision, "
    "bitwise batch invariance.",
)


_EXIT_FOR_SIGNAL = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM}


def _stop_on_signals() -> None:
    """First SIGINT/SIGTERM: stop at once, keeping what completed. Second: exit at once."""
    count = {"n": 0}

    def handler(signum, frame):
        name = signal.Signals(signum).name
        count["n"] += 1
        if count["n"] > 1:
            os._exit(_EXIT_FOR_SIGNAL.get(name, EXIT_SIGINT))
        raise Interrupted(name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _width() -> int | None:
    """``COLUMNS`` when set; else the terminal's; a log or a pipe gets a wide table."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        return None if sys.stdout.isatty() else 160


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
            help="Also check each attribute's sweep values on the grid's first shape.",
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
    from kernelcheck import report as rep
    from kernelcheck.commands.report import html_out_problem, write_page
    from kernelcheck.compare import read_report
    from kernelcheck.report.json_report import JsonReportWriter, check_writable, write_atomic

    try:
        base = read_report(baseline) if baseline else None
        check_baseline_factor(baseline_factor)
        if fmt not in rep.FORMATS:
            raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(rep.FORMATS)}")
        for flag, path in (("--json-out", json_out), ("--junit-out", junit_out)):
            if path is not None and (why := check_writable(path)):
                raise UsageError(f"{flag}: {why}")
        if html_out is not None and (why := html_out_problem(html_out)):
            raise UsageError(why)
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
        )
    except UsageError as exc:
        _fail(str(exc))

    writer = JsonReportWriter(json_out) if json_out else None
    console = Console(stderr=True)
    ticker = CaseTicker(len(plan.cases), console)

    def on_result(res, report):
        if writer:
            writer.write(report)
        ticker.result(res)

    _stop_on_signals()
    try:
        report = api.execute(
            plan, on_result=on_result, on_case=ticker.start, on_case_done=ticker.done
        )
    finally:
        ticker.stop()
    _stop_on_signals()
    notes = shrink_and_notes(catalog, plan, report, shrink_budget if shrink else None)
    if writer:
        writer.write(report)
        if writer.error:
            typer.echo(f"kernelcheck: error: --json-out: {writer.error}", err=True)
    if junit_out:
        write_atomic(junit_out, rep.to_junit(report))
    if html_out:
        write_page(html_out, report.to_dict(), base, baseline_factor)
    render(fmt, report, plan, notes, Console(soft_wrap=False, width=_width()))
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with open(summary_path, "a") as fh:
            fh.write(rep.to_markdown(report) + "\n")
    regressed = False
    if base is not None:
        from kernelcheck.compare import diff as diff_reports
        from kernelcheck.compare import render_diff, render_diff_markdown

        try:
            changes = diff_reports(base, report.to_dict(), factor=baseline_factor)
        except UsageError as exc:
            _fail(str(exc))
        (sys.stderr if fmt == "json" else sys.stdout).write(render_diff(changes))
        regressed = changes.regressed
        if summary_path:
            with open(summary_path, "a") as fh:
                fh.write(render_diff_markdown(changes) + "\n")
    if report.interrupted:
        typer.echo(
            f"kernelcheck: interrupted by {report.interrupted}; "
            f"{len(report.not_run)} case(s) did not run",
            err=True,
        )
        raise typer.Exit(_EXIT_FOR_SIGNAL.get(report.interrupted, EXIT_SIGINT))
    raise typer.Exit(exit_code(report, regressed or bool(writer and writer.error)))


@app.command("list")
def list_(
    spec: SpecOpt = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table or json.", metavar="FORMAT")
    ] = "table",
) -> None:
    """Ops, candidates (and whether each can run here, and why not) and checks."""
    from kernelcheck import api

    try:
        info = api.describe(_catalog(spec))
    except UsageError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(info, indent=2))
        return
    console = Console(soft_wrap=True)
    for name, op in info["ops"].items():
        console.print(f"[bold]op {name}[/]: {op['description']}  ({op['source']})", highlight=False)
        for cname, cand in op["candidates"].items():
            console.print(f"  candidate [cyan]{cname}[/] = {cand['callable']}", highlight=False)
            for dev, verdict in cand["runs_here"].items():
                mark = (
                    "[green]runs here[/]"
                    if verdict == "yes"
                    else f"[yellow]cannot run[/]: {verdict}"
                )
                console.print(f"      {dev}: {mark}", highlight=False)
    console.print("[bold]checks[/]")
    for name, summary in info["checks"].items():
        console.print(f"  {name}: {summary}", highlight=False)


@app.command()
def doctor(
    fmt: Annotated[
        str, typer.Option("--format", help="table or json.", metavar="FORMAT")
    ] = "table",
) -> None:
    """torch, the devices (with the reason one is missing), native libraries, the NPU stack."""
    from kernelcheck import api

    info = api.doctor()
    if fmt == "json":
        typer.echo(json.dumps(info, indent=2))
        return
    console = Console(soft_wrap=True)
    console.print(
        f"torch {info['torch']} (CUDA build: {info['torch_cuda'] or 'no'})", highlight=False
    )
    for name, d in info["devices"].items():
        state = (
            "[green]available[/]" if d["available"] else f"[yellow]unavailable[/]: {d['reason']}"
        )
        console.print(f"device {name}: {state}", highlight=False)
    for name, lib in info["native_libraries"].items():
        parts = [f"native {name}: {lib['status']}", lib.get("path"), lib.get("reason")]
        if lib.get("isa"):
            parts.append(f"({lib['isa']} build in use)")
        console.print(" ".join(p for p in parts if p), highlight=False)
    for name, lib in info["verifier_libraries"].items():
        parts = [f"helper {name}: {lib['status']}", lib.get("path"), lib.get("reason")]
        if lib.get("isa"):
            parts.append(f"({lib['isa']} loop in use)")
        console.print(" ".join(p for p in parts if p), highlight=False)
    npu = info["npu_stack"]
    console.print(
        f"torch_npu: {npu['torch_npu']}; "
        f"CANN: {'found' if npu['cann_found'] else 'not found'} at {npu['cann_home']}",
        highlight=False,
    )


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
        code = _EXIT_FOR_SIGNAL.get(exc.signame, EXIT_SIGINT)
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
