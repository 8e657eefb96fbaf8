"""Fresh memory reads as NaN while a case runs, never as zeros or as the last call's values.

Why: a kernel that leaves some output elements unwritten (the rows of out-of-range
targets, say, whose value must be 0.0) passes every check when its output lands on zeroed
pages, or on a freed output of the previous call holding the right values: glibc's heap
hands a freed small block straight back, and the caching allocators of CUDA and torch_npu
hand back their freed blocks as they were. The environment of a case may only expose such
bugs, so every source of fresh memory is poisoned:

- torch's CPU allocator: its junk fill (``kernelcheck/fresh_memory.py``) is on while a
  candidate's code runs, its import and each call, in every process: every tensor the
  candidate allocates reads NaN until written. Importing kernelcheck changes nothing in
  the importer's process.
- native blocks of 32 MB or more in isolated workers: the large-block keeper
  (``allocator_cpu/keep_large.c``) fills every block it hands out with 0xFF bytes and
  makes a freed one unreadable.
- CUDA and NPU (best effort, **unverified on hardware**):
  :func:`poison_cached_device_memory` fills the caching allocator's free blocks with 0xFF
  bytes before each case, so the case's first allocations read NaN. Blocks freed and
  reused within the case keep their values: torch offers no CUDA junk fill, and
  ``fill_uninitialized_memory`` acts only with ``torch.use_deterministic_algorithms(True)``,
  which changes the kernels that run (and would hide nondeterminism), so it is not used.
"""

from __future__ import annotations

# what a device's cache is primed with before it is poisoned, so a case's first small and
# large allocations find a poisoned block; requests up to SMALL_MAX take small-pool blocks
SMALL_MAX = 1 << 20
PRIME_BYTES = (512, SMALL_MAX, 32 << 20)


def _free_block_pieces(backend, index: int) -> list[int]:
    """Sizes to allocate to take every free block of the caching allocator on device
    ``index``: a large block at once, a small-pool block (requests up to ``SMALL_MAX``) in
    pieces no larger than that, as only such requests are served from it."""
    pieces = []
    for segment in backend.memory_snapshot():
        if segment.get("device") != index:
            continue
        small = segment.get("segment_type") == "small"
        for block in segment.get("blocks", ()):
            size = block["size"] if block.get("state") == "inactive" else 0
            while size > 0:
                pieces.append(min(size, SMALL_MAX) if small else size)
                size -= pieces[-1]
    return sorted(pieces, reverse=True)


def poison_cached_device_memory(device: str) -> int:
    """Fill the caching allocator's free blocks (CUDA, or torch_npu's, which mirrors its
    API) with 0xFF bytes, NaN in every float dtype, after priming it with a small and a
    large block; the number of bytes filled.

    A no-op (0) on the CPU or without the device. Best effort and **unverified on
    hardware**: each free block is taken by allocating its size (the allocator picks the
    best fit), filled and freed again; memory it has not cached yet is not filled.
    """
    kind = device.split(":")[0]
    if kind not in ("cuda", "npu"):
        return 0
    import torch

    backend = getattr(torch, kind, None)  # torch.npu: only once torch_npu is imported
    if backend is None or not backend.is_available():
        return 0
    dev = torch.device(device)
    index = dev.index if dev.index is not None else backend.current_device()
    held = [torch.empty(n, dtype=torch.uint8, device=dev) for n in PRIME_BYTES]
    held.clear()  # back to the cache: its blocks are among the free ones filled below
    filled = 0
    try:
        for size in _free_block_pieces(backend, index):
            held.append(torch.empty(size, dtype=torch.uint8, device=dev).fill_(255))
            filled += size
    except torch.OutOfMemoryError:
        pass  # what is held so far is filled; the rest stays as it was
    backend.synchronize(dev)
    held.clear()
    return filled
