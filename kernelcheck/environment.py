"""The environment variables of kernelcheck's own processes, never of an importer's.

The ``kernelcheck`` command (:mod:`kernelcheck.__main__`) sets them in its own process
before torch loads, and its isolated workers get them in the environment they start
with (``runner/worker_environment.py``). Importing ``kernelcheck``, its API or its pytest plugin
sets nothing: a user's process keeps its own settings. Each is a default: a value the
user set wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# torch autoloads installed device backends on ``import torch``; a torch_npu without
# CANN then breaks torch itself. kernelcheck imports torch_npu explicitly, and only when
# the npu device is asked for.
AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

# Trials at the Qwen3 vocab allocate and free GB-sized tensors over and over; with 4 KiB
# pages every fresh one costs a page fault per 4 KiB. Transparent huge pages for torch's
# large CPU allocations made an isolated 2048 x 151936 fp32 case 1.6x faster (75 s ->
# 47 s on 2 cores). Read by torch when it allocates.
HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1"}

# After each parallel region torch's OpenMP threads spin for ~300,000 pause instructions
# (milliseconds) before they sleep. kernelcheck's own native loops (the comparisons, the
# row digests, the cpu candidate) start their threads right after torch ops, and a
# spinning OpenMP thread held the other core: on 2 cores a 2-thread comparison of one gold
# chunk took as long as with 1 thread (4.5-5.3 ns an element), and 2.9 ns with a spin
# count of 10,000, which still covers the microsecond gaps between torch's own
# back-to-back ops (OMP_WAIT_POLICY=PASSIVE instead slowed those). libgomp reads it when
# torch loads it, so only fresh processes (the isolated workers) get it.
SHORT_SPIN = {"GOMP_SPINCOUNT": "10000"}


def command_defaults() -> dict[str, str]:
    """What the ``kernelcheck`` command sets in its own process before importing torch."""
    return {**AUTOLOAD, **HUGE_PAGES}


def worker_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """What an isolated worker starts with on top of ``env`` (the short OpenMP spin only
    where the user chose no wait policy)."""
    extra = command_defaults()
    if "OMP_WAIT_POLICY" not in env:
        extra.update(SHORT_SPIN)
    return {k: v for k, v in extra.items() if k not in env}


def set_command_defaults() -> None:
    """The command's own process: its defaults, where the user set nothing."""
    for name, value in command_defaults().items():
        os.environ.setdefault(name, value)
