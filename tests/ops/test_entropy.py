"""entropy: its gold, its shipped spec, and a planted bug."""

from __future__ import annotations

import pytest
import torch

from kernelcheck import api
from kernelcheck.ops import entropy
from tests.conftest import FIXTURES, run_one

SMALL = {"batch": 2, "seq": 16, "vocab": 257}


def test_gold_matches_the_definition_and_masked_entries_add_nothing():
    x = torch.randn(3, 7, dtype=torch.float64)
    p = torch.softmax(x, -1)
    assert torch.allclose(entropy.gold(x), -(p * p.log()).sum(-1), rtol=1e-13, atol=0)
    masked = torch.cat([x, torch.full((3, 2), float("-inf"), dtype=torch.float64)], -1)
    assert torch.allclose(entropy.gold(masked), entropy.gold(x), rtol=1e-13, atol=0)


@pytest.mark.slow
def test_the_shipped_spec_passes_the_honest_candidate(catalog):
    report = api.run(catalog, "entropy", candidate_names=["torch"], isolate=False)
    assert report.results and report.passed, [
        (r.case_id, r.check, r.message) for r in report.results if r.status != "pass"
    ]


def test_an_unshifted_formula_fails_on_large_rows():
    planted = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    for cand, want in (("unshifted", "fail"), ("torch", "pass")):
        res = run_one(planted, "entropy", cand, "forward_accuracy", "fp32", SMALL)
        assert res.status == want, (cand, res.message)
    assert (
        "large"
        in run_one(planted, "entropy", "unshifted", "forward_accuracy", "fp32", SMALL).message
    )


@pytest.mark.slow
def test_an_out_of_range_rule_scoped_to_one_output(tmp_path):
    """A fused logp + entropy kernel: ignored rows give logp exactly 0 and their real
    entropy. Scoped to logp the honest kernel passes contract; unscoped, it would not."""
    from tests.conftest import SPECS

    text = (SPECS / "logp_entropy.toml").read_text()
    for scoped, want in ((True, "pass"), (False, "fail")):
        spec = tmp_path / ("scoped.toml" if scoped else "unscoped.toml")
        body = text if scoped else text.replace('outputs = ["logp"]', "")
        spec.write_text(body)
        (tmp_path / "logp_entropy_op.py").write_text((SPECS / "logp_entropy_op.py").read_text())
        cat = api.load_catalog([spec])
        res = run_one(cat, "logp_entropy", "fused", "contract", "fp32", {"batch": 8, "vocab": 257})
        assert res.status == want, res.message
        if want == "fail":
            assert res.message.startswith("entropy: target=") or "entropy: target=" in res.message
    report = api.run(api.load_catalog([SPECS / "logp_entropy.toml"]), "logp_entropy", isolate=False)
    assert report.passed, [(r.check, r.message) for r in report.results if r.status != "pass"]
    acc = next(r for r in report.results if r.check == "forward_accuracy")
    assert acc.tolerance["per_name"]["entropy"]["atol"] == 3e-5
