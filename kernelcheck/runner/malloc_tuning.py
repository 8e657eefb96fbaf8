"""Keep chunk-sized temporaries in the heap: glibc's malloc tuned for kernelcheck's own
processes (the command and its isolated workers), never by importing the library.

The gold, the metrics and the ``torch`` candidate work in row chunks of a few MB, and
every torch op allocates its result. glibc serves allocations from 128 KiB up (its
threshold adapts, but trimming hands the memory back) with fresh ``mmap`` pages, so
each op on a 4 MB chunk first takes ~1000 page faults: measured here, the accuracy
metrics' update of one 6 x 151936 chunk went from 13.2 ms to 5.8 ms with the settings
below. GB-sized tensors still come from ``mmap`` and go back to the system when freed;
at most ``TRIM_BYTES`` of freed heap stays mapped.
"""

from __future__ import annotations

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
