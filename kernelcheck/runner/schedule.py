"""Run a plan's cases one by one, or side by side where that changes nothing but time.

The candidates of one group (dtype, shape, attributes) share the group's trials
(``cases/trial_store.py``): the first case of the group to run computes and stores them,
the next ones read them. Isolated cases run in worker processes, so up to one case per
core can run at the same time, each in a worker of the shared pool (a free worker takes
the next case of the candidate it ran last, else of the one furthest behind):

- a case starts only while no other case of its group runs, so every trial part is
  computed once, by whichever candidate comes first (each worker takes its first case
  whose group is free: the streams leapfrog instead of waiting on each other);
- a large case (more than ``CONCURRENT_ELEMENTS``, or rows of ``LONG_ROW_ELEMENTS`` or
  more) runs alone, after every case before it, at all cores: two Qwen3 trials side by
  side would double the memory for no gain on a machine whose cores one such case
  already keeps busy, and its rows alone run at 2+ threads (:func:`is_large`);
- results come out in plan order, each case's once every earlier case is out, so the
  report is the one a sequential run writes, timings aside.

Small cases spend most of their time in Python between short kernel calls (the
invariance checks make some 700 calls per case), so two workers side by side use a
core that one leaves idle. In process (``--no-isolate``) cases run one by one: a
per-case timeout is a SIGALRM, which only the main thread gets.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelcheck.cases import run_folder
from kernelcheck.cases.grid import Case, rows
from kernelcheck.results import CheckResult
from kernelcheck.runner.case import RunOptions
from kernelcheck.runner.execute import Executor, wants_isolation
from kernelcheck.spec.model import OpSpec

CONCURRENT_ELEMENTS = 1 << 24  # cases up to this many elements (64 MiB of fp32) run side by side
LONG_ROW_ELEMENTS = 1 << 15  # and rows shorter than this (torch's parallel grain)


def group_of(case: Case) -> tuple:
    """The cases that share trials: one (dtype, shape, attributes)."""
    return (case.dtype, case.shape, case.attrs)


def shared_groups(cases: list[Case]) -> list[tuple]:
    """The groups with more than one case: only those store their trials."""
    return [g for g, n in Counter(group_of(c) for c in cases).items() if n > 1]


def concurrency(op: OpSpec, cases: list[Case], isolate: bool | None) -> int:
    """How many cases may run at once: one per core (each in a worker of the pool);
    1 when any case runs in process."""
    if not cases or not all(wants_isolation(op, c, isolate) for c in cases):
        return 1
    return max(1, min(len(cases), os.cpu_count() or 1))


def is_large(case: Case, op: OpSpec) -> bool:
    """A case that runs alone, at all cores: more than ``CONCURRENT_ELEMENTS``, or rows
    of ``LONG_ROW_ELEMENTS`` or more. The invariance checks run such rows alone at 2+
    threads (where a thread-parallel reduction splits them), and a parallel region beside
    another case stalls on the core the other holds: the default logp run took 37.7 and
    37.2 s (84 CPU s) with its Qwen3 cases side by side, 34.5 and 37.7 s (67 CPU s) with
    them alone."""
    total = math.prod(case.sizes.values())
    if total > CONCURRENT_ELEMENTS:
        return True
    if not op.lead:
        return False
    return total // max(1, rows(op, case.sizes)) >= LONG_ROW_ELEMENTS


def with_threads(op: OpSpec, cases: list[Case], isolate: bool | None, threads: int | None):
    """The cases with their CPU thread counts (``Case.threads``, which their repros pin):
    ``threads`` if given; else, side by side, each its share of the cores, and a large
    case, which runs alone, all of them (None). Two cases at all cores each on 2 cores
    oversubscribe them: measured, the default logp run took 39.1 s with 71 CPU seconds,
    and 33-37 s with 61 at one thread per case. The checks still vary the count
    (invariance: this one against another; determinism: 8)."""
    jobs = concurrency(op, cases, isolate)
    share = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    return [replace(c, threads=threads or (None if is_large(c, op) else share)) for c in cases]


@dataclass
class Event:
    index: int
    kind: str  # result | done | error
    payload: object = None


@dataclass
class _Slot:
    """One case's results while earlier cases are still out."""

    results: list[CheckResult] = field(default_factory=list)
    done: bool = False


