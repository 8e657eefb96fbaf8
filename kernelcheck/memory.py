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
    """Memory the system can hand out now (``MemAvailable``), or None where unknown."""
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
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
