"""Memory settings for kernelcheck's own processes (the command and its isolated workers),
never made by importing the library.

Keep chunk-sized temporaries in the heap (:func:`keep_chunks_in_heap`):
The gold, the metrics and the ``torch`` candidate work in row chunks of a few MB, and
every torch op allocates its result. glibc serves allocations from 128 KiB up (its
threshold adapts, but trimming hands the memory back) with fresh ``mmap`` pages, so
each op on a 4 MB chunk first takes ~1000 page faults: measured here, the accuracy
metrics' update of one 6 x 151936 chunk went from 13.2 ms to 5.8 ms with the settings
below. GB-sized tensors still come from ``mmap`` and go back to the system when freed;
at most ``TRIM_BYTES`` of freed heap stays mapped.
"""

from __future__ import annotations

import os
import sys

from kernelcheck.environment import worker_defaults
from kernelcheck.memory import libc_function

MMAP_BYTES = 32 << 20  # allocations below this come from the heap
TRIM_BYTES = 128 << 20  # freed heap above this much is returned to the system
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_chunks_in_heap() -> bool:
    """Tune glibc's malloc as above; False (and nothing changed) on another C library."""
    mallopt = libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)
    )


KEEP_LARGE = "libkc_keep_large.so"
NO_KEEP_LARGE_ENV = "KERNELCHECK_NO_KEEP_LARGE"


def worker_environment() -> dict[str, str]:
    """The environment of an isolated worker: this one, with ``libkc_keep_large`` preloaded
    (Linux, when built; ``KERNELCHECK_NO_KEEP_LARGE=1`` leaves it out).

    The shim (``allocator_cpu/keep_large.c``) keeps the last freed block of 32 MB or more
    mapped for the next one of about its size: a Qwen3 trial's gradient (2.5 GB in fp32) is
    allocated by every backward call, and on a VM that hands freed memory back to its host,
    touching fresh memory costs 1-5 s per GB; the kept block's pages are warm.
    It may only expose memory bugs: a kept block is unreadable (a use after free faults, as
    on the block glibc would unmap), and every block it hands out reads 0xFF bytes (NaN).

    Also the command's own defaults and a short OpenMP spin (``kernelcheck/environment.py``),
    where the user set nothing: the worker is kernelcheck's process, its importer is not.
    """
    env = dict(os.environ)
    env.update(worker_defaults(env))
    if env.get(NO_KEEP_LARGE_ENV, "") not in ("", "0"):
        return env
    shim = _keeper_path()
    if shim is not None:
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [str(shim), env.get("LD_PRELOAD")]))
    return env


def _keeper_path():
    """The built shim (None: not built, or not Linux, where LD_PRELOAD does not apply)."""
    if not sys.platform.startswith("linux"):
        return None
    from kernelcheck.candidates.native.library import find_named

    return find_named(KEEP_LARGE)[0]


def keeper_status() -> dict:
    """``dict(status=available|missing|off, path, reason)`` of the large-block keeper; the
    reason also says how fresh memory is poisoned (``kernelcheck doctor`` prints it)."""
    path = _keeper_path()
    if path is None:
        why = "not built" if sys.platform.startswith("linux") else "Linux only"
        status, where, reason = "missing", None, f"{KEEP_LARGE} {why}"
    elif os.environ.get(NO_KEEP_LARGE_ENV, "") not in ("", "0"):
        status, where, reason = "off", str(path), f"{NO_KEEP_LARGE_ENV} is set"
    else:
        reason = "preloaded in isolated workers (freed blocks unreadable, new ones read 0xFF)"
        status, where = "available", str(path)
    return {"status": status, "path": where, "reason": f"{reason}; {_poison_note()}"}


def _poison_note() -> str:
    """What a case's fresh memory reads (runner/poison.py)."""
    from kernelcheck.runner.poison import cpu_poison_available

    if cpu_poison_available():
        return "fresh memory: torch CPU allocations read NaN in every case"
    return "fresh memory: not poisoned (this torch's libc10 has no junk-fill flag)"
