"""Command-line options that several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SpecOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--spec", help="Extra spec file (repeatable).", metavar="FILE"),
]
CandidateOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--candidate",
        help="Candidate name (repeatable); default: all that run here.",
        metavar="NAME",
    ),
]
DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device", help="auto (cuda, then npu, then cpu), cpu, cuda or npu.", metavar="DEVICE"
    ),
]
DtypeOpt = Annotated[
    Optional[str],
    typer.Option("--dtype", help="Comma-separated dtypes: fp32,bf16,fp16.", metavar="LIST"),
]
BatchOpt = Annotated[
    Optional[int],
    typer.Option("--batch", help="Batch size (lead dim; rows = batch x seq).", metavar="N"),
]
SeqOpt = Annotated[
    Optional[int],
    typer.Option(
        "--seq",
        help="Sequence length (optional lead dim; leave out for [batch, vocab]).",
        metavar="N",
    ),
]
VocabOpt = Annotated[
    Optional[int],
    typer.Option("--vocab", help="Vocabulary size: the dim each row reduces over.", metavar="N"),
]
ShapeOpt = Annotated[
    Optional[str],
    typer.Option("--shape", help="Any op's dims: batch=64,vocab=10000.", metavar="DIMS"),
]
AttrOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--attr",
        help="Set an op attribute (repeatable): temperature=0.7 (pins a grid axis).",
        metavar="NAME=VALUE",
    ),
]
BaselineFactorOpt = Annotated[
    float,
    typer.Option("--baseline-factor", help="Metric growth counted as a regression.", metavar="F"),
]


def check_at_least(flag: str, value: float | None, low: float) -> None:
    """A numeric option's range: a UsageError (one line, exit 2) below ``low`` or NaN."""
    if value is not None and not value >= low:  # NaN compares false
        from kernelcheck.errors import UsageError

        raise UsageError(f"{flag}: expected a number >= {low:g}, got {value}")


def check_baseline_factor(factor: float) -> None:
    check_at_least("--baseline-factor", factor, 1)
