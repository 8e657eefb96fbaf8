"""A verdict must not depend on what ran before it (kernelcheck/runner/execute.py, worker.py).

Isolated, each (candidate, shape) is judged in a process that has run no other shape of the
candidate: the worker forks a fresh case process when the shape changes. The candidate in
tests/fixtures/process_state.py decides its row sum by the first vocab its process sees,
like a JIT-compiled kernel; it must fail on every shape, in a run of several as alone.
"""

from __future__ import annotations

import os

import pytest

from kernelcheck.cases.grid import Case
from kernelcheck.runner.channel import Channel
from kernelcheck.runner.execute import needs_fresh_process, process_key
from tests.conftest import run_fp32, with_candidate, with_grid_shapes

A = {"batch": 2, "seq": 16, "vocab": 257}
B = {"batch": 2, "seq": 3, "vocab": 1000}


def _case(vocab: int, dtype: str = "fp32", cand: str = "x") -> Case:
    return Case("logp", cand, "cpu", dtype, (("batch", 2), ("vocab", vocab)), (0,), ("normal",))


def test_a_new_shape_dtype_or_candidate_gets_a_fresh_process_and_the_same_case_does_not():
    assert not needs_fresh_process(None, _case(257))  # a new worker is fresh
    assert not needs_fresh_process(process_key(_case(257)), _case(257))
    assert needs_fresh_process(process_key(_case(257)), _case(257, "bf16"))
    assert needs_fresh_process(process_key(_case(257)), _case(1000))
    assert needs_fresh_process(process_key(_case(257)), _case(257, cand="y"))


def test_an_exact_reader_leaves_the_next_message_for_the_next_process():
    """A case process that retires must not take the next message with it (its successor,
    forked from the worker, reads on from the same pipe)."""
    read_fd, write_fd = os.pipe()
    try:
        sender = Channel(-1, write_fd)
        sender.send("fresh")
        sender.send(("case", 1))
        assert Channel(read_fd, -1, exact=True).recv(5) == "fresh"
        assert Channel(read_fd, -1, exact=True).recv(5) == ("case", 1)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def _invariance(catalog, shapes: list[dict]) -> dict[str, dict[str, str]]:
    """{candidate: {shape: forward_invariance status}} of one isolated fp32 run in plan order."""
    cat = with_candidate(catalog, "first", "process_state:first_shape_split", isolate=True)
    cat = with_grid_shapes(cat, "logp", shapes)
    report = run_fp32(
        cat,
        ["first", "torch"],
        ["forward_invariance"],
        attributes={"with_mask": False},  # the default case of each shape: no sweeps
        isolate=True,
    )
    out: dict[str, dict[str, str]] = {}
    for r in report.results:
        out.setdefault(r.candidate, {})["x".join(map(str, r.shape.values()))] = r.status
    return out


@pytest.mark.slow
def test_a_shape_after_another_is_judged_as_when_it_runs_alone(catalog):
    """With one process for all of a candidate's cases, the shape that came second passed
    (its process had taken its split from the first); each shape now fails as it does
    alone, and the honest candidate passes both."""
    both = _invariance(catalog, [A, B])
    alone = _invariance(catalog, [B])
    assert both["first"] == {"2x16x257": "fail", "2x3x1000": "fail"}
    assert alone["first"] == {"2x3x1000": "fail"}
    assert set(both["torch"].values()) == {"pass"}


@pytest.mark.slow
def test_each_dtype_is_judged_as_when_it_runs_alone(catalog, monkeypatch):
    """A kernel cache keyed without the dtype: sharing one process, the dtype that came
    second failed forward_accuracy, and its repro (that dtype alone) passed. Each dtype
    now gets a process of its own, and contract's calls in the other dtypes fail it in
    every case, alone or not."""
    from kernelcheck import api

    monkeypatch.setattr(api, "concurrency", lambda *args: 1)  # one worker: one after another
    cat = with_candidate(catalog, "cached", "broken_logp:kernel_cache_without_dtype", isolate=True)
    statuses = {}
    for dtypes in ("fp32,bf16", "bf16"):
        report = api.run(cat, "logp", candidate_names=["cached"], device="cpu",
                         dtype_names=dtypes, shape=A, seeds=[0], distributions="normal",
                         check_names=["forward_accuracy", "contract"],
                         attributes={"with_mask": False}, sweeps=False)  # fmt: skip
        statuses[dtypes] = {(r.dtype, r.check): r.status for r in report.results}
    assert statuses["fp32,bf16"][("bf16", "forward_accuracy")] == "pass"
    assert statuses["fp32,bf16"][("bf16", "contract")] == "fail"
    assert statuses["bf16"] == {("bf16", "forward_accuracy"): "pass", ("bf16", "contract"): "fail"}
