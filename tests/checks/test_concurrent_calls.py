"""concurrent_calls: threads started together, each making its calls, raises handed back,
and the interpreter's switch interval as it was."""

from __future__ import annotations

import sys

import pytest

from kernelcheck.checks import concurrent_calls


def test_every_thread_makes_at_least_its_rounds_and_keeps_its_order():
    counters = [iter(range(1000)), iter(range(1000, 2000))]  # past MAX_CALLS
    runs = concurrent_calls.together([lambda: next(counters[0]), lambda: next(counters[1])], 3, 0)
    assert [len(r) >= 3 for r in runs] == [True, True]
    assert runs[0] == list(range(len(runs[0]))) and runs[1][0] == 1000


def test_a_raise_in_a_thread_is_raised_in_the_caller_and_the_interval_comes_back():
    before = sys.getswitchinterval()

    def boom():
        raise ValueError("kernel raised")

    with pytest.raises(ValueError, match="kernel raised"):
        concurrent_calls.together([boom, lambda: 1], 4)
    assert sys.getswitchinterval() == before


def test_rows_reach_the_work_and_are_never_fewer_than_two():
    assert concurrent_calls.rows_for(1 << 30) == 2
    assert concurrent_calls.rows_for(257) * 257 >= concurrent_calls.WORK
    assert concurrent_calls.rows_for(0) == concurrent_calls.WORK
