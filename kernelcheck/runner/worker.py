"""The isolated worker process: ``python -m kernelcheck.runner.worker``.

A fresh interpreter (not ``multiprocessing``), so it never re-imports the parent's main
script. It talks to the parent over its stdin/stdout with length-prefixed pickles; the
candidate's own prints go to stderr so they cannot corrupt the channel.

It imports torch and kernelcheck's checks, and then runs no case itself: each case runs in
a process forked from it, which serves the parent's cases until the parent asks for a
fresh one (:data:`FRESH`, when the next case has another candidate or shape: a verdict
must not depend on what ran before it, such as a kernel compiled for an earlier shape). A
case process that crashes takes the worker down with the same signal or exit code, so the
parent sees what it would have seen had the case run in the worker itself.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import traceback

from kernelcheck.runner.channel import Channel
from kernelcheck.runner.pristine import PristineProcesses, die_with_parent, fork, fork_zygote

FRESH = "fresh"  # from the parent: the next case runs in a fresh process
_RETIRED = b"R"  # from a case process to the worker: it exits because it was told to


def main() -> None:
    """Import torch once, then fork one case process after another from this state."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    # exact reads: a case process that retires must leave the next message in the pipe
    channel = Channel(sys.stdin.fileno(), os.dup(sys.stdout.fileno()), exact=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of candidates go to stderr

    import torch  # noqa: F401 - imported before "ready": start-up is not case time

    from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap

    keep_chunks_in_heap()

    # torch's own lazy import on the first torch.autograd.grad (it pulls in sympy): about a
    # CPU second in every case process otherwise
    import torch.fx.experimental.symbolic_shapes  # noqa: F401

    import kernelcheck.runner.case  # noqa: F401 - the checks, imported once for every fork

    # then the parent's import path, for candidates found through it: a spare started
    # before the parent planned its run (runner/spares.py) gets it when it is taken
    try:
        sys.path[:] = channel.recv()
    except EOFError:  # a spare never taken, whose command is gone: nothing to say
        os._exit(0)
    channel.send(("ready", None))
    while _case_process(channel):
        pass


def _case_process(channel: Channel) -> bool:
    """Fork a process that runs cases until told :data:`FRESH` (then True: fork the next);
    when it ends otherwise (EOF, a crash), end this process the same way.

    This process never runs a candidate (and never touches a GPU, which a fork could not
    inherit), so each fork starts as the worker did: no candidate module loaded, nothing
    compiled, no allocation left by an earlier case. A fork costs milliseconds where a
    fresh interpreter costs seconds (importing torch).
    """
    zygote, pristine = fork_zygote()  # the case process's pristine processes come from it
    told_read, told_write = os.pipe()
    pid = fork()
    if pid == 0:  # the case process: it never returns into this loop
        os.close(told_read)
        code = 1
        try:
            code = _serve(channel, told_write, pristine)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(told_write)
    pristine.close()  # the case process's alone: the zygote ends when it does
    _, status = os.waitpid(pid, 0)
    os.waitpid(zygote, 0)
    with os.fdopen(told_read, "rb") as told:
        retired = told.read(1) == _RETIRED
    if not retired:
        _end_as(status)
    return True


def _end_as(status: int) -> None:
    """Exit as the case process did (killed by the same signal, or with its exit code), so
    the parent reports a crash exactly as if the case had run in this process."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: their action is the default
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to end a process
    os._exit(os.waitstatus_to_exitcode(status))


def _serve(channel: Channel, told_fd: int, pristine: PristineProcesses) -> int:
    """Run the parent's cases until EOF, ``None`` (exit code 0) or :data:`FRESH`."""
    die_with_parent()
    from kernelcheck.runner.case import run_case
    from kernelcheck.runner.poison import poison_cached_device_memory
    from kernelcheck.timing import PhaseClock

    while True:
        try:
            task = channel.recv()
        except EOFError:
            return 0
        if task is None:
            return 0
        if task == FRESH:
            os.write(told_fd, _RETIRED)
            return 0
        op, case, options = task

        def progress(check, probe):
            channel.send(("progress", (check, probe)))

        clock = PhaseClock()
        try:
            poison_cached_device_memory(case.device)  # CUDA: the cache's free blocks read NaN
            for res in run_case(op, case, options, progress, clock, pristine):
                channel.send(("result", res.to_dict()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            channel.send(("fatal", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))
        channel.send(("phases", clock.totals))
        channel.send(("done", None))


if __name__ == "__main__":
    main()
