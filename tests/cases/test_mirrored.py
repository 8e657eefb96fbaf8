"""A batch mirrored in virtual memory: its head and tail rows are the source's, the rows
between repeat its fillers, and it costs the source's pages (kernelcheck/cases/mirrored.py)."""

from __future__ import annotations

import pytest
import torch

from kernelcheck.cases.mirrored import PAGE, mirrored_rows, mirroring_available, rows_line_up

pytestmark = pytest.mark.skipif(mirroring_available() is not None, reason="Linux only")


def test_the_batch_holds_the_head_the_tail_and_the_fillers_in_turn():
    width = PAGE // 2  # one page of bf16
    source = torch.randn(2 * 3 + 5, width).to(torch.bfloat16)
    batch = mirrored_rows(source, 3, 1000)
    assert batch.shape == (1000, width) and batch.is_contiguous()
    assert torch.equal(batch[:3], source[:3]) and torch.equal(batch[-3:], source[3:6])
    between = torch.arange(3, 997)
    assert torch.equal(batch[between], source[6 + (between - 3) % 5])


def test_a_batch_past_2_31_elements_is_built_from_a_few_rows():
    width = 151_552
    source = torch.randn(2 * 2 + 2, width).to(torch.bfloat16)
    rows = (1 << 31) // width + 4
    batch = mirrored_rows(source, 2, rows)
    assert batch.numel() > 1 << 31
    middle = rows // 2
    assert torch.equal(batch[-2:], source[2:4])
    assert torch.equal(batch[middle], source[4 + (middle - 2) % 2])


def test_rows_that_are_not_whole_pages_are_refused():
    assert rows_line_up((2048,), torch.bfloat16) and not rows_line_up((2049,), torch.bfloat16)
    with pytest.raises(ValueError, match="whole pages"):
        mirrored_rows(torch.zeros(5, 2049, dtype=torch.bfloat16), 2, 100)
