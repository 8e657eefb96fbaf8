"""Memory calls: hand freed heap memory back before a GB-sized call, so it never adds to
the peak; cap a process's address space around a call that may take more than the
machine has.

Between a Qwen3 trial's big calls, kernelcheck frees chunk-sized temporaries (gold
chunks, draws, metric buffers) that glibc keeps for reuse: in the heap up to its trim
threshold, and in the arenas of the draw threads, which it trims only by itself. Just
before a call whose inputs are GB-sized, the candidate's own output is about to be the
largest allocation of the run; ``malloc_trim(0)`` returns those kept pages first
(measured: fp32 Qwen3 peak RSS 5,366,960 KB without, 5,250,432 KB with). Nothing
outside glibc does anything.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager


@functools.cache
def libc_function(name: str):
    """A function of the C library (``mallopt``, ``malloc_trim``), or None where it has
    none (not glibc)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def release_free_heap() -> bool:
    """glibc's ``malloc_trim(0)``: False where there is none (another C library)."""
    trim = libc_function("malloc_trim")
    return bool(trim(0)) if trim is not None else False


def available_memory_bytes() -> int | None:
    """Memory this process can be handed now: the system's (``MemAvailable``), or less
    where its cgroup (a container's limit) has less room left; None where unknown."""
    system = _system_available()
    room = cgroup_room_bytes()
    if system is None or room is None:
        return room if system is None else system
    return min(system, room)


def _system_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_room_bytes() -> int | None:
    """Memory left under this process's cgroup v2 limit (``memory.max`` less
    ``memory.current``), None where there is no limit or no cgroup v2 to read."""
    try:
        with open("/proc/self/cgroup") as fh:
            path = next((ln.split("::", 1)[1].strip() for ln in fh if ln.startswith("0::")), None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current")) as fh:
            return max(0, int(limit) - int(fh.read().strip()))
    except (OSError, ValueError):
        return None


def address_space_bytes() -> int | None:
    """This process's mapped address space (``VmSize``), or None where /proc has none."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def address_space_limit(extra_bytes: int) -> Iterator[bool]:
    """Allocations past ``extra_bytes`` more address space fail in the block (they raise,
    where torch allocates: an out-of-memory fault, not a process the system kills); True
    where the limit is set (Linux), False where it cannot be. The previous limit comes
    back after it. Never on a process that holds a GPU context: its driver reserves
    address space far past its memory."""
    now = address_space_bytes()
    if now is None:
        yield False
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + extra_bytes
    for cap in (soft, hard):  # never above a limit already set
        if cap != resource.RLIM_INFINITY:
            limit = min(limit, cap)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
