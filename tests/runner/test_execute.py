"""The executor's workers (kernelcheck/runner/execute.py): one per case running at a time,
one pool for every candidate, reused once idle."""

from __future__ import annotations

from kernelcheck.cases.grid import Case
from kernelcheck.runner import execute
from kernelcheck.runner.execute import Executor, process_key


def _case(cand: str, vocab: int) -> Case:
    return Case("logp", cand, "cpu", "fp32", (("batch", 2), ("vocab", vocab)), (0,), ("normal",))


class FakeWorker:
    """Stands for an isolated worker: remembers the (candidate, shape) it ran last."""

    def __init__(self):
        self.last = None


def test_a_busy_worker_means_another_and_idle_ones_serve_any_candidate(monkeypatch):
    monkeypatch.setattr(execute, "IsolatedWorker", FakeWorker)
    ex = Executor()
    a, b = _case("torch", 33), _case("cpu", 65)
    first = ex._take_worker(a)
    second = ex._take_worker(b)  # the first still busy: a second worker
    assert first is not second
    first.last, second.last = process_key(a), process_key(b)
    ex.idle += [first, second]
    assert ex.idle_candidates() == {"torch", "cpu"}
    assert ex._take_worker(_case("cpu", 65)) is second  # its case process goes on
    assert ex._take_worker(_case("cpu", 129)) is first  # else any idle one: one pool
    assert len(ex.workers) == 2  # no start beyond the cases running side by side
    ex.idle += [first, second]
    assert ex._take_worker(_case("cpu", 257)) is second  # the one that ran this candidate


def test_no_worker_once_the_run_is_closing(monkeypatch):
    monkeypatch.setattr(execute, "IsolatedWorker", FakeWorker)
    ex = Executor()
    ex.close()
    assert ex._take_worker(_case("torch", 33)) is None


def _timeouts(**kwargs) -> dict[str, float]:
    from pathlib import Path

    from kernelcheck import api
    from kernelcheck.spec.load import load_catalog

    spec = Path(__file__).parents[1] / "specs" / "log_softmax.toml"
    plan = api.plan(load_catalog([spec]), "log_softmax", candidate_names=["torch"], **kwargs)
    return {c.id: execute.case_timeout(plan.op, c) for c in plan.cases}


def test_a_case_whose_checks_draw_leads_past_2_31_elements_gets_time_for_them():
    """The narrowest dtype's case runs shape_sweep's rows past 2^31 elements and 2^30 more
    (a CI host under load took 126 s over them, its spec's timeout 120 s): 1x the spec's
    timeout more per 1G elements. A case without such leads keeps about the spec's own."""
    timeouts = _timeouts(device="cpu")
    assert timeouts["torch-bf16-4x33"] >= 4 * 120  # the spec's 120 s, and 3x for 3G elements
    assert timeouts["torch-bf16-3x1000"] < 121  # a training batch of 4,096 rows of 1,000
    assert 120 < timeouts["torch-fp32-4x33"] < 240  # the first case's far rows, training batch
    no_sweep = _timeouts(device="cpu", check_names="forward_accuracy,contract")
    assert no_sweep["torch-bf16-4x33"] == 120
