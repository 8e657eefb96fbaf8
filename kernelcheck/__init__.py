"""kernelcheck: verify compute kernels against a float64 gold.

The pipeline, one package per stage: ``spec`` (TOML op specs) -> ``cases`` (the
dtype x shape grid and seeded inputs) -> ``candidates`` (the kernels under test) ->
``checks`` (pure verdicts) -> ``report`` (renderers). ``runner`` drives the stages and
``api`` is the library surface the CLI, the tests and the pytest plugin call.
"""

import os

# torch autoloads installed device backends on ``import torch``; a torch_npu without
# CANN then breaks torch itself.  kernelcheck imports torch_npu explicitly, and only
# when the npu device is asked for, so autoload is off unless the user set it.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

# Trials at the Qwen3 vocab allocate and free GB-sized tensors over and over; with 4 KiB
# pages every fresh one costs a page fault per 4 KiB. Transparent huge pages for torch's
# large CPU allocations made an isolated 2048 x 151936 fp32 case 1.6x faster (75 s ->
# 47 s on 2 cores). Read by torch when it allocates; the user's setting wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
