"""Run cases so that a faulty candidate never takes the run down.

Isolated (the default for every candidate), each candidate runs in child processes
(one per case running at a time), reused across cases, killed on timeout and restarted
after a crash; a segfault, an abort or ``os._exit`` becomes a ``crash`` result carrying
the signal or exit code, reported on the check and the step that was running. In
process (``--no-isolate``, for debugging), a per-case timeout is a SIGALRM that raises
:class:`CaseTimeout` in the candidate's Python code.

A verdict must not depend on what ran before it. Isolated, each case (a candidate at one
shape, dtype and set of attributes) gets a fresh process, forked from the worker's
pristine state (``runner/worker.py``): a JIT-compiling candidate cannot carry a kernel
compiled for one shape or dtype into the judgment of another, nor leave memory, caches
or module state behind, and a failing case's repro, run alone, meets what it met. In
process nothing can be restarted: a candidate keeps what earlier cases left in the
process, so only isolated verdicts are independent of the plan's order. Either way what
the candidate allocates reads NaN until written (``runner/poison.py``).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace

from kernelcheck.cases.grid import Case
from kernelcheck.checks import CHECKS, memory_safety
from kernelcheck.checks.outcome import Outcome
from kernelcheck.results import CheckResult
from kernelcheck.runner import sanitize, spares
from kernelcheck.runner.case import RunOptions, make_result, run_case
from kernelcheck.runner.channel import Channel
from kernelcheck.runner.poison import poison_cached_device_memory
from kernelcheck.runner.worker import FRESH
from kernelcheck.spec.model import OpSpec
from kernelcheck.timing import PHASES, PhaseClock, add_phases

_POLL_S = 0.1
_STARTUP_S = 120.0
_FINISH_S = 5.0  # an idle worker told to stop ends within this, or is killed


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


@dataclass
class Fault:
    """An attempt that ended early: how, and the step (check, probe) that was running."""

    status: str  # crash | timeout | error
    message: str
    check: str | None = None  # None: outside any check (loading, start-up)
    probe: str = ""

    def where(self) -> str:
        if self.check is None:
            return f" ({self.probe})" if self.probe else ""
        return f" in {self.check}" + (f", step: {self.probe}" if self.probe else "")


class _Progress:
    """The step running now, as told by ``run_case``'s progress callback."""

    def __init__(self) -> None:
        self.check: str | None = None
        self.probe = ""

    def __call__(self, check: str | None, probe: str) -> None:
        self.check, self.probe = check, probe


def attempt_in_process(
    op: OpSpec, case: Case, options: RunOptions, timeout_s: float | None, phases: dict
) -> Generator[CheckResult, None, Fault | None]:
    """Run the case here; a timeout (main thread only) interrupts it and is returned."""
    clock = PhaseClock()
    use_alarm = bool(timeout_s) and threading.current_thread() is threading.main_thread()
    previous = None
    at = _Progress()
    if use_alarm:

        def on_alarm(signum, frame):
            raise CaseTimeout()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    gen = run_case(op, case, options, at, clock)
    try:
        poison_cached_device_memory(case.device)  # CUDA: the cache's free blocks read NaN
        yield from gen
    except CaseTimeout:
        gen.close()
        message = f"did not finish within {timeout_s:g} s (in process: candidate interrupted)"
        return Fault("timeout", message, at.check, at.probe)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        add_phases(phases, clock.totals)
    return None


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


def process_key(case: Case) -> tuple:
    """What a case process is kept for: one candidate at one shape, dtype and set of
    attributes (a kernel cache keyed without the dtype, or built with a temperature
    baked in, fails every case after the first otherwise: a repro, run alone, passed);
    anything else forks a fresh one. The same case again (another shard's seeds, a
    rerun after a fault) keeps it."""
    return (case.candidate, case.shape, case.dtype, case.attrs)


def needs_fresh_process(last: tuple | None, case: Case) -> bool:
    """A case runs in a fresh process unless its worker's last case had the same
    process key (``None``: the worker has run nothing yet, it is fresh)."""
    return last is not None and last != process_key(case)


