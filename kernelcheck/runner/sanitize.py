"""``--sanitize TOOL``: the isolated workers run under NVIDIA's compute-sanitizer.

The sanitizer is slow (10-100x), so a sanitized run keeps the grid's smallest shape unless
one is given. It writes each process's reports to a log file of its own (the worker's
stdout is its channel to the parent); after each case the parent reads what the logs
gained and :mod:`kernelcheck.checks.memory_safety` makes the case's ``memory_safety``
result of it. Without a GPU or without ``compute-sanitizer`` (on PATH, in
``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``) ``--sanitize`` is a usage error.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
EXECUTABLE = "compute-sanitizer"
PRINT_LIMIT = 20  # reports per process: the first one is the message, the rest are counted


def find_sanitizer() -> str | None:
    """The ``compute-sanitizer`` executable: on PATH, else in the CUDA toolkit's bin."""
    found = shutil.which(EXECUTABLE)
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        path = Path(home) / "bin" / EXECUTABLE
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def problem(tool: str, device: str, isolate: bool | None, gpu: bool) -> str | None:
    """Why ``--sanitize tool`` cannot run (one line), or None: an unknown tool, a device
    other than an available CUDA GPU, in-process candidates, no ``compute-sanitizer``."""
    if tool not in TOOLS:
        return f"--sanitize: unknown tool {tool!r}; valid: {', '.join(TOOLS)}"
    if device != "cuda" or not gpu:
        return f"--sanitize needs a CUDA GPU (device {device!r}{'' if gpu else ', no GPU here'})"
    if isolate is False:
        return "--sanitize runs the isolated workers under the sanitizer: drop --no-isolate"
    if find_sanitizer() is None:
        return (
            f"--sanitize: {EXECUTABLE} not found on PATH nor in $CUDA_HOME/bin or "
            "/usr/local/cuda/bin (it ships with the CUDA toolkit)"
        )
    return None


def worker_command(tool: str | None, log_dir: str | None) -> list[str]:
    """The command that starts an isolated worker: under the sanitizer when ``tool`` is
    set, each process (the worker and the case processes it forks) logging to its own
    file in ``log_dir``."""
    worker = [sys.executable, "-m", "kernelcheck.runner.worker"]
    if not tool:
        return worker
    exe = find_sanitizer() or EXECUTABLE
    log = str(Path(log_dir) / "sanitizer.%p.log")
    flags = ["--tool", tool, "--log-file", log, "--print-limit", str(PRINT_LIMIT)]
    return [exe, *flags, "--target-processes", "all", *worker]


def worker_env(tool: str | None) -> dict[str, str]:
    """What a sanitized worker's environment adds: torch's CUDA caching allocator off, so
    each tensor is an allocation of its own size and a read past its end is out of bounds
    for memcheck (inside a cached 2 MB segment it would not be)."""
    return {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"} if tool else {}


def new_log_dir() -> str:
    """A fresh folder for one worker's sanitizer logs."""
    return tempfile.mkdtemp(prefix="kernelcheck-sanitizer-")


class LogReader:
    """The text the logs in a folder gained since the last :meth:`read` (one case's)."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = Path(log_dir)
        self.offsets: dict[Path, int] = {}

    def read(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("sanitizer.*.log")):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            parts.append(data.decode("utf-8", "replace"))
        return "".join(parts)

    def remove(self) -> None:
        shutil.rmtree(self.log_dir, ignore_errors=True)
