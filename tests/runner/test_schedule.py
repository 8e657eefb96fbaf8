"""Cases side by side (kernelcheck/runner/schedule.py): plan order out, each group's trials
computed once, large cases alone, nothing obtained lost on an interrupt.

A stand-in executor (no kernels: it sleeps, logs, and writes and reads a trial file in
its group's folder) stands for the isolated workers, so these tests see the schedule's
decisions alone; tests/cases/test_trial_store.py counts the gold calls of real isolated
workers under this schedule.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from kernelcheck import api
from kernelcheck.cases.grid import Case
from kernelcheck.errors import Interrupted
from kernelcheck.runner.case import RunOptions
from kernelcheck.runner.schedule import CONCURRENT_ELEMENTS, Schedule, concurrency, with_threads
from kernelcheck.spec import load_catalog

LOGP = load_catalog().ops["logp"]


def _case(cand: str, dtype: str, vocab: int) -> Case:
    return Case("logp", cand, "cpu", dtype, (("batch", 2), ("vocab", vocab)), (0,), ("normal",))


class StandIn:
    """Logs (case id, start, end, store budget) and yields two results per case."""

    def __init__(self, seconds=lambda case: 0.05, gate: threading.Event | None = None):
        self.seconds, self.gate = seconds, gate
        self.log: list[tuple[str, float, float, int]] = []
        self.lock = threading.Lock()

    def idle_candidates(self) -> set[str]:
        return set()  # no worker is kept between cases

    def run(self, op, case, options):
        t0 = time.monotonic()
        folder = Path(options.shared_dir) if options.shared_dir else None
        assert folder is None or folder.is_dir(), "a group's folder exists while it runs"
        if options.shared_budget:  # the group's first case stores, the others read it
            (folder / f"{case.dtype}-{case.shape_str}.pt").write_text("trial")
        elif folder is not None:
            assert (folder / f"{case.dtype}-{case.shape_str}.pt").is_file()
        yield (case.id, "a")
        if self.gate is not None and case.candidate == "slow":
            self.gate.wait(10)
        time.sleep(self.seconds(case))
        yield (case.id, "b")
        with self.lock:
            self.log.append((case.id, t0, time.monotonic(), options.shared_budget))


def _plan(vocabs=(33, 65, 129)):
    # as api.plan deals them: the candidates of one group one after another
    return [_case(c, "fp32", v) for v in vocabs for c in ("torch", "cpu")]


def _overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_side_by_side_keeps_plan_order_and_runs_each_group_one_case_at_a_time(tmp_path):
    cases = _plan()
    ex = StandIn(seconds=lambda c: 0.3 if c.candidate == "torch" else 0.1)
    sched = Schedule(ex, LOGP, cases, RunOptions(), tmp_path, budget=1000, jobs=2)
    out = list(sched.run())
    # plan order: each case's two results, then its close (None)
    want = [(i, r) for i, c in enumerate(cases) for r in ((c.id, "a"), (c.id, "b"), None)]
    assert [(i, r) for i, _, r in out] == want
    spans = {s[0]: s for s in ex.log}
    assert any(_overlap(spans[a.id], spans[b.id]) for a in cases for b in cases if a != b)
    for k in range(0, len(cases), 2):  # one group: its two candidates never at once
        first, second = sorted((spans[cases[k].id], spans[cases[k + 1].id]), key=lambda s: s[1])
        assert not _overlap(first, second)
        assert first[3] == 1000 and second[3] == 0  # the first stores, the last only reads
    assert not any(tmp_path.iterdir()), "every group's stored trials are dropped"


def test_a_large_case_runs_alone_after_every_earlier_case(tmp_path):
    big = CONCURRENT_ELEMENTS // 2 + 1  # batch 2 x this: above the threshold
    cases = _plan((33, big, 65))
    ex = StandIn()
    list(Schedule(ex, LOGP, cases, RunOptions(), tmp_path, budget=1000, jobs=2).run())
    spans = {s[0]: s for s in ex.log}
    large = [c.id for c in cases if c.sizes["vocab"] == big]
    for lid in large:
        assert not any(_overlap(spans[lid], spans[o]) for o in spans if o != lid)
        earlier = [c.id for c in cases[: [c.id for c in cases].index(lid)]]
        assert all(spans[e][2] <= spans[lid][1] for e in earlier)


def test_one_job_runs_in_plan_order_without_threads(tmp_path):
    cases = _plan()
    ex = StandIn()
    sched = Schedule(ex, LOGP, cases, RunOptions(), tmp_path, budget=1000, jobs=1)
    seen = []
    for _ in sched.run():
        seen.append(threading.current_thread() is threading.main_thread())
    assert all(seen) and [s[0] for s in ex.log] == [c.id for c in cases]


def test_no_candidate_waits_for_the_others_to_run_out_of_cases(tmp_path):
    """Three candidates, two slots: the one furthest behind gets the next free slot."""
    # many groups: the first two candidates would always find one free
    cases = [_case(c, "fp32", v) for v in range(33, 45) for c in ("a", "b", "c")]
    ex = StandIn(seconds=lambda c: 0.03)
    list(Schedule(ex, LOGP, cases, RunOptions(), tmp_path, budget=1000, jobs=2).run())
    spans = {s[0]: s for s in ex.log}
    by_cand = {c: [spans[k.id] for k in cases if k.candidate == c] for c in "abc"}
    first_start = {c: min(s[1] for s in v) for c, v in by_cand.items()}
    last_end = {c: max(s[2] for s in v) for c, v in by_cand.items()}
    # starved, one candidate would start only once another had run all its cases
    assert max(first_start.values()) < min(last_end.values())


def test_one_candidates_cases_of_other_groups_run_side_by_side(tmp_path):
    """The slow candidate left alone (the fast one done) gets a second worker: its cases
    of two groups must both be running at once to pass the barrier."""
    cases = [_case("fast", "fp32", 33)] + [_case("slow", "fp32", v) for v in (65, 129)]
    both = threading.Barrier(2, timeout=120)

    class Meet(StandIn):
        def run(self, op, case, options):
            yield (case.id, "a")
            if case.candidate == "slow":
                both.wait()  # raises BrokenBarrierError if the other never starts
            yield (case.id, "b")

    out = list(Schedule(Meet(), LOGP, cases, RunOptions(), None, budget=0, jobs=2).run())
    assert [r for _, _, r in out if r is not None] == [(c.id, k) for c in cases for k in ("a", "b")]


def test_a_case_that_ends_beside_a_running_one_is_heard_as_it_ends(tmp_path):
    """Case 1 ends while case 0 still runs: ``on_end`` hears it then (its own time ends
    there), though it is given out only after case 0. The slow case waits for that
    ``on_end``: the order is forced, never a matter of speed."""
    cases = [_case("slow", "fp32", 33), _case("fast", "bf16", 33)]
    gate = threading.Event()
    sched = Schedule(StandIn(gate=gate), LOGP, cases, RunOptions(), None, budget=0, jobs=2)
    events = []

    def on_end(i):
        events.append(("end", i))
        if i == 1:
            gate.set()

    sched.on_end = on_end
    for i, _, res in sched.run():
        if res is None:
            events.append(("out", i))
    gate.set()
    assert events == [("end", 1), ("end", 0), ("out", 0), ("out", 1)]


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")
def test_an_interrupt_keeps_results_obtained_beside_a_running_case(tmp_path):
    """Case 1 finishes while case 0 still runs: its results are held (plan order), and an
    interrupt then must not lose them, nor give out case 0's first result twice."""
    cases = [_case("slow", "fp32", 33), _case("fast", "bf16", 33)]
    gate = threading.Event()
    ex = StandIn(gate=gate)
    sched = Schedule(ex, LOGP, cases, RunOptions(), None, budget=0, jobs=2)

    def interrupt(signum, frame):
        raise Interrupted("SIGALRM")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    got = []
    try:
        with pytest.raises(Interrupted):
            for item in sched.run():
                got.append(item)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sched.stop()
        gate.set()
    assert [r for _, _, r in got] == [(cases[0].id, "a")]  # given out while case 0 ran
    held = sched.held()
    assert [(c.id, r, done) for c, r, done in held] == [
        (cases[1].id, [(cases[1].id, "a"), (cases[1].id, "b")], True)
    ]


