"""Running a block at another CPU thread count."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(n: int):
    """Run a block at ``n`` CPU threads (torch's intra-op pool, which candidates read
    through ``torch.get_num_threads()``), then restore the count: a kernel whose results
    follow the thread count shows it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
