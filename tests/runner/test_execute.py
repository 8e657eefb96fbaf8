"""The executor's workers (kernelcheck/runner/execute.py): one per case running at a time,
per candidate, reused once idle."""

from __future__ import annotations

from kernelcheck.cases.grid import Case
from kernelcheck.runner import execute
from kernelcheck.runner.execute import Executor


def _case(cand: str, vocab: int) -> Case:
    return Case("logp", cand, "cpu", "fp32", (("batch", 2), ("vocab", vocab)), (0,), ("normal",))


class FakeWorker:
    """Stands for an isolated worker: remembers the shape it ran last."""

    def __init__(self):
        self.last_shape = None


def test_a_busy_workers_candidate_gets_another_and_idle_ones_are_reused(monkeypatch):
    monkeypatch.setattr(execute, "IsolatedWorker", FakeWorker)
    ex = Executor()
    a, b = _case("torch", 33), _case("torch", 65)
    first = ex._take_worker(a)
    second = ex._take_worker(b)  # the first still busy: a second worker
    assert first is not second
    first.last_shape, second.last_shape = a.shape, b.shape
    ex.idle["torch"] += [first, second]
    assert ex._take_worker(b) is second  # the idle one that ran this shape last
    assert ex._take_worker(_case("torch", 129)) is first
    assert ex._take_worker(_case("cpu", 33)) not in (first, second)  # per candidate
    assert len(ex.workers["torch"]) == 2


def test_no_worker_once_the_run_is_closing(monkeypatch):
    monkeypatch.setattr(execute, "IsolatedWorker", FakeWorker)
    ex = Executor()
    ex.close()
    assert ex._take_worker(_case("torch", 33)) is None