def test_a_result_given_out_is_never_held_again():
    """The consumer is interrupted while it handles a result: held() must not list it."""
    cases = [_case("slow", "fp32", 33), _case("fast", "bf16", 33)]
    gate = threading.Event()
    sched = Schedule(StandIn(gate=gate), LOGP, cases, RunOptions(), None, budget=0, jobs=2)
    run = sched.run()
    try:
        first = next(run)
        assert first[2] == (cases[0].id, "a")
    finally:
        sched.stop()
        gate.set()
        run.close()
    assert all(r != first[2] for _, results, _ in sched.held() for r in results)


def test_side_by_side_only_when_every_case_is_isolated():
    catalog = load_catalog()
    kw = dict(device="cpu", dtype_names="fp32", shape={"batch": 2, "vocab": 33})
    kw["candidate_names"] = ["torch", "cpu"]
    isolated = api.plan(catalog, "logp", isolate=True, **kw)
    in_process = api.plan(catalog, "logp", isolate=False, **kw)
    assert concurrency(in_process.op, in_process.cases, False) == 1
    import os

    want = min(len(isolated.cases), os.cpu_count() or 1)  # one case per core
    assert concurrency(isolated.op, isolated.cases, True) == want


def test_cases_side_by_side_share_the_cores_and_a_large_one_takes_them_all(monkeypatch):
    from kernelcheck.runner import schedule
    from kernelcheck.runner.repro import repro_command

    op = load_catalog().ops["logp"]
    monkeypatch.setattr(schedule.os, "cpu_count", lambda: 8)
    big = CONCURRENT_ELEMENTS // 2 + 1
    cases = _plan((33, big))
    assert [c.threads for c in with_threads(op, cases, None, None)] == [2, 2, None, None]  # 4 jobs
    assert [c.threads for c in with_threads(op, cases[:1], None, None)] == [None]  # alone
    assert [c.threads for c in with_threads(op, cases, False, None)] == [None] * 4  # in process
    assert [c.threads for c in with_threads(op, cases, None, 3)] == [3] * 4  # --threads
    monkeypatch.setattr(schedule.os, "cpu_count", lambda: 2)
    first = with_threads(op, cases, None, None)[0]
    assert first.threads == 1 and repro_command(first, "determinism", 0, None).endswith(
        "--threads 1"
    )  # the repro runs it as it ran


