"""The fingerprints a run records: its spec files and its plan."""

from __future__ import annotations

from kernelcheck import api
from kernelcheck.compare import op_spec_digest, plan_digest
from kernelcheck.spec import load_catalog


def test_fingerprints_for_the_run_to_record(catalog, tmp_path):
    addon = tmp_path / "addon.toml"
    addon.write_text(
        'op = "logp"\n[[candidate]]\nname = "x"\ncallable = "m:f"\ndevices = ["cpu"]\n'
    )
    with_addon = load_catalog([addon])
    assert op_spec_digest(catalog.ops["logp"]) == op_spec_digest(load_catalog().ops["logp"])
    assert op_spec_digest(catalog.ops["logp"]) != op_spec_digest(with_addon.ops["logp"])
    override = tmp_path / "override.toml"
    override.write_text("[override.logp.checks.determinism]\nrepeats = 5\n")
    overridden = load_catalog([override]).ops["logp"]
    assert op_spec_digest(catalog.ops["logp"]) != op_spec_digest(overridden)
    p0 = api.plan(catalog, "logp", device="cpu", seeds=[0])
    p1 = api.plan(catalog, "logp", device="cpu", seeds=[1])
    assert plan_digest(p0.cases) == plan_digest(list(reversed(p0.cases)))
    assert plan_digest(p0.cases) != plan_digest(p1.cases)
    assert plan_digest(p0.cases) != plan_digest(p0.cases, check_grad=False)