class IsolatedWorker:
    """One child process, reused across cases of any candidate (it never runs one itself),
    restarted after a fault; consecutive cases of one candidate and shape share a case
    process, forked afresh for anything else."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.last: tuple | None = None  # process_key of the case its case process ran last
        self.sanitizer_logs: sanitize.LogReader | None = None  # under --sanitize

    def _start(self, tool: str | None = None) -> None:
        self.last = None
        if tool and self.sanitizer_logs is None:
            self.sanitizer_logs = sanitize.LogReader(sanitize.new_log_dir())
        log_dir = str(self.sanitizer_logs.log_dir) if tool else None
        # one the command started before it imported torch (runner/spares.py), or a new one
        started = None if tool else spares.take()
        self.proc, self.channel = started or spares.spawn(tool, log_dir)
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

    def kill(self) -> None:
        """Kill the worker and its case process (its process group: it leads a session)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()

    def finish(self) -> None:
        """End an idle worker as a process ends its work: told to stop, then waited for, so
        its case process exits and is reaped (its CPU time and peak memory count in the
        command's own, as a killed orphan's would not); killed if it does not end soon."""
        if self.alive():
            try:
                self.channel.send(None)
                self.proc.wait(_FINISH_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.stop()
        if self.sanitizer_logs is not None:
            self.sanitizer_logs.remove()

    def stop(self) -> None:
        if self.proc is not None:
            self.kill()
            self.proc.wait(5)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc, self.channel = None, None

    def attempt(
        self, op: OpSpec, case: Case, options: RunOptions, timeout_s: float | None, phases: dict
    ) -> Generator[CheckResult, None, Fault | None]:
        """Run the case in the worker; a crash or timeout kills it and is returned. Under
        ``--sanitize`` the case's ``memory_safety`` result follows (after a fault: only
        when the sanitizer reported something, the rerun of the other checks gives it)."""
        fault = yield from self._attempt(op, case, options, timeout_s, phases)
        if options.sanitize and self.sanitizer_logs is not None:
            found = sanitize_result(case, options, self.sanitizer_logs.read())
            if fault is None or found.status != "pass":
                yield found
        return fault

    def _attempt(self, op, case, options, timeout_s, phases):
        if not self.alive():
            try:
                self._start(options.sanitize)
            except WorkerStartError as exc:
                return Fault("error", str(exc))
        try:
            if needs_fresh_process(self.last, case):
                self.channel.send(FRESH)
            self.last = process_key(case)
            self.channel.send((op, case, options))
        except OSError:  # died between cases
            pass
        deadline = time.monotonic() + timeout_s if timeout_s else None
        at = _Progress()
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
            if kind == "progress":
                at(*payload)
                continue
            if kind == "phases":
                add_phases(phases, payload)
                continue
            if kind == "result":
                yield CheckResult.from_dict(payload)
                continue
            if kind == "done":
                return None
            if kind == "fatal":
                self.stop()
                return Fault("error", f"worker error: {payload.splitlines()[0]}")
            if kind == "died" or not self.alive():
                code = self.proc.wait(5)
                self.stop()
                return Fault("crash", _describe_exit(code), at.check, at.probe)
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()
                message = f"did not finish within {timeout_s:g} s (isolated: the worker was killed)"
                return Fault("timeout", message, at.check, at.probe)


def sanitize_result(case: Case, options: RunOptions, log_text: str) -> CheckResult:
    """The case's ``memory_safety`` result from the sanitizer's log of it; its repro
    reruns the case's checks under the same tool."""
    found = memory_safety.outcome(log_text, options.sanitize)
    res = make_result(case, memory_safety.NAME, found, options)
    checks = ",".join(case.checks)
    res.repro = res.repro.replace(
        f"--checks {memory_safety.NAME}", f"--checks {checks} --sanitize {options.sanitize}"
    )
    return res


class WorkerStartError(RuntimeError):
    """The isolated worker could not start: the case's checks become ``error`` results."""


TIMEOUT_SCALE_ELEMENTS = 1 << 26
# a check's lead beyond the case's shape (``Check.lead_work``) is a few calls, where the
# case's own shape takes hundreds: its work counts per 1G elements
LEAD_SCALE_ELEMENTS = 1 << 30


def case_timeout(op: OpSpec, case: Case) -> float:
    """The spec's per-case timeout, scaled up for cases beyond 64M elements, and once more
    per 1G elements of the largest lead one of its checks draws (``Check.lead_work``:
    shape_sweep's huge leads, 3G elements, add 3x in the narrowest dtype's case).

    A timeout exists to catch hangs; a 4096 x 151936 case legitimately runs ~9x longer
    than a 64M-element one, so it gets ~9x the time. ``--timeout`` is taken as given.
    """
    checks = [CHECKS[name] for name in case.checks if name in CHECKS]
    leads = [c.lead_work(op, case, op.check_params(c.name)) for c in checks]
    own = math.prod(case.sizes.values()) / TIMEOUT_SCALE_ELEMENTS
    return op.timeout_s * (max(1.0, own) + max(leads, default=0) / LEAD_SCALE_ELEMENTS)


def wants_isolation(op: OpSpec, case: Case, isolate: bool | None) -> bool:
    """``--isolate``/``--no-isolate`` wins; else the candidate's ``isolate``; else isolated.

    Isolation is the default for every candidate: compiled code behind a Python
    candidate (torch.compile, Triton, a vendor library) can abort the process as surely
    as a native kernel, and an abort in process would take the run and its report down.
    """
    if isolate is not None:
        return isolate
    cand = op.candidates[case.candidate]
    return cand.isolate if cand.isolate is not None else True


MAX_FAULTS_PER_CASE = 3


class Executor:
    """Routes each case in process or to an idle worker; owns the workers.

    A crash or a timeout is pinned to the check (and the step) that was running; the
    case's other checks run again in a fresh worker. After ``MAX_FAULTS_PER_CASE`` such
    faults in one case, the checks left get the last fault's status without running.
    """

    def __init__(self, isolate: bool | None = None, timeout_s: float | None = None):
        self.isolate = isolate
        self.timeout_s = timeout_s
        # every worker started, and of those the idle ones: one pool for all candidates (a
        # worker only forks case processes), so a run starts no more workers than cases
        # run side by side; each start imports torch (about 3.5 s, a core's worth)
        self.workers: list[IsolatedWorker] = []
        self.idle: list[IsolatedWorker] = []
        self.phase_seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._lock = threading.Lock()
        self.closed = False

    def run(self, op: OpSpec, case: Case, options: RunOptions) -> Iterator[CheckResult]:
        timeout = self.timeout_s if self.timeout_s is not None else case_timeout(op, case)
        worker = None
        if wants_isolation(op, case, self.isolate):
            worker = self._take_worker(case)
            if worker is None:  # the run is ending: start no worker nobody would stop
                return
        attempt = worker.attempt if worker is not None else attempt_in_process
        pending = list(case.checks)
        phases: dict[str, float] = {}  # this case's, folded in at its end (cases may run
        try:  # side by side, each in a thread of its own)
            yield from self._attempts(op, case, options, attempt, timeout, pending, phases)
        finally:
            with self._lock:
                add_phases(self.phase_seconds, phases)
                if worker is not None:
                    self.idle.append(worker)

    def _take_worker(self, case: Case) -> IsolatedWorker | None:
        """An idle worker, else a new one; None once the run is closing. Of the idle ones,
        first one whose case process ran this candidate and shape last (it goes on), then
        one that ran this candidate, then any (a fresh case process either way)."""
        with self._lock:
            if self.closed:
                return None
            key = process_key(case)
            ranked = sorted(self.idle, key=lambda w: (w.last != key, _candidate(w) != key[0]))
            if ranked:
                self.idle.remove(ranked[0])
                return ranked[0]
            worker = IsolatedWorker()
            self.workers.append(worker)
            return worker

    def idle_candidates(self) -> set[str]:
        """The candidates whose last case an idle worker ran (the schedule gives a free
        slot to one of them first: its case process may go on)."""
        with self._lock:
            return {_candidate(w) for w in self.idle} - {None}

    def _attempts(self, op, case, options, attempt, timeout, pending, phases):
        """Attempts until every check of ``pending`` has a result (see the class)."""
        faults = 0
        while pending:
            if self.closed:  # killed on an interrupt: no fresh worker
                return
            sub = replace(case, checks=tuple(pending))
            fault = yield from _pass_on(attempt(op, sub, options, timeout, phases), pending)
            if fault is None:
                break
            if fault.check not in pending:  # outside any check: every check left shares it
                yield from _fill(
                    op, sub, set(), fault.status, fault.message + fault.where(), options
                )
                return
            faults += 1
            then = "go on" if attempt is attempt_in_process else "run on in a fresh worker"
            message = f"{fault.message}{fault.where()}; the case's other checks {then}"
            yield fault_result(op, case, fault.check, fault.status, message, options)
            pending.remove(fault.check)
            if faults >= MAX_FAULTS_PER_CASE and pending:
                message = (
                    f"not run: {faults} checks of this case ended in a crash or timeout "
                    f"(last: {fault.message}{fault.where()})"
                )
                yield from _fill(
                    op, replace(case, checks=tuple(pending)), set(), fault.status, message, options
                )
                return
        if pending:  # an attempt ended without a result for some check
            message = "the candidate's run ended without a result for this check"
            yield from _fill(
                op, replace(case, checks=tuple(pending)), set(), "error", message, options
            )

    def _closing(self) -> list[IsolatedWorker]:
        """Start no worker from now on; the workers started so far."""
        with self._lock:
            self.closed = True
            return list(self.workers)

    def kill(self) -> None:
        """Kill every worker now (their pipes stay open until :meth:`close`, so a thread
        still reading one reads its end, never a reused descriptor)."""
        for worker in self._closing():
            worker.kill()

    def close(self) -> None:
        for worker in self._closing():
            worker.finish()  # killed already when the run was interrupted (kill)
        with self._lock:
            self.workers.clear()
            self.idle.clear()


def _candidate(worker: IsolatedWorker) -> str | None:
    return worker.last[0] if worker.last else None


def _pass_on(gen, pending: list[str]):
    """Pass an attempt's results on, crossing each off ``pending``; return its fault."""
    while True:
        try:
            res = next(gen)
        except StopIteration as stop:
            return stop.value
        if res.check in pending:
            pending.remove(res.check)
        yield res


__all__ = ["CaseTimeout", "Executor", "Fault", "IsolatedWorker", "attempt_in_process"]