def test_a_case_runs_at_its_thread_count_and_the_process_keeps_its_own(catalog):
    """The candidate sees the case's count (it reads torch's, as the cpu kernel does)."""
    import torch

    from kernelcheck.runner.case import run_case
    from tests.conftest import with_candidate

    cat = with_candidate(catalog, "counter", "process_state:reports_thread_count")
    op = cat.ops["logp"]
    before = torch.get_num_threads()
    want = 1 if before > 1 else 2
    case = Case(
        "logp", "counter", "cpu", "fp32", (("batch", 2), ("vocab", 33)), (0,), ("normal",),
        checks=("forward_accuracy",), threads=want,
    )  # fmt: skip
    (res,) = run_case(op, case, RunOptions())
    assert f"ran at {want} threads" in res.message, res.message
    assert torch.get_num_threads() == before


def test_a_free_slot_goes_first_to_the_candidate_an_idle_worker_ran_last(tmp_path):
    """Its case process goes on; the others' order is unchanged (furthest behind first)."""
    cases = _plan()  # torch, cpu per group
    sched = Schedule(StandIn(), LOGP, cases, RunOptions(), tmp_path, budget=1000, jobs=2)
    assert sched._order(set()) == ["torch", "cpu"]
    sched.executor.idle_candidates = lambda: {"cpu"}
    assert sched._order(set()) == ["cpu", "torch"]


def test_a_case_of_long_rows_runs_alone_at_all_cores():
    """Its rows alone run at 2+ threads (invariance), which stall beside another case."""
    from kernelcheck.runner.schedule import LONG_ROW_ELEMENTS, is_large

    op = load_catalog().ops["logp"]
    assert is_large(_case("torch", "fp32", LONG_ROW_ELEMENTS), op)
    assert not is_large(_case("torch", "fp32", LONG_ROW_ELEMENTS - 1), op)
    cases = [_case("torch", "fp32", 257), _case("torch", "fp32", 151936)]
    assert [c.threads is None for c in with_threads(op, cases, None, None)] == [
        concurrency(op, cases, None) == 1,
        True,
    ]
