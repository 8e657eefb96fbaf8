"""kernelcheck's processes keep chunk-sized temporaries in the heap (runner/malloc_tuning.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# 100 chunk-sized results (3.6 MB each, as the gold and the metrics make), each freed
# by the next: the page faults they cost, in a fresh interpreter
_SCRIPT = """
import resource, sys, torch
if sys.argv[1] == "tuned":
    from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap
    assert keep_chunks_in_heap()
x = torch.randn(6, 151936)
(x * 2).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    y = x * 2
    z = y + 1
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="not glibc: no mallopt to tune")
@pytest.mark.slow
def test_chunk_temporaries_stop_costing_page_faults():
    """Without the setting each 3.6 MB result maps fresh pages (~900 faults each); with
    it they reuse the heap (measured here: 10659 against 772)."""
    # the fewest of three runs each: other activity on the machine only adds faults
    # (a 6243-fault tuned run was seen once under CI), never takes any away
    plain = min(_faults("plain") for _ in range(3))
    tuned = min(_faults("tuned") for _ in range(3))
    assert tuned * 4 < plain, (plain, tuned)


def test_the_command_and_its_workers_tune_it_and_the_library_does_not():
    """A process setting: the `kernelcheck` command and the isolated worker make it; an
    importer of the library API (a test suite, the pytest plugin) keeps its own malloc."""
    import inspect

    from kernelcheck import api, cli
    from kernelcheck.runner import worker

    assert "keep_chunks_in_heap()" in inspect.getsource(cli.entry)
    assert "keep_chunks_in_heap()" in inspect.getsource(worker.main)
    assert "keep_chunks_in_heap" not in inspect.getsource(api)
