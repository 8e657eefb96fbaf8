"""CLI helpers that ``cli.py`` and every command share: one line and exit 2 on a usage
error, the catalog with ``--spec`` files, the shape from ``--batch/--seq/--vocab/--shape``,
the console that prints to stdout.

Here, not in ``cli.py``, so that ``commands/`` never imports ``cli.py`` (which imports
the commands to register them).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import typer

from kernelcheck.errors import EXIT_USAGE, UsageError

STATE = {"debug": False}  # --debug: show tracebacks


def fail(message: str, code: int = EXIT_USAGE) -> None:
    if STATE["debug"]:
        traceback.print_exc()
    typer.echo(f"kernelcheck: error: {message}", err=True)
    raise typer.Exit(code)


def catalog(specs: list[Path] | None):
    from kernelcheck.spec import load_catalog

    return load_catalog(specs or [])


def stdout_console():
    """stdout as every command prints it: the terminal's width, else (a log, a pipe) at
    most 80 columns. No ``:emoji:`` codes and no highlighting: data prints as it is."""
    from rich.console import Console

    from kernelcheck.wrap import log_width

    console = Console(emoji=False, highlight=False)
    if console.is_terminal:
        return console
    return Console(emoji=False, highlight=False, width=log_width(False, console.width))


def parse_shape(batch, seq, vocab, shape: str | None) -> dict | None:
    from kernelcheck.cases.grid import parse_sizes

    try:
        sizes = parse_sizes(shape) if shape else {}
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for key, value in (("batch", batch), ("seq", seq), ("vocab", vocab)):
        if value is not None:
            sizes[key] = value
    return sizes or None


def parse_attrs(items: list[str] | None) -> dict | None:
    """``--attr temperature=0.7`` (repeatable) -> {"temperature": 0.7}."""
    from kernelcheck.cases.grid import parse_attr_value

    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--attr: expected NAME=VALUE, e.g. temperature=0.7, got {item!r}")
        out[name.strip()] = parse_attr_value(value)
    return out or None
