"""Run cases so that a faulty candidate never takes the run down.

In process (the default for Python candidates), a per-case timeout is a SIGALRM that
raises :class:`CaseTimeout` in the candidate's Python code. Isolated (the default for
native candidates, ``--isolate`` for any), each candidate runs in a child process that
is killed on timeout and restarted after a crash; a segfault, an abort or
``os._exit`` becomes a ``crash`` result carrying the signal or exit code.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from kernelcheck.cases.grid import Case
from kernelcheck.checks.base import Outcome
from kernelcheck.results import CheckResult
from kernelcheck.runner.case import RunOptions, make_result, run_case
from kernelcheck.runner.worker import Channel
from kernelcheck.spec.model import OpSpec

_POLL_S = 0.1
_STARTUP_S = 120.0


class CaseTimeout(BaseException):
    """Raised by the alarm inside a hanging in-process case (BaseException: a candidate's
    ``except Exception`` must not swallow it)."""


def fault_result(
    op: OpSpec, case: Case, check: str, status: str, message: str, options: RunOptions
) -> CheckResult:
    return make_result(case, check, Outcome(status, message), options)


def _fill(op, case, done: set[str], status: str, message: str, options) -> Iterator[CheckResult]:
    for check in case.checks:
        if check not in done:
            yield fault_result(op, case, check, status, message, options)


def run_in_process(
    op: OpSpec, case: Case, options: RunOptions, timeout_s: float | None
) -> Iterator[CheckResult]:
    """Run one case here; a timeout (main thread only) turns the rest into ``timeout``."""
    use_alarm = bool(timeout_s) and threading.current_thread() is threading.main_thread()
    done: set[str] = set()
    previous = None
    if use_alarm:

        def on_alarm(signum, frame):
            raise CaseTimeout()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        gen = run_case(op, case, options)
        while True:
            try:
                res = next(gen)
            except StopIteration:
                break
            done.add(res.check)
            yield res
    except CaseTimeout:
        gen.close()
        yield from _fill(
            op,
            case,
            done,
            "timeout",
            f"case did not finish within {timeout_s:g} s (in process: candidate interrupted)",
            options,
        )
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker process vanished"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the candidate's process was killed by {name} (signal {-code})"
    return f"the candidate's process exited with code {code}"


class IsolatedWorker:
    """One child process per candidate, reused across cases, restarted after a fault."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.channel: Channel | None = None

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelcheck.runner.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the parent only
        )
        self.channel = Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno())
        self.channel.send(list(sys.path))
        # start-up (importing torch) is not the case's time: wait for the worker to be ready
        try:
            kind, _ = self.channel.recv(_STARTUP_S)
        except (TimeoutError, EOFError, OSError) as exc:
            code = self.proc.poll()
            self.stop()
            raise WorkerStartError(
                f"the isolated worker did not start ({type(exc).__name__}; exit code {code})"
            ) from None
        if kind != "ready":
            self.stop()
            raise WorkerStartError(f"the isolated worker sent {kind!r} instead of 'ready'")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(5)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc, self.channel = None, None

    def run(
        self, op: OpSpec, case: Case, options: RunOptions, timeout_s: float | None
    ) -> Iterator[CheckResult]:
        if not self.alive():
            try:
                self._start()
            except WorkerStartError as exc:
                yield from _fill(op, case, set(), "error", str(exc), options)
                return
        try:
            self.channel.send((op, case, options))
        except OSError:  # died between cases
            pass
        deadline = time.monotonic() + timeout_s if timeout_s else None
        done: set[str] = set()
        while True:
            wait = (
                _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            )
            try:
                kind, payload = self.channel.recv(wait)
            except TimeoutError:
                kind = None
            except (EOFError, OSError):
                kind = "died"
            if kind == "result":
                res = CheckResult.from_dict(payload)
                done.add(res.check)
                yield res
                continue
            if kind == "done":
                return
            if kind == "fatal":
                message = f"worker error: {payload.splitlines()[0]}"
                yield from _fill(op, case, done, "error", message, options)
                continue
            if kind == "died" or not self.alive():
                code = self.proc.wait(5)
                message = (
                    f"{_describe_exit(code)} while running this case; the rest of the run goes on"
                )
                self.stop()
                yield from _fill(op, case, done, "crash", message, options)
                return
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()
                message = (
                    f"case did not finish within {timeout_s:g} s (isolated: the worker was killed)"
                )
                yield from _fill(op, case, done, "timeout", message, options)
                return


class WorkerStartError(RuntimeError):
    """The isolated worker could not start: the case's checks become ``error`` results."""


TIMEOUT_SCALE_ELEMENTS = 1 << 26


def case_timeout(op: OpSpec, case: Case) -> float:
    """The spec's per-case timeout, scaled up for cases beyond 64M elements.

    A timeout exists to catch hangs; a 4096 x 151936 case legitimately runs ~9x longer
    than a 64M-element one, so it gets ~9x the time. ``--timeout`` is taken as given.
    """
    elements = math.prod(case.sizes.values())
    return op.timeout_s * max(1.0, elements / TIMEOUT_SCALE_ELEMENTS)


def wants_isolation(op: OpSpec, case: Case, isolate: bool | None) -> bool:
    """``--isolate``/``--no-isolate`` wins; else the candidate's ``isolate``; else native."""
    if isolate is not None:
        return isolate
    cand = op.candidates[case.candidate]
    return cand.isolate if cand.isolate is not None else cand.native


class Executor:
    """Routes each case in process or to its candidate's worker; owns the workers."""

    def __init__(self, isolate: bool | None = None, timeout_s: float | None = None):
        self.isolate = isolate
        self.timeout_s = timeout_s
        self.workers: dict[str, IsolatedWorker] = {}

    def run(self, op: OpSpec, case: Case, options: RunOptions) -> Iterator[CheckResult]:
        timeout = self.timeout_s if self.timeout_s is not None else case_timeout(op, case)
        if wants_isolation(op, case, self.isolate):
            worker = self.workers.setdefault(case.candidate, IsolatedWorker())
            yield from worker.run(op, case, options, timeout)
        else:
            yield from run_in_process(op, case, options, timeout)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        self.workers.clear()


__all__ = ["CaseTimeout", "Executor", "IsolatedWorker", "run_in_process", "wants_isolation"]
