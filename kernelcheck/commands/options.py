"""Command-line options that ``run`` and ``bench`` share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SpecOpt = Annotated[
    Optional[list[Path]], typer.Option("--spec", help="Extra spec file (repeatable).")
]
CandidateOpt = Annotated[
    Optional[list[str]],
    typer.Option("--candidate", help="Candidate name (repeatable); default: all that run here."),
]
DeviceOpt = Annotated[
    str, typer.Option("--device", help="auto (cuda, then npu, then cpu), cpu, cuda or npu.")
]
DtypeOpt = Annotated[
    Optional[str], typer.Option("--dtype", help="Comma-separated dtypes: fp32,bf16,fp16.")
]
BatchOpt = Annotated[Optional[int], typer.Option("--batch")]
SeqOpt = Annotated[Optional[int], typer.Option("--seq")]
VocabOpt = Annotated[Optional[int], typer.Option("--vocab")]
ShapeOpt = Annotated[
    Optional[str], typer.Option("--shape", help="Any op's dims: batch=64,vocab=10000.")
]
