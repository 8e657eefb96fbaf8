"""Freed heap memory goes back before a GB-sized call; an address-space budget makes an
allocation past it raise (kernelcheck/memory.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# 30 chunk-sized temporaries (4 MB each, as the gold and the draws make) freed but kept by
# glibc in the heap (kernelcheck's own processes keep them: runner/malloc_tuning.py); the
# resident KB before and after the trim
_SCRIPT = """
import torch
from kernelcheck.memory import release_free_heap
from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap
keep_chunks_in_heap()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4
keep = [torch.ones(1 << 20) for _ in range(30)]
del keep
before = rss()
ok = release_free_heap()
print(ok, before, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="not glibc: no malloc_trim")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_release_free_heap_returns_freed_chunks():
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True
    ).stdout.split()
    ok, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert ok
    assert before - after > 60_000, (before, after)  # most of the 120 MB went back


# in a process of its own: the limit is the whole process's while it holds
_LIMIT_SCRIPT = """
import resource, torch
from kernelcheck.memory import address_space_limit
before = resource.getrlimit(resource.RLIMIT_AS)
with address_space_limit(256 << 20) as limited:
    small = torch.empty(1 << 20)  # 4 MB: within
    try:
        torch.empty(1 << 30)  # 4 GiB: past it
        refused = "no"
    except RuntimeError as exc:
        refused = "can't allocate memory" in str(exc)
back = resource.getrlimit(resource.RLIMIT_AS) == before
print(limited, refused, back, torch.empty(1 << 28).numel())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_an_allocation_past_the_address_space_budget_raises_and_the_limit_comes_back():
    run = subprocess.run([sys.executable, "-c", _LIMIT_SCRIPT], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "True", str(1 << 28)], run.stdout
