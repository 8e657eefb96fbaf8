"""Trial parts live only while a check still to observe the trial reads them."""

from __future__ import annotations

import pytest

from kernelcheck.checks.base import Trial
from tests.conftest import run_small, with_candidate


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


@pytest.mark.parametrize("in_place", [True, False], ids=["own-tensors", "copies"])
def test_a_candidate_that_writes_its_cpu_inputs_spoils_no_verdict(catalog, monkeypatch, in_place):
    """Given the trial's own CPU tensors (GB-sized inputs: no second copy; forced here)
    or copies, a candidate that halves its input after computing exact outputs fails
    integrity, and the accuracy checks still judge it against the gold of the inputs it
    was given."""
    from kernelcheck.checks import base

    monkeypatch.setattr(base, "IN_PLACE_BYTES", 0 if in_place else 1 << 62)
    cat = with_candidate(catalog, "scribbler", "broken_logp:scribbles_on_input")
    checks = ["forward_accuracy", "forward_precision", "determinism", "integrity"]
    res = run_small(cat, "scribbler", checks, seeds=[0], check_grad=False)
    assert res["integrity"].status == "fail"
    assert "changed input 'logits'" in res["integrity"].message
    for name in ("forward_accuracy", "forward_precision", "determinism"):
        assert res[name].status == "pass", (name, res[name].message)


def test_invariance_observes_after_the_trial_gradient_is_freed(catalog, monkeypatch):
    """Checks reading none of a trial's results come last, so a Qwen3-sized gradient is
    never alive beside an invariance pool; a released trial takes its pool with it."""
    from kernelcheck.checks import invariance

    seen = []
    observe = invariance._Invariance.observe

    def spy(self, trial):
        seen.append((self.name, trial.__dict__.get("_grads", (None,))[0]))
        observe(self, trial)
        assert self.ctx._pools  # drawn for this trial ...

    monkeypatch.setattr(invariance._Invariance, "observe", spy)
    released = []
    release = Trial.release

    def spy_release(self):
        release(self)
        released.append(dict(self.ctx._pools))

    monkeypatch.setattr(Trial, "release", spy_release)
    checks = ["forward_invariance", "backward_invariance", "backward_accuracy", "determinism"]
    res = run_small(catalog, "torch", checks, seeds=[0])
    assert all(r.status == "pass" for r in res.values()), res
    assert seen == [("forward_invariance", "freed"), ("backward_invariance", "freed")]
    assert released and all(not pools for pools in released)  # ... and dropped with it
    assert list(res) == checks  # reported in the order asked for
