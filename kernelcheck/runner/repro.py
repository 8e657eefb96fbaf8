"""One-line commands that rerun exactly one case and check."""

from __future__ import annotations

import shlex
from pathlib import Path

from kernelcheck.cases.grid import Case, fmt_attr


def shape_flags(shape: dict[str, int]) -> list[str]:
    if set(shape) == {"batch", "seq", "vocab"}:
        return [
            "--batch",
            str(shape["batch"]),
            "--seq",
            str(shape["seq"]),
            "--vocab",
            str(shape["vocab"]),
        ]
    return ["--shape", ",".join(f"{k}={v}" for k, v in shape.items())]


def repro_command(
    case: Case,
    check: str,
    seed: int | None,
    distribution: str | None,
    user_specs: tuple[Path, ...] = (),
    check_grad: bool = True,
) -> str:
    argv = ["kernelcheck", "run", "--op", case.op]
    for spec in user_specs:
        argv += ["--spec", str(spec)]
    argv += ["--candidate", case.candidate, "--device", case.device, "--dtype", case.dtype]
    argv += shape_flags(case.sizes)
    for name, value in case.attrs:
        if name in case.shown or name in case.pinned:
            argv += ["--attr", f"{name}={fmt_attr(value)}"]
    argv += ["--checks", check]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if distribution:
        argv += ["--distributions", distribution]
    if not check_grad:
        argv += ["--no-check-grad"]
    if case.threads is not None:
        argv += ["--threads", str(case.threads)]
    return shlex.join(argv)
