"""A candidate that writes its inputs is caught and spoils nothing
(kernelcheck/checks/input_writes.py)."""

from __future__ import annotations

import pytest

from kernelcheck import api
from kernelcheck.checks.trial import Trial
from kernelcheck.spec import load_catalog
from tests.conftest import run_fp32, run_small, with_candidate


@pytest.mark.parametrize("in_place", [True, False], ids=["own-tensors", "copies"])
def test_a_candidate_that_writes_its_cpu_inputs_spoils_no_verdict(catalog, monkeypatch, in_place):
    """Given the trial's own CPU tensors (GB-sized inputs: no second copy; forced here)
    or copies, a candidate that halves its input after computing exact outputs fails
    integrity, and the accuracy checks still judge it against the gold of the inputs it
    was given."""
    from kernelcheck.checks import input_writes

    monkeypatch.setattr(input_writes, "IN_PLACE_BYTES", 0 if in_place else 1 << 62)
    cat = with_candidate(catalog, "scribbler", "broken_logp:scribbles_on_input")
    checks = ["forward_accuracy", "forward_precision", "determinism", "integrity"]
    res = run_small(cat, "scribbler", checks, seeds=[0], check_grad=False)
    assert res["integrity"].status == "fail"
    assert "changed input 'logits'" in res["integrity"].message
    for name in ("forward_accuracy", "forward_precision", "determinism"):
        assert res[name].status == "pass", (name, res[name].message)


def test_a_shared_input_written_by_one_candidate_fails_integrity_and_spoils_nothing(
    monkeypatch,
):
    """Inputs mapped from the shared file are handed over uncopied (forced here at a small
    size); the copy-on-write count says whether a call wrote them. The honest candidate's
    calls need no digests at all; the scribbler's write is caught and counted in rows."""
    from kernelcheck.checks import input_writes
    from tests.conftest import with_candidate

    monkeypatch.setattr(input_writes, "IN_PLACE_BYTES", 0)
    settled = []
    settle = Trial._settle

    def spy(self, before, used, phase):
        settled.append(self.ctx.case.candidate)
        return settle(self, before, used, phase)

    monkeypatch.setattr(Trial, "_settle", spy)
    catalog = with_candidate(load_catalog(), "scribbler", "broken_logp:scribbles_on_input")
    checks = ["forward_accuracy", "determinism", "integrity"]
    report = run_fp32(
        catalog, ["torch", "scribbler"], checks, check_grad=False, seeds=[0], isolate=False
    )
    res = {(r.candidate, r.check): r for r in report.results}
    assert all(res[("torch", c)].status == "pass" for c in checks)
    assert res[("scribbler", "integrity")].status == "fail"
    assert "changed input 'logits'" in res[("scribbler", "integrity")].message
    assert res[("scribbler", "forward_accuracy")].status == "pass"  # judged on its inputs
    assert "torch" not in settled and "scribbler" in settled


@pytest.mark.slow
def test_a_clean_mapping_is_read_once_per_call(monkeypatch):
    """The copy-on-write count (a read of /proc/self/smaps, ~50 ms at the Qwen3 shape) is
    taken after each call on uncopied inputs; before the next call on the same tensors it
    is already known, so a trial's calls read it once each, plus once before the first."""
    from kernelcheck.checks import input_writes
    from kernelcheck.smaps import unwritten

    monkeypatch.setattr(input_writes, "IN_PLACE_BYTES", 0)
    reads, calls, trials = [], [], []
    monkeypatch.setattr(input_writes, "unwritten", lambda ts: reads.append(1) or unwritten(ts))
    own_call = Trial.own_call

    def spy(self, call, phase=""):
        calls.append(1)
        if not self.__dict__.get("_counted"):  # a trial's first call (ids are reused)
            self.__dict__["_counted"] = True
            trials.append(1)
        return own_call(self, call, phase)

    monkeypatch.setattr(Trial, "own_call", spy)
    report = api.run(load_catalog(), "logp", candidate_names=["torch", "cpu"], device="cpu",
                     dtype_names="fp32", shape={"batch": 4, "vocab": 3000},
                     check_names=["forward_accuracy", "determinism"], check_grad=False,
                     seeds=[0], isolate=False, sweeps=False)  # fmt: skip
    assert {r.status for r in report.results} == {"pass"}
    assert len(calls) >= 2 * len(trials) and len(reads) == len(calls) + len(trials)
