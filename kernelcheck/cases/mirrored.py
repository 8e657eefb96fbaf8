"""A batch of billions of elements that costs the memory of a few hundred rows.

A kernel that computes a flat element offset in 32 bits (``row * vocab + col`` in an
``int``) reads another row, or outside the tensor, once a batch passes 2^31 elements: a
4 GiB bf16 input. Only the rows at the batch's two ends are judged (``far_rows``), and
every row between them merely has to be some other row, so the batch is built in virtual
memory: a small file in memory holds the head rows, the tail rows and a block of filler
rows, and the batch's address range maps the head once, the filler block again and again,
and the tail once (Linux ``memfd_create`` and ``mmap``). A candidate reads 4 GiB; the
machine holds a few hundred rows. A row's bytes must be a whole number of pages, so the
maps line up with rows. The mapping is shared: a candidate that writes its input (a bug
of its own, judged by ``integrity``) changes every copy of that filler row.

A process's resident size counts each mapped page, so its RSS reads as the batch's whole
size although the pages behind it are the file's few.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import weakref

import torch

from kernelcheck.memory import libc_function

PAGE = mmap.PAGESIZE
PAGE_ELEMENTS_16 = PAGE // 2  # 16-bit elements in a page: a row of a multiple lines up
_MAP_FIXED = 0x10
_MAP_NORESERVE = 0x4000


@functools.cache
def mirroring_available() -> str | None:
    """Why a mirrored batch cannot be built here (None: it can): a file in memory is made
    and closed to find out (a sandbox may refuse ``memfd_create``)."""
    if not hasattr(os, "memfd_create"):
        return "no memfd_create (Linux only)"
    if libc_function("mmap") is None or libc_function("munmap") is None:
        return "no mmap in the C library"
    try:
        os.close(os.memfd_create("kernelcheck-probe"))
    except OSError as exc:
        return f"memfd_create refused: {exc}"
    return None


def rows_line_up(inner: tuple[int, ...], dtype: torch.dtype) -> bool:
    """Whether a row of ``inner`` elements of ``dtype`` is a whole number of pages."""
    return math.prod(inner) * dtype.itemsize % PAGE == 0


def _mmap():
    fn = libc_function("mmap")
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.argtypes += [ctypes.c_long]
    return fn


def _munmap():
    fn = libc_function("munmap")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return fn


def mirrored_rows(source: torch.Tensor, judged: int, rows: int) -> torch.Tensor:
    """A ``[rows, *inner]`` CPU tensor whose first ``judged`` rows are ``source``'s first,
    whose last ``judged`` are its next ``judged``, and whose rows between repeat its
    remaining rows (the fillers) in turn, from a file of ``source``'s size.

    ``source`` is ``[2 * judged + fillers, *inner]`` with rows of whole pages
    (:func:`rows_line_up`) and ``rows >= 2 * judged``. The mapping is released when the
    last tensor over it is.
    """
    fillers = source.shape[0] - 2 * judged
    row_bytes = source[0].numel() * source.element_size()
    if not rows_line_up(tuple(source.shape[1:]), source.dtype) or fillers < 1:
        raise ValueError("mirrored rows need rows of whole pages and at least one filler")
    fd = os.memfd_create("kernelcheck-mirrored-rows")
    try:
        os.ftruncate(fd, source.numel() * source.element_size())
        with mmap.mmap(fd, source.numel() * source.element_size()) as file_map:
            flat = torch.frombuffer(file_map, dtype=source.dtype)
            flat.copy_(source.contiguous().reshape(-1))
            del flat
        base = _map_batch(fd, row_bytes, judged, fillers, rows)
    finally:
        os.close(fd)  # the maps keep the file
    whole = rows * row_bytes
    buffer = (ctypes.c_char * whole).from_address(base)
    weakref.finalize(buffer, _munmap(), base, whole)
    return torch.frombuffer(buffer, dtype=source.dtype).view(rows, *source.shape[1:])


def _map_batch(fd: int, row_bytes: int, judged: int, fillers: int, rows: int) -> int:
    """Reserve ``rows`` rows of address space (inaccessible: it commits no memory) and map
    the file's head rows at its start, its filler block over and over between, its tail
    rows at its end, every page of it; the address."""
    mmap_, rw, shared = _mmap(), mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED
    anonymous = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
    base = mmap_(None, rows * row_bytes, 0, anonymous, -1, 0)  # PROT_NONE
    if base in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"cannot reserve {rows * row_bytes} bytes of address space")

    def put(row: int, file_row: int, count: int) -> None:
        at = base + row * row_bytes
        got = mmap_(at, count * row_bytes, rw, shared, fd, file_row * row_bytes)
        if got != at:
            _munmap()(base, rows * row_bytes)
            raise MemoryError(f"cannot map rows {row} to {row + count} of the batch")

    put(0, 0, judged)
    row = judged
    while row < rows - judged:
        count = min(fillers, rows - judged - row)
        put(row, 2 * judged, count)
        row += count
    put(rows - judged, judged, judged)
    return base
