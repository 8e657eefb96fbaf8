"""Length-prefixed pickles over a pair of file descriptors: how the parent, its isolated
workers and their pristine processes (``runner/pristine.py``) talk."""

from __future__ import annotations

import os
import pickle
import select
import struct
import time

_HEADER = struct.Struct("<Q")


class Channel:
    """Length-prefixed pickles over a pair of file descriptors. ``exact``: never read past
    the message being read (a process that stops reading leaves the rest to the next)."""

    def __init__(self, read_fd: int, write_fd: int, exact: bool = False):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.exact = exact
        self.buffer = b""

    def _wanted(self) -> int:
        """How much to read next: as much as is there, or (exact) what the message lacks."""
        if not self.exact:
            return 1 << 20
        if len(self.buffer) < _HEADER.size:
            return _HEADER.size - len(self.buffer)
        (size,) = _HEADER.unpack_from(self.buffer)
        return _HEADER.size + size - len(self.buffer)

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
            chunk = os.read(self.read_fd, self._wanted())
            if not chunk:
                raise EOFError
            self.buffer += chunk
