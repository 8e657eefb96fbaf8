"""Rows of a mixed trial: a selection of its distributions' rows, compacted and named
back by their place in the trial."""

from __future__ import annotations

from kernelcheck.checks.rows import row_selection


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
