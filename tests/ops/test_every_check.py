"""Every check that applies to a shipped op fails on a bug planted in that op's honest
candidate, and passes the candidate itself (op-specific bugs are in the op's own test)."""

from __future__ import annotations

import pytest

from tests.conftest import run_one, with_op_candidate

SHAPES = {
    "rms_norm": {"batch": 2, "seq": 16, "hidden": 256},
    "swiglu": {"batch": 2, "seq": 16, "inter": 256},
    "entropy": {"batch": 2, "seq": 16, "vocab": 257},
    "ratio_kl": {"batch": 2, "seq": 16, "vocab": 257},
    "linear_logp": {"tokens": 32, "hidden": 32, "vocab": 500},
}
BUG_CHECK = {
    "nondeterministic": "determinism",
    "wrong_dtype": "contract",
    "scaled_backward": "backward_accuracy",
    "batch_dependent_backward": "backward_invariance",
    "biased": "forward_accuracy",
    "bf16_rounded": "forward_precision",
    "batch_dependent_forward": "forward_invariance",
    "writes_input": "integrity",
    "staged_in_shared_buffer": "contract",
}
# where the check has other ways to fail, the finding the bug must give
SAYS = {"staged_in_shared_buffer": "threads calling at once"}
# the invariance checks (a few hundred row placements each), contract (dozens of probes)
# and determinism (pristine processes) are the heavy ones, 6 to 10 s a bug: one op's run
# in the quick suite, the rest in CI's slow run
HEAVY = ("invariance", "contract", "determinism")
QUICK_HEAVY = "rms_norm"


def _heavy(op: str, bug: str) -> bool:
    return any(h in BUG_CHECK[bug] for h in HEAVY) and op != QUICK_HEAVY


CASES = [
    pytest.param(op, bug, id=f"{op}-{bug}", marks=pytest.mark.slow if _heavy(op, bug) else ())
    for op in SHAPES
    for bug in BUG_CHECK
]


@pytest.mark.parametrize("op,bug", CASES)
def test_the_check_fails_the_bug_and_passes_the_honest_candidate(catalog, op, bug):
    check = BUG_CHECK[bug]
    cat = with_op_candidate(catalog, op, "planted", f"generic_bugs:{bug}__{op}")
    res = run_one(cat, op, "planted", check, "fp32", SHAPES[op])
    assert res.status == "fail", (res.status, res.message)
    assert SAYS.get(bug, "") in res.message, res.message
    honest = run_one(cat, op, "torch", check, "fp32", SHAPES[op])
    assert honest.status == "pass", honest.message
