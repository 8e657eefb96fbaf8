"""kernelcheck's processes keep chunk-sized temporaries in the heap (runner/malloc_tuning.py)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

# glibc's own account (mallinfo2) of where chunk-sized results (3.6 MB, as the gold and
# the metrics make; 20 MB) come from and whether freeing one hands the heap back, in a
# fresh interpreter. Deterministic, unlike page-fault counts, which other activity moves.
_SCRIPT = """
import ctypes, json, sys, torch
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    ).split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "tuned":
    from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap
    assert keep_chunks_in_heap()
def mapped(): return libc.mallinfo2().hblkhd
def heap(): return libc.mallinfo2().arena
out = {}
for name, numel in (("chunk", 6 * 151936), ("large", 5 << 20)):
    before = mapped()
    x = torch.empty(numel)
    out[name + "_mmapped"] = mapped() > before
    held = heap()
    del x
    out[name + "_heap_kept"] = heap() >= held
print(json.dumps(out))
"""


def _malloc_account(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.split("\n")[-2])


def _has_mallinfo2() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
    reason="not glibc >= 2.33: no mallopt to tune or no mallinfo2 to observe it",
)
def test_chunk_temporaries_come_from_the_heap_and_stay_there():
    """Without the setting glibc maps a fresh chunk-sized result with mmap (~900 page
    faults each time); with it the result comes from the heap and freeing it keeps the
    heap (measured: the metrics' update of one 6 x 151936 chunk, 13.2 ms -> 5.8 ms)."""
    plain = _malloc_account("plain")
    assert plain["chunk_mmapped"], plain  # the observation can see an mmap
    tuned = _malloc_account("tuned")
    assert tuned == {
        "chunk_mmapped": False,
        "chunk_heap_kept": True,
        "large_mmapped": False,
        "large_heap_kept": True,
    }, tuned


def test_the_command_and_its_workers_tune_it_and_the_library_does_not():
    """A process setting: the `kernelcheck` command and the isolated worker make it; an
    importer of the library API (a test suite, the pytest plugin) keeps its own malloc."""
    import inspect

    from kernelcheck import api, cli
    from kernelcheck.runner import worker

    assert "keep_chunks_in_heap()" in inspect.getsource(cli.entry)
    assert "keep_chunks_in_heap()" in inspect.getsource(worker.main)
    assert "keep_chunks_in_heap" not in inspect.getsource(api)
