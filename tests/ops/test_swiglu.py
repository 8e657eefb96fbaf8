"""swiglu: its gold, its shipped spec, and a planted bug per check that applies."""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.ops import swiglu
from tests.conftest import FIXTURES, run_one

SMALL = {"batch": 2, "seq": 16, "inter": 256}


def test_gold_matches_the_definition():
    g, u = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    want = g / (1 + torch.exp(-g)) * u
    assert torch.allclose(swiglu.gold(g, u), want, rtol=1e-14, atol=0)


def test_the_shipped_spec_passes_the_honest_candidate(catalog):
    report = api.run(catalog, "swiglu", candidate_names=["torch"], isolate=False)
    assert report.results and report.passed, [
        (r.case_id, r.check, r.message) for r in report.results if r.status != "pass"
    ]


PLANTED_BUGS = [
    ("tanh-sigmoid", "forward_accuracy", "fp32", "elements outside"),
    ("batch-dependent", "forward_invariance", "fp32", "differ in bits"),
    ("in-place", "integrity", "fp32", "changed input 'gate'"),
]


@pytest.mark.parametrize(
    "name,check,dtype,fragment", PLANTED_BUGS, ids=[p[0] for p in PLANTED_BUGS]
)
def test_each_planted_bug_fails_its_check(name, check, dtype, fragment):
    planted = api.load_catalog([FIXTURES / "planted_swiglu.toml"])
    for cand, want in ((name, "fail"), ("torch", "pass")):
        res = run_one(planted, "swiglu", cand, check, dtype, SMALL)
        assert res.status == want, (cand, res.message)
        if want == "fail":
            assert fragment in res.message, res.message
