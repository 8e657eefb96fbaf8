"""Workers the command starts before it imports torch (kernelcheck/runner/spares.py): the
executor adopts them as it would have started them; those never taken are killed."""

from __future__ import annotations

import os

import pytest

from kernelcheck.runner import spares
from kernelcheck.runner.execute import IsolatedWorker


@pytest.mark.parametrize(
    ("argv", "some"),
    [
        (["run", "--op", "logp"], True),
        (["run", "--op", "logp", "--no-isolate"], False),
        (["run", "--op", "logp", "--sanitize", "memcheck"], False),
        (["run", "--sanitize=memcheck"], False),
        (["run", "--help"], False),
        (["list"], False),
        ([], False),
    ],
)
def test_only_an_isolated_run_wants_spares(monkeypatch, argv, some):
    monkeypatch.delenv(spares.NO_SPARES_ENV, raising=False)
    n = spares.wanted(argv)
    assert (n > 0) is some
    assert n <= min(spares.MAX_SPARES, os.cpu_count() or 1)


def test_the_switch_turns_them_off(monkeypatch):
    monkeypatch.setenv(spares.NO_SPARES_ENV, "1")
    assert spares.wanted(["run", "--op", "logp"]) == 0


def test_a_spare_is_adopted_by_the_next_worker_and_the_rest_are_killed():
    spares.prestart(2)
    try:
        pids = [proc.pid for proc, _ in spares._spares]
        worker = IsolatedWorker()
        worker._start()  # takes the first spare: no new process
        assert worker.proc.pid == pids[0] and worker.alive()
        worker.finish()
        left = spares._spares[0][0]
    finally:
        spares.discard()
    assert not spares._spares and left.poll() is not None  # killed, reaped
    assert spares.take() is None


def test_the_command_runs_its_cases_in_the_spares_it_started():
    import subprocess
    import sys

    env = {**os.environ, spares.NO_SPARES_ENV: "0"}
    argv = ["run", "--op", "logp", "--candidate", "torch", "--batch", "2", "--vocab", "33"]
    argv += ["--checks", "forward_accuracy", "--no-sweep", "--format", "plain"]
    out = subprocess.run(
        [sys.executable, "-m", "kernelcheck", *argv], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASSED" in out.stdout.splitlines()[-1]


def test_a_spare_whose_command_is_gone_exits_quietly():
    """Its parent died before taking it (SIGKILL: no exit handler ran): EOF, exit 0."""
    proc, _ = spares.spawn()
    proc.stdin.close()
    try:
        assert proc.wait(120) == 0
    finally:
        spares._close(proc)
