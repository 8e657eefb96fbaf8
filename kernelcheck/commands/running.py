"""Run a plan as ``kernelcheck run`` does: progress on stderr, ``--json-out`` rewritten
as results complete, and a first SIGINT/SIGTERM that stops at once, keeping what
completed (a second one exits at once).
"""

from __future__ import annotations

import os
import signal

from rich.console import Console

from kernelcheck.errors import EXIT_SIGINT, EXIT_SIGTERM, Interrupted
from kernelcheck.results import Report

EXIT_FOR_SIGNAL = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM}


def stop_on_signals() -> None:
    """First SIGINT/SIGTERM: stop at once, keeping what completed. Second: exit at once."""
    count = {"n": 0}

    def handler(signum, frame):
        name = signal.Signals(signum).name
        count["n"] += 1
        if count["n"] > 1:
            os._exit(EXIT_FOR_SIGNAL.get(name, EXIT_SIGINT))
        raise Interrupted(name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def run_plan(plan, writer=None) -> Report:
    """Execute ``plan`` with a progress ticker on stderr; ``writer`` (``--json-out``) sees
    the report after each result."""
    from kernelcheck import api
    from kernelcheck.commands.progress import CaseTicker

    ticker = CaseTicker(len(plan.cases), Console(stderr=True, emoji=False, highlight=False))

    def on_result(res, report):
        if writer:
            writer.write(report)
        ticker.result(res)

    stop_on_signals()
    try:
        return api.execute(
            plan,
            on_result=on_result,
            on_case=ticker.start,
            on_case_done=ticker.done,
            on_case_end=ticker.end,
        )
    finally:
        ticker.stop()
        stop_on_signals()  # a fresh count for the shrinking that follows
