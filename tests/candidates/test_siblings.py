"""candidates/siblings.py: a candidate's module's functions for the catalog's other ops."""

from __future__ import annotations

from dataclasses import replace

from kernelcheck import api
from kernelcheck.candidates.siblings import with_siblings
from tests.conftest import FIXTURES


def test_a_modules_function_named_after_another_op_is_a_sibling():
    catalog = api.load_catalog([FIXTURES / "planted_entropy.toml"])
    spec = catalog.ops["entropy"]
    found = with_siblings(spec, catalog.ops, ["row-stats-from-logp", "torch"]).siblings
    assert [(c, s.name) for c, s in found] == [("row-stats-from-logp", "logp")]
    ((_, logp),) = found
    assert list(logp.candidates) == ["row-stats-from-logp"]
    assert logp.candidates["row-stats-from-logp"].callable == "shared_row_stats:logp"
    assert logp.siblings == ()


def test_another_ops_candidate_from_the_same_module_is_a_sibling():
    """A candidate registered for another op from the candidate's module is its sibling,
    whatever its function is called; candidates of other modules are not."""
    catalog = api.load_catalog()
    spec = catalog.ops["entropy"]
    mine = spec.candidates["torch"]
    fused = replace(mine, name="fused", callable=mine.callable.replace(":entropy", ":fused"))
    logp = replace(catalog.ops["logp"], candidates={"fused": fused})
    ((name, sib),) = with_siblings(spec, {**catalog.ops, "logp": logp}, ["torch"]).siblings
    assert (name, sib.name) == ("torch", "logp")
    assert sib.candidates["torch"].callable == "kernelcheck.candidates.torch_entropy:fused"
    assert with_siblings(spec, catalog.ops, ["torch"]).siblings == ()
