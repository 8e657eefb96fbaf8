"""The isolated worker process: ``python -m kernelcheck.runner.worker``.

A fresh interpreter (not ``multiprocessing``), so it never re-imports the parent's main
script. It talks to the parent over its stdin/stdout with length-prefixed pickles; the
candidate's own prints go to stderr so they cannot corrupt the channel.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback

_HEADER = struct.Struct("<Q")


class Channel:
    """Length-prefixed pickles over a pair of file descriptors."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffer = b""

    def send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def recv(self, timeout: float | None = None):
        """The next message; ``TimeoutError`` if none within ``timeout``; ``EOFError`` at EOF."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self.buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self.buffer)
                if len(self.buffer) >= _HEADER.size + size:
                    data = self.buffer[_HEADER.size : _HEADER.size + size]
                    self.buffer = self.buffer[_HEADER.size + size :]
                    return pickle.loads(data)
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise EOFError
            self.buffer += chunk


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    channel = Channel(sys.stdin.fileno(), os.dup(sys.stdout.fileno()))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of candidates go to stderr
    sys.path[:] = channel.recv()  # the parent's import path, for candidates found through it

    import torch  # noqa: F401 - imported before "ready": start-up is not case time

    from kernelcheck.runner.allocator import keep_chunks_in_heap

    keep_chunks_in_heap()

    from kernelcheck.runner.case import run_case
    from kernelcheck.timing import PhaseClock

    channel.send(("ready", None))
    while True:
        try:
            task = channel.recv()
        except EOFError:
            return
        if task is None:
            return
        op, case, options = task

        def progress(check, probe):
            channel.send(("progress", (check, probe)))

        clock = PhaseClock()
        try:
            for res in run_case(op, case, options, progress, clock):
                channel.send(("result", res.to_dict()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            channel.send(("fatal", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))
        channel.send(("phases", clock.totals))
        channel.send(("done", None))


if __name__ == "__main__":
    main()
