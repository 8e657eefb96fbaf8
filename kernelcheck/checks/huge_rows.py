"""The batch and the calls of ``shape_sweep``'s huge lead: rows past 2^31 elements.

The batch is mirrored in virtual memory (``cases/mirrored.py``), so building it costs a
few hundred rows. What the candidate allocates is its own: a kernel that upcasts a 4 GiB
bf16 input whole to fp32 takes 8 GiB more, and the gradient of a 2^31-element input is
itself 4 GiB. So each call on the CPU runs alone on the machine (a lock every kernelcheck
process takes) within half the memory available then, as an address-space limit
(``RLIMIT_AS``): an allocation past it raises, and the rows are then not judged, where
the system would otherwise kill the process, or a neighbour's. The limit is the whole
process's, so it is set only in a case process of its own (an isolated worker's), never
in a process that holds a GPU context (its driver reserves address space far past its
memory) or an importer's.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kernelcheck.cases.mirrored import PAGE, mirrored_rows, rows_line_up
from kernelcheck.checks.far_rows import JUDGED
from kernelcheck.checks.outcome import CandidateFault, is_out_of_memory
from kernelcheck.checks.rows import placed_rows
from kernelcheck.memory import address_space_limit, available_memory_bytes

CALL_BUDGET_SHARE = 2  # a call may take half the memory available (one call at a time)
SMALL_PLACED = 1 << 24  # a tensor of the batch this small (ids, a logp's upstream) is copied
LOCK_NAME = "kernelcheck-huge-rows.lock"


class HugeRowsUnjudged(Exception):
    """The huge lead could not be judged here; the message says why. ``out_of_memory``:
    a call ran out of its budget (a call forward only may not)."""

    out_of_memory = False


def mirrored_placement(v: torch.Tensor, order: list[int], lead: tuple, device) -> torch.Tensor:
    """``v``'s rows as ``far_rows.row_order`` places them, mirrored (its head, tail and
    filler rows in that order, as the small draw holds them); a small tensor (a row of a
    few elements) as a plain copy. Raises :class:`HugeRowsUnjudged` where a large one's
    rows are not whole pages, or the batch cannot be built."""
    inner = tuple(v.shape[1:])
    if not rows_line_up(inner, v.dtype):
        if len(order) * v[0].numel() <= SMALL_PLACED:
            return placed_rows(v, order, lead, device)
        row_bytes = v[0].numel() * v.element_size()
        raise HugeRowsUnjudged(f"rows of {row_bytes} bytes are not whole pages of {PAGE}")
    try:
        whole = mirrored_rows(v, JUDGED, len(order)).view(*lead, *inner)
        return whole if torch.device(device).type == "cpu" else whole.to(device)
    except (OSError, MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not is_out_of_memory(exc):
            raise
        raise HugeRowsUnjudged(f"building the batch: {exc}") from None


@contextmanager
def call_alone_within_budget(device, own_process: bool) -> Iterator[None]:
    """Around one call on the huge batch: the machine's only such call, on the CPU within
    CALL_BUDGET_SHARE of the memory available (see the module's docstring). An
    allocation of kernelcheck's own that runs out there (the copy of an upstream gradient
    it hands, say) leaves the rows unjudged too; the candidate's raises its fault."""
    cpu = torch.device(device).type == "cpu"
    if cpu and not own_process:
        raise HugeRowsUnjudged("in process: its memory budget would limit the whole process")
    if cpu and torch.cuda.is_initialized():
        raise HugeRowsUnjudged("a GPU context is open: no address-space limit can be set")
    path = os.path.join(tempfile.gettempdir(), LOCK_NAME)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        budget = (available_memory_bytes() or 0) // CALL_BUDGET_SHARE
        try:
            if not cpu:
                yield
                return
            with address_space_limit(budget) as limited:
                if not limited:
                    raise HugeRowsUnjudged("no address-space limit can be set here")
                yield
        except CandidateFault:
            raise
        except (MemoryError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and not is_out_of_memory(exc):
                raise
            unjudged = HugeRowsUnjudged(f"kernelcheck's own copies past the budget: {exc}")
            unjudged.out_of_memory = True
            raise unjudged from None
