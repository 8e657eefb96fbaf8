"""Running a block at another CPU thread count, or in torch's deterministic mode."""

from __future__ import annotations

import sys
import warnings
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


@contextmanager
def deterministic_algorithms():
    """Run a block under ``torch.use_deterministic_algorithms(True)`` (a trainer's
    setting, which a rollout engine seldom shares), warning rather than raising where an
    op has no deterministic form, its warnings silenced; then restore the settings. A
    kernel that takes another path in this mode shows it (``torch.empty`` fills with NaN
    in it: poisoned, never zeroed). Inductor's ``deterministic`` is set as that function
    sets it, where a candidate loaded Inductor (the caller has called it before): the
    function itself would import it, 1.8 s in every case process."""
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    inductor = sys.modules.get("torch._inductor.config")
    inductor_mode = None if inductor is None else inductor.deterministic
    if inductor is not None:
        inductor.deterministic = True
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
        if inductor is not None:
            inductor.deterministic = inductor_mode
