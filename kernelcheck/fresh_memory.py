"""torch's CPU junk fill, switched on while a candidate's own code runs.

libc10's global ``FLAGS_caffe2_cpu_allocator_do_junk_fill`` makes torch's CPU allocator
fill every allocation with the 32-bit pattern 0x7fedbeef (NaN in fp32; in bf16 and fp16
every other element is NaN; in fp64 a huge finite 1.7e308), so an output element a kernel
leaves unwritten reads NaN, never zeros or the last call's values.

It is on exactly while candidate code runs: its import and each of its calls (forward,
backward), in every process (``checks/context.py``, ``runner/case.py``). Every tensor the
candidate allocates then is poisoned. kernelcheck's own allocations between calls (the
inputs it places, the gold, the metrics) are written in full before anyone reads them,
so poisoning them only cost time: on for a whole worker's life, the fill took 5 of the
default logp run's 35 seconds (30.0 s without it). Whatever was set before comes back
after each call, so an importer's process keeps its own setting.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

JUNK_FLAG = "FLAGS_caffe2_cpu_allocator_do_junk_fill"
_C10_NAMES = ("libc10.so", "libc10.dylib", "c10.dll")


@functools.cache
def _junk_flag() -> ctypes.c_bool | None:
    """torch's CPU junk-fill switch, or None where this torch's libc10 does not export it."""
    import torch

    lib_dir = Path(torch.__file__).parent / "lib"
    for name in _C10_NAMES:
        if (lib_dir / name).exists():
            try:
                return ctypes.c_bool.in_dll(ctypes.CDLL(str(lib_dir / name)), JUNK_FLAG)
            except (OSError, ValueError):
                return None
    return None


def cpu_poison_available() -> bool:
    """Whether torch's CPU allocations can be poisoned here (the flag exists)."""
    return _junk_flag() is not None


def set_cpu_poison(on: bool) -> bool | None:
    """Switch torch's CPU junk fill; the previous setting (None: not available here)."""
    flag = _junk_flag()
    if flag is None:
        return None
    previous = bool(flag.value)
    flag.value = on
    return previous


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Every torch CPU allocation in the block reads NaN until written; the previous
    setting comes back after it."""
    previous = set_cpu_poison(True)
    try:
        yield
    finally:
        if previous is not None:
            set_cpu_poison(previous)
