"""Trial parts live only while a check still to observe the trial reads them
(kernelcheck/checks/trial_memory.py)."""

from __future__ import annotations

import pytest

from kernelcheck.checks.trial import Trial
from tests.conftest import SMALL, run_small, with_candidate


def _trial_with(parts: dict) -> Trial:
    trial = Trial(ctx=None, seed=0, distribution="normal")
    for name, value in parts.items():
        trial.__dict__[f"_{name}"] = ("ok", value)
    return trial


def test_a_part_is_freed_when_its_last_reader_finishes():
    trial = _trial_with({"grads": "G", "outputs": "O"})
    trial.readers = {"grads": {"backward_accuracy", "determinism"}, "outputs": {"contract"}}
    trial.finished("backward_accuracy")
    assert trial._cached("grads", lambda: "again") == "G"  # determinism still reads it
    trial.finished("determinism")
    with pytest.raises(RuntimeError, match="freed"):
        trial._cached("grads", lambda: "again")
    assert trial._cached("outputs", lambda: "again") == "O"
    trial.ensure("grads")  # the call was made: integrity's findings stand, nothing reruns


def test_parts_without_listed_readers_are_kept():
    """A trial used outside run_case (the shrinker, tests) never frees anything."""
    trial = _trial_with({"gold": "g"})
    trial.finished("forward_accuracy")
    assert trial._cached("gold", lambda: "again") == "g"


def test_invariance_draws_its_pool_after_the_trial_gradient_is_freed(catalog, monkeypatch):
    """Checks drawing inputs of their own come last, and take the rows they need of the
    trial's results before their pool is drawn, so a Qwen3-sized gradient is never alive
    beside an invariance pool; a released trial takes its pool with it."""
    from kernelcheck.checks import invariance

    seen = []
    own_rows = invariance._Invariance._own_rows

    def spy(self, trial):
        found = own_rows(self, trial)
        seen.append((self.name, trial.__dict__.get("_grads", (None,))[0], bool(self.ctx._pools)))
        return found

    monkeypatch.setattr(invariance._Invariance, "_own_rows", spy)
    released = []
    release = Trial.release

    def spy_release(self):
        release(self)
        released.append(dict(self.ctx._pools))

    monkeypatch.setattr(Trial, "release", spy_release)
    checks = ["forward_invariance", "backward_invariance", "backward_accuracy", "determinism"]
    res = run_small(catalog, "torch", checks, seeds=[0])
    assert all(r.status == "pass" for r in res.values()), res
    # the one reading the gradient first: freed before either draws the pool
    assert seen == [("backward_invariance", "freed", False), ("forward_invariance", "freed", True)]
    assert released and all(not pools for pools in released)  # dropped with the trial
    assert list(res) == checks  # reported in the order asked for


@pytest.mark.parametrize(
    ("stored", "small_first"),
    [(True, False), (False, False), (True, True)],
    ids=["stored", "no-store", "stored-contract-first"],
)
def test_checks_needing_small_inputs_run_without_the_trials_inputs_mapped(
    catalog, monkeypatch, stored, small_first
):
    """Once the checks left to observe a trial need small inputs only (contract, the
    invariance checks, integrity), the trial lets go of its inputs when the store holds
    them, so at the Qwen3 shape 2.4 GB are not resident beside their draws; a reader maps
    them back, with the same values. Without a store they are kept (nothing is drawn
    again), and a small-input check asked for before a full one does not let go of them."""
    import weakref

    import torch

    from kernelcheck import api
    from kernelcheck.cases import run_folder
    from kernelcheck.checks import CHECKS, input_writes

    monkeypatch.setattr(input_writes, "IN_PLACE_BYTES", 0)  # uncopied, as at the Qwen3 shape
    if not stored:
        monkeypatch.setattr(run_folder, "make_run_folder", lambda: None)
    full = ("forward_accuracy", "backward_accuracy", "determinism")  # at the trial's size
    small = ("contract", "integrity", "forward_invariance")  # the one drawing its own last
    events = []  # per candidate, in order: (check, inputs held as it starts)
    seen = {}  # candidate -> (the inputs' first rows, a weak reference to them) when full
    again = {}  # candidate -> the first rows integrity reads after the letting go
    for name in full + small:
        cls = CHECKS[name]

        def spy(self, trial, _observe=cls.observe, _name=name):
            cand = self.ctx.case.candidate
            events.append((cand, _name, "cpu_inputs" in trial.__dict__))
            if _name == "integrity":
                again[cand] = trial.cpu_inputs["logits"].reshape(-1, 257)[:2].clone()
            _observe(self, trial)
            if _name in full:
                logits = trial.cpu_inputs["logits"]
                seen[cand] = (logits.reshape(-1, 257)[:2].clone(), weakref.ref(logits))

        monkeypatch.setattr(cls, "observe", spy)
    let_go = []
    unmap = Trial.unmap_inputs

    freed = []  # at each letting go: are the inputs the full checks saw gone already?

    def spy_unmap(self):
        held = "cpu_inputs" in self.__dict__
        unmap(self)
        if held and "cpu_inputs" not in self.__dict__:
            let_go.append((self.ctx.case.candidate, len(events)))
            freed.append(seen[self.ctx.case.candidate][1]() is None)

    monkeypatch.setattr(Trial, "unmap_inputs", spy_unmap)
    # contract asked for between full checks, after the inputs are mapped
    checks = [full[0], "contract", *full[1:], *small[1:]] if small_first else [*full, *small]
    report = api.run(
        with_candidate(catalog, "twin", "plain_torch:logp"),
        "logp",
        candidate_names=["torch", "twin"],
        device="cpu",
        dtype_names="fp32",
        shape=SMALL,
        check_names=checks,
        seeds=[0],
        isolate=False,
        sweeps=False,
    )
    assert {r.status for r in report.results} == {"pass"}, report.results
    for cand in ("torch", "twin"):
        mine = [(name, held) for c, name, held in events if c == cand]
        order = [name for name, _ in mine]
        assert order == checks
        after_full = order.index("determinism") + 1
        # let go of only with a store, first after the last full check (again after a
        # small check mapped them back)
        when = [k - sum(1 for c, _, _ in events[:k] if c != cand) for c, k in let_go if c == cand]
        assert (when[:1] == [after_full] and min(when) == after_full) if stored else not when
        assert [held for _, held in mine[after_full:]] == [not stored] * len(order[after_full:])
        rows, ref = seen[cand]
        assert torch.equal(again[cand], rows)  # mapped back: the values the full checks saw
        if stored:
            assert ref() is None  # let go of, not still held somewhere
    assert all(freed) and len(freed) == len(let_go)  # at once, before the pools are drawn
