"""The large-block keeper (``libkc_keep_large``, ``allocator_cpu/keep_large.c``): where it
is, whether it is on, and preloading it into an isolated worker's environment.

The shim keeps the last freed block of 32 MB or more mapped for the next one of about its
size: a Qwen3 trial's gradient (2.5 GB in fp32) is allocated by every backward call, and
on a VM that hands freed memory back to its host, touching fresh memory costs 1-5 s per
GB; the kept block's pages are warm. It may only expose memory bugs: a kept block is
unreadable (a use after free faults, as on the block glibc would unmap), and every block
it hands out reads 0xFF bytes (NaN).
"""

from __future__ import annotations

import os
import sys

KEEP_LARGE = "libkc_keep_large.so"
NO_KEEP_LARGE_ENV = "KERNELCHECK_NO_KEEP_LARGE"


def with_keeper(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the shim preloaded (Linux, when built; ``KERNELCHECK_NO_KEEP_LARGE=1``
    leaves it out)."""
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
    from kernelcheck.native_files import find_named

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
    from kernelcheck.fresh_memory import cpu_poison_available

    if cpu_poison_available():
        return "fresh memory: torch CPU allocations read NaN in every case"
    return "fresh memory: not poisoned (this torch's libc10 has no junk-fill flag)"