class Schedule:
    """The plan's cases with their shared-trial options; :meth:`run` yields
    ``(index, case, result or None)`` in plan order, ``None`` closing a case."""

    def __init__(
        self,
        executor: Executor,
        op: OpSpec,
        cases: list[Case],
        options: RunOptions,
        folder: Path | None,
        budget: int,
        jobs: int = 1,
    ):
        self.executor, self.op, self.cases, self.options = executor, op, cases, options
        self.folder, self.jobs = folder, max(1, jobs)
        self.budget = budget  # for the whole run folder (SharedTrials counts every group's)
        self.members: dict[tuple, list[int]] = {}  # group -> its cases
        self.todo: dict[str, list[int]] = {}  # candidate -> its cases not done
        for i, c in enumerate(cases):
            self.members.setdefault(group_of(c), []).append(i)
            self.todo.setdefault(c.candidate, []).append(i)
        self.sharing = set(shared_groups(cases)) if folder is not None else set()
        self.keys = {g: k for k, g in enumerate(self.members)}
        self.on_start: Callable[[int], None] = lambda i: None
        # a case ended: side by side, before it is given out (after every earlier case)
        self.on_end: Callable[[int], None] = lambda i: None
        self.head = 0  # side by side: the first case not yet wholly given out
        self.slots: dict[int, _Slot] = {}
        self.done: set[int] = set()
        self.events: queue.Queue[Event] | None = None
        self.threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def options_for(self, i: int) -> RunOptions:
        """Share trials within the group; the group's last case to run only reads."""
        g = group_of(self.cases[i])
        if g not in self.sharing:
            return self.options
        path = run_folder.group_folder(self.folder, self.keys[g])
        path.mkdir(exist_ok=True)
        last = all(j in self.done for j in self.members[g] if j != i)
        return replace(self.options, shared_dir=str(path), shared_budget=0 if last else self.budget)

    def _finish(self, i: int) -> None:
        """Case ``i`` is done: its group's stored trials go once every case of it is."""
        self.done.add(i)
        self.on_end(i)
        self.todo[self.cases[i].candidate].remove(i)
        g = group_of(self.cases[i])
        if g in self.sharing and all(j in self.done for j in self.members[g]):
            run_folder.remove(run_folder.group_folder(self.folder, self.keys[g]))

    def run(self) -> Iterator[tuple[int, Case, CheckResult | None]]:
        if self.jobs == 1:
            yield from self._sequential()
        else:
            yield from self._concurrent()

    def _sequential(self):
        for i, case in enumerate(self.cases):
            self.on_start(i)
            for res in self.executor.run(self.op, case, self.options_for(i)):
                yield i, case, res
            self._finish(i)
            yield i, case, None

    # -- side by side ---------------------------------------------------------------

    def _large(self, i: int) -> bool:
        return is_large(self.cases[i], self.op)

    def _pick(self, cand: str, running: set[int], started: set[int], done: set[int]) -> int | None:
        """The next case for ``cand``'s free worker: its first case not started whose
        group has no case running (the group's first to run computes and stores its
        trials, the next ones read them). A large case only alone, after every earlier
        case; nothing beside it."""
        if any(self._large(j) for j in running):
            return None
        busy = {group_of(self.cases[j]) for j in running}
        for i in self.todo[cand]:
            if i in started:
                continue
            if self._large(i):
                if not running and all(j in done for j in range(i)):
                    return i
                return None  # nothing of this candidate overtakes its large case
            if group_of(self.cases[i]) not in busy:
                return i
        return None

    def _order(self, started: set[int]) -> list[str]:
        """Candidates by their earliest case not yet started: a free slot goes to the one
        furthest behind, so no candidate waits for the others to run out of cases; but
        first to one whose last case an idle worker ran, whose case process goes on (a
        fresh one would map its heap and shared trials afresh)."""
        first = {
            c: next((i for i in todo if i not in started), None) for c, todo in self.todo.items()
        }
        warm = self.executor.idle_candidates()
        left = [c for c, i in first.items() if i is not None]
        return sorted(left, key=lambda c: (c not in warm, first[c]))

    def _next(self, running: set[int], started: set[int], done: set[int]) -> int | None:
        """The case for a free slot: the first one :meth:`_pick` gives, asking the
        candidates furthest behind first. A candidate whose case runs already gets another
        worker: a slow candidate's cases spread over the cores the others leave free."""
        for cand in self._order(started):
            i = self._pick(cand, running, started, done)
            if i is not None:
                return i
        return None

    def _absorb(self, ev: Event) -> None:
        """One worker thread's event into the slots (a case done may free its group)."""
        slot = self.slots[ev.index]
        if ev.kind == "result":
            slot.results.append(ev.payload)
            return
        slot.done = True
        self._finish(ev.index)

    def _concurrent(self):
        events = self.events = queue.Queue()
        stop = self._stop
        started: set[int] = set()
        done = self.done
        slots = self.slots = {i: _Slot() for i in range(len(self.cases))}

        def work(i: int, options: RunOptions) -> None:
            try:
                for res in self.executor.run(self.op, self.cases[i], options):
                    if stop.is_set():
                        return
                    events.put(Event(i, "result", res))
                events.put(Event(i, "done"))
            except BaseException as exc:  # a bug: raised again in the main thread
                if not stop.is_set():
                    events.put(Event(i, "error", exc))

        try:
            while self.head < len(self.cases):
                running = started - done
                while len(running) < self.jobs:
                    i = self._next(running, started, done)
                    if i is None:
                        break
                    options = self.options_for(i)
                    started.add(i)
                    running.add(i)
                    self.on_start(i)
                    thread = threading.Thread(target=work, args=(i, options), daemon=True)
                    self.threads.append(thread)
                    thread.start()
                try:
                    ev = events.get(timeout=0.5)  # a signal (Ctrl-C) is heard in between
                except queue.Empty:
                    continue
                if ev.kind == "error":
                    raise ev.payload
                self._absorb(ev)
                while self.head < len(self.cases):  # out in plan order
                    out = slots[self.head]
                    while out.results:  # taken off before given out: never twice
                        yield self.head, self.cases[self.head], out.results.pop(0)
                    if not out.done:
                        break
                    self.head += 1
                    yield self.head - 1, self.cases[self.head - 1], None
        finally:
            stop.set()

    def stop(self, wait_s: float = 0.0) -> None:
        """Side by side: cases still running give out nothing more (the run is ending);
        wait up to ``wait_s`` for their threads (their workers were killed)."""
        self._stop.set()
        deadline = time.monotonic() + wait_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def held(self) -> list[tuple[Case, list[CheckResult], bool]]:
        """Per case not yet wholly given out, in plan order: its results obtained but not
        given out (beside a case still running, or still queued), and whether it finished.
        What an interrupted run still reports."""
        while self.events is not None:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                break
            if ev.kind != "error":
                self._absorb(ev)
        return [
            (self.cases[i], list(self.slots[i].results), self.slots[i].done)
            for i in range(self.head, len(self.cases))
            if i in self.slots and (self.slots[i].results or self.slots[i].done)
        ]
