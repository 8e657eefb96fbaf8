"""Whether a file mapping was written (kernelcheck/smaps.py)."""

from __future__ import annotations

from kernelcheck.cases.trial_store import SharedTrials
from kernelcheck.smaps import unwritten


def test_unwritten_tells_a_clean_mapping_from_a_written_one(tmp_path):
    """A shared part is mapped privately: the first write to a page copies it, and the
    kernel counts the copy; a plain tensor is never taken for a clean mapping."""
    import torch

    store = SharedTrials(tmp_path, budget_bytes=1 << 30)
    store.put("k", "inputs", {"x": torch.randn(512, 1024), "t": torch.arange(512)})
    got = store.get("k", "inputs")
    assert float(got["x"].sum()) == float(got["x"].sum())  # read every page: still clean
    assert unwritten(got.values())
    got["x"][300, 7] = 1.5  # one element of one page
    assert not unwritten(got.values()) and unwritten([store.get("k", "inputs")["t"]])
    assert not unwritten([torch.randn(512, 1024)]) and not unwritten([])
