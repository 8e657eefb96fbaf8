"""Rows of a mixed trial: a selection of its distributions' rows, compacted and named
back by their place in the trial."""

from __future__ import annotations

import torch

from kernelcheck.checks.rows import row_selection, shifted_rows


def test_a_selection_compacts_the_judged_rows_and_names_them_back():
    parts = ["normal", "heavy", "equal", "edges"]
    sel = row_selection(parts, ("normal", "equal"))
    judged = [r for r in range(21) if parts[r % 4] in ("normal", "equal")]
    assert sel.local(0, 21).tolist() == judged
    assert sel.local(5, 13).tolist() == [r - 5 for r in judged if 5 <= r < 13]
    assert [sel.original(i) for i in range(len(judged))] == judged
    assert [sel.compact(r) for r in judged] == list(range(len(judged)))
    assert sel.compact(21) == len(judged)
    assert row_selection(parts, ()) is None  # every row
    assert row_selection(parts, tuple(parts)) is None


def test_shifted_rows_are_views_no_one_pitch_walks_with_nan_past_each_sequence():
    pool = torch.arange(12.0).view(4, 3)
    got = shifted_rows(pool, [3, 1, 0, 2], (2, 2), "cpu")
    assert got.shape == (2, 2, 3) and got.stride() == (9, 3, 1)
    assert torch.equal(got.reshape(4, 3), pool[[3, 1, 0, 2]])
    with_past = torch.as_strided(got, (2, 3, 3), (9, 3, 1))
    assert with_past[:, 2].isnan().all()  # the position past each sequence
    walked = torch.as_strided(got, (4, 3), (3, 1))  # one pitch from the first row
    assert not torch.equal(walked, got.reshape(4, 3))
    ids = shifted_rows(torch.tensor([5, 6, 7]), [2, 0], (2, 1), "cpu")
    assert ids.tolist() == [[7], [5]] and not ids.is_contiguous()
