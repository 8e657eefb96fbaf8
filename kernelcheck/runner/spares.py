"""Worker processes the ``kernelcheck run`` command starts first, before it imports torch.

A worker spends about 3.5 s importing torch before it can take a case, and the command
itself spends about 3 s importing torch and planning the run; one after the other, the
first case of the default logp run started 6.7 s in. Started first thing, the workers
import while the command does, and the executor adopts them (``IsolatedWorker``) as it
would have started them. One that is never adopted (a usage error, a run of one case, a
run in process) is killed when the command exits. Only the command starts spares:
importing kernelcheck starts nothing.

This module imports nothing heavy (no torch), nor does anything it calls.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess

from kernelcheck.runner import sanitize
from kernelcheck.runner.channel import Channel
from kernelcheck.runner.worker_environment import worker_environment

MAX_SPARES = 4  # a run starts one worker per core it uses; more start when needed
# set (to anything but 0): start none. kernelcheck's own test suite sets it: its many short
# runs would each pay for workers they never use
NO_SPARES_ENV = "KERNELCHECK_NO_SPARES"

_spares: list[tuple[subprocess.Popen, Channel]] = []


def spawn(tool: str | None = None, log_dir: str | None = None):
    """Start a worker process (under the sanitizer ``tool``, if set), without waiting for
    it: ``(process, channel)``. It imports torch, then waits for the parent's import path."""
    proc = subprocess.Popen(
        sanitize.worker_command(tool, log_dir),
        env={**worker_environment(), **sanitize.worker_env(tool)},  # large-block keeper
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # a terminal's Ctrl-C reaches the parent only
    )
    return proc, Channel(proc.stdout.fileno(), proc.stdin.fileno())


def wanted(argv: list[str]) -> int:
    """How many spares the command line ``argv`` (without the program) will use: one per
    core, at most ``MAX_SPARES``, for ``run`` with isolated workers not under a sanitizer;
    else none (and none with ``KERNELCHECK_NO_SPARES`` set)."""
    if not argv or argv[0] != "run" or os.environ.get(NO_SPARES_ENV, "") not in ("", "0"):
        return 0
    if any(a in ("--no-isolate", "--help", "-h") or a.startswith("--sanitize") for a in argv):
        return 0
    return min(MAX_SPARES, os.cpu_count() or 1)


def prestart(count: int) -> None:
    """Start ``count`` spares now; those not taken are killed at exit."""
    if count > 0 and not _spares:
        atexit.register(discard)
    for _ in range(count):
        _spares.append(spawn())


def take():
    """A spare still running, ``(process, channel)``, or None."""
    while _spares:
        proc, channel = _spares.pop(0)
        if proc.poll() is None:
            return proc, channel
        _close(proc)
    return None


def discard() -> None:
    """Kill the spares never taken (each leads its own process group)."""
    while _spares:
        proc, _ = _spares.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        _close(proc)


def _close(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
