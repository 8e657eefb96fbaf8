"""Calls from several threads at once.

A data loader's or a server's threads may call one kernel together. A kernel that keeps
a scratch buffer per shape (a Python dict of workspaces, a C ``static`` array) then has
two calls writing one buffer, and each reads the other's values. Both calls start at a
barrier and repeat, so their ops interleave: PyTorch releases the GIL inside each op and
ctypes during a foreign call, and the interpreter's switch interval is cut from 5 ms to
``SWITCH_S`` meanwhile (a thread that releases the GIL for a short op mostly takes it back
before a waiting one wakes: at 5 ms, calls of a millisecond ran one after another).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

WORK = 1 << 18  # a call's rows x the product of a row's dims, at least
ROUNDS = 4  # calls each thread makes, at least
SECONDS = 0.05  # and they go on this long at least: short calls meet less often
MAX_CALLS = 256  # a thread's calls at most, while a late one starts
SWITCH_S = 1e-5


def rows_for(row_work: int) -> int:
    """Rows per call: ``WORK`` over a row's (its dims' product: vocab, hidden, linear_logp's
    hidden x vocab), and two at least, so that two batches differ. Each op
    then runs long enough for the other thread to get in: on rms_norm with a buffer held
    through a whole call (tests/fixtures/generic_bugs.py), an earlier four-thread version
    of the probe met it in 5 of 230 calls at 16 x 256 elements, in 102 of 178 at 256 x 256
    (2 cores, loaded). A window of a few short ops
    (staged, then read back at once) is met far less often, and may be missed."""
    return max(2, -(-WORK // max(1, row_work)))


def together(
    calls: list[Callable[[], object]], rounds: int, seconds: float = SECONDS
) -> list[list[object]]:
    """Each of ``calls`` in a thread of its own, all started at once, each repeating until
    every thread has made ``rounds`` calls and ``seconds`` have passed (so the threads
    drift in phase, and none runs alone at the end), or it has made ``MAX_CALLS``; each
    thread's results in order: keep them small (the caller's findings, not tensors). A
    raise in a thread is raised here. Only how often calls meet depends on the machine's
    speed: a verdict on a candidate without the race never does."""
    start = threading.Barrier(len(calls))
    results: list[list[object]] = [[] for _ in calls]
    raised: list[BaseException] = []

    def work(i: int) -> None:
        try:
            start.wait()
            until = time.monotonic() + seconds
            while not raised and len(results[i]) < MAX_CALLS:
                if min(map(len, results)) >= rounds and time.monotonic() >= until:
                    break
                results[i].append(calls[i]())
        except BaseException as exc:  # handed to the caller's thread
            raised.append(exc)
            start.abort()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(calls))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    failures = [e for e in raised if not isinstance(e, threading.BrokenBarrierError)]
    if raised:
        raise (failures or raised)[0]
    return results
