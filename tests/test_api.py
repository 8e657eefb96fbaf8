"""``api.plan``: the default run sweeps every attribute's non-default values (one at a
time, on the grid's cheap shapes), pins them in repros, and says what a candidate that
does not take an attribute was not checked at."""

from __future__ import annotations

import pytest

from kernelcheck import api
from kernelcheck.errors import SpecError, UsageError
from kernelcheck.spec import load_catalog
from tests.conftest import with_candidate
from tests.spec.test_load import LOGP_HEAD, write


def _attrs(plan) -> set:
    return {tuple(sorted(c.attributes.items())) for c in plan.cases}


def test_the_default_run_checks_each_sweep_value_one_at_a_time(catalog):
    plan = api.plan(
        catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32", sweeps=True
    )
    combos = _attrs(plan)
    assert (("temperature", 1.0), ("with_mask", False)) in combos
    for extra in (
        (("temperature", 0.7), ("with_mask", False)),
        (("temperature", 1.3), ("with_mask", False)),
        (("temperature", 1.0), ("with_mask", True)),
        (("temperature", 0.7), ("with_mask", True)),  # the pair, at their first sweep values
    ):
        assert extra in combos
    assert len(combos) == 5
    # sweep cases show the swept attribute; the defaults' ids stay as they were
    ids = {c.id for c in plan.cases}
    assert "torch-fp32-2x16x257" in ids and "torch-fp32-2x16x257-temperature=0.7" in ids
    # on the grid's first shape and its longest row up to 2^14 (V = 10000, more than one
    # 4096-element tile); the others at the defaults
    shapes = [tuple(s.items()) for s in catalog.ops["logp"].grid.shapes]
    assert {c.shape for c in plan.cases if c.shown} == {shapes[0], shapes[2]}
    assert dict(shapes[2])["vocab"] == 10000


def test_sweeps_judge_invariance_at_the_first_dtype_and_say_so(catalog):
    plan = api.plan(
        catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32,bf16",
        sweeps=True,
    )  # fmt: skip
    swept = [c for c in plan.cases if "temperature" in c.id or "with_mask" in c.id]
    first = [c for c in swept if c.shape == swept[0].shape]
    at_first = {c.dtype: "forward_invariance" in c.checks for c in first}
    assert at_first == {"fp32": True, "bf16": False}
    assert all("forward_accuracy" in c.checks for c in swept)  # every other check per dtype
    defaults = [c for c in plan.cases if c.dtype == "bf16" and not c.shown]
    assert defaults and all("backward_invariance" in c.checks for c in defaults)
    (what,) = [w for w in plan.not_planned if "invariance" in w and "for bf16" in w]
    assert "temperature=0.7" in what and what.endswith("for bf16")
    # the long-row sweep shape judges numerics: its invariance is the first shape's
    (long,) = [w for w in plan.not_planned if w.endswith("at 2x3x10000")]
    assert long.startswith("forward_invariance, backward_invariance at temperature=0.7")
    swept_long = [c for c in swept if dict(c.shape)["vocab"] == 10000]
    assert swept_long and not any("forward_invariance" in c.checks for c in swept_long)
    pinned = api.plan(
        catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32,bf16",
        sweeps=True, attributes={"temperature": 0.7},
    )  # fmt: skip
    assert all("forward_invariance" in c.checks for c in pinned.cases)  # --attr: no sweep
    assert not [w for w in pinned.not_planned if "invariance" in w]


def test_repros_pin_the_swept_attributes_so_they_rerun_one_case(catalog):
    from kernelcheck.runner.repro import repro_command

    plan = api.plan(
        catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32", sweeps=True
    )
    case = plan.cases[0]
    cmd = repro_command(case, "forward_accuracy", 0, "normal")
    assert "--attr temperature=1.0" in cmd and "--attr with_mask=false" in cmd
    again = api.plan(
        catalog,
        "logp",
        candidate_names=["torch"],
        device="cpu",
        dtype_names="fp32",
        shape=case.sizes,
        attributes={"temperature": 1.0, "with_mask": False},
    )
    assert len(again.cases) == 1


def _swept_forward_accuracy(catalog, fixture: str):
    """The default run's attribute sets for one planted logp bug: (results, status by the
    attributes off their defaults)."""
    cat = with_candidate(catalog, "bug", fixture)
    report = api.run(
        cat,
        "logp",
        candidate_names=["bug"],
        device="cpu",
        dtype_names="fp32",
        shape={"batch": 2, "seq": 4, "vocab": 257},
        check_names=["forward_accuracy"],
        isolate=False,
        sweeps=True,
    )
    return report.results, {tuple(sorted(r.attributes.items())): r.status for r in report.results}


def test_a_temperature_bug_exact_at_1_fails_the_default_run(catalog):
    results, by = _swept_forward_accuracy(catalog, "scale_bugs:temperature_after_logsumexp")
    assert by[()] == "pass"  # T = 1: exact
    assert by[(("temperature", 0.7),)] == "fail" and by[(("temperature", 1.3),)] == "fail"
    # it takes no mask: checked without it only, and the report says so
    masked = [r for r in results if r.attributes.get("with_mask") is True]
    assert masked and all(r.status == "skip" for r in masked)
    assert "does not take mask" in masked[0].message


def test_sweep_values_are_read_from_the_spec(tmp_path):
    text = LOGP_HEAD + "[attributes]\ntemperature = { default = 1.0, sweep = [0.5, 1.0] }\n"
    op = load_catalog([write(tmp_path, text)]).op("mini")
    assert op.attributes["temperature"] == (1.0,)
    assert op.attribute_sweeps == {"temperature": (0.5,)}  # the default is no sweep value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('{ default = 1.0, sweep = ["hot"] }', "like the default"),
        ("{ sweep = [0.5] }", "{ default = value, sweep = [values] }"),
        ("{ default = 1.0, sweep = 0.5 }", "expected a list"),
        ("{ default = 1.0, swep = [0.5] }", "swep"),
    ],
)
def test_bad_sweeps_are_refused(tmp_path, value, fragment):
    path = write(tmp_path, LOGP_HEAD + f"[attributes]\ntemperature = {value}\n")
    with pytest.raises(SpecError) as info:
        load_catalog([path])
    assert "attributes.temperature" in str(info.value) and fragment in str(info.value)


@pytest.mark.parametrize("value", ["abc", True])
def test_an_attr_of_the_wrong_kind_is_a_usage_error(catalog, value):
    with pytest.raises(UsageError, match="expected a finite float"):
        api.plan(catalog, "logp", device="cpu", attributes={"temperature": value})


def test_a_candidate_promised_in_range_ids_gets_verdicts_and_the_gaps_are_named(catalog):
    """A kernel whose caller masks the ids raises on an out-of-range target: declared
    ``in_range`` it gets accuracy, invariance and contract verdicts on the ids it takes
    (never the trials of a candidate beside it that takes any id), and the report says
    what was not checked for it; undeclared it gets only errors."""
    from tests.conftest import FIXTURES, run_small

    checks = ["forward_accuracy", "forward_invariance", "contract"]
    kw = {"seeds": [0], "distributions": "normal"}
    undeclared = with_candidate(catalog, "masked_ids", "in_range_logp:masked_ids")
    res = run_small(undeclared, "masked_ids", checks, **kw)
    assert {r.status for r in res.values()} <= {"error", "fail"}, res
    assert res["forward_accuracy"].status == "error"
    declared = load_catalog([FIXTURES / "in_range.toml"])
    report = api.run(
        declared, "logp", candidate_names=["torch", "masked_ids"], device="cpu", dtype_names="fp32",
        shape={"batch": 2, "seq": 4, "vocab": 257}, check_names=checks, isolate=False,
        sweeps=False, **kw,
    )  # fmt: skip
    assert {(r.candidate, r.check, r.status) for r in report.results} == {
        (c, check, "pass") for c in ("torch", "masked_ids") for check in checks
    }
    (gap,) = [n for n in report.not_checked() if "masked_ids" in n.what]
    assert gap.what.startswith("out-of-range target (out-of-range draws, contract.out_of_range")
    assert 'declares in_range = ["target"]' in gap.reason


def test_an_addon_override_reaches_the_plan(tmp_path):
    """``[override.logp.grid]`` in an add-on: the run's shapes are the add-on's."""
    path = tmp_path / "bigger.toml"
    path.write_text("[override.logp.grid]\nshapes = [{ batch = 530, vocab = 257 }]\nseeds = [4]\n")
    plan = api.plan(load_catalog([path]), "logp", candidate_names=["torch"], device="cpu")
    assert {c.shape for c in plan.cases} == {(("batch", 530), ("vocab", 257))}
    assert {s for c in plan.cases for s in c.seeds} == {4}


def test_a_bug_that_needs_two_attributes_off_their_defaults_fails_the_default_run(catalog):
    _, by = _swept_forward_accuracy(catalog, "scale_bugs:masked_path_drops_temperature")
    assert by[(("temperature", 0.7),)] == "pass" and by[(("with_mask", True),)] == "pass"
    assert by[(("temperature", 0.7), ("with_mask", True))] == "fail"
    assert len(by) == 5 and list(by.values()).count("fail") == 1


def test_sweep_shapes_add_the_longest_row_that_fits(catalog):
    """The first shape always; the longest row of at most 2^14 elements beside it when it
    is longer; the Qwen3 vocab (151936) never (its invariance alone costs seconds)."""
    op = catalog.ops["logp"]
    grid = [{"batch": 2, "vocab": 257}, {"batch": 8, "vocab": 151936}, {"batch": 2, "vocab": 9000}]
    assert api.sweep_shapes(op, grid) == [0, 2]
    assert api.sweep_shapes(op, grid[:2]) == [0]
    assert api.sweep_shapes(op, [{"batch": 2, "vocab": 9000}, {"batch": 2, "vocab": 257}]) == [0]
    assert api.sweep_shapes(op, []) == []
    rms = catalog.ops["rms_norm"]
    assert api.sweep_shapes(rms, [dict(s) for s in rms.grid.shapes]) == [0, 3]  # hidden 8192


def test_a_temperature_bug_past_one_tile_fails_the_default_run(catalog):
    """The sweeps' second shape (V = 10000) shows an online softmax's tile rescale that
    forgets the temperature; the first (V = 257, one tile) cannot."""
    cat = with_candidate(catalog, "bug", "scale_bugs:tile_rescale_drops_temperature")
    report = api.run(
        cat, "logp", candidate_names=["bug"], device="cpu", dtype_names="fp32",
        check_names=["forward_accuracy"], isolate=False, sweeps=True, seeds=[0],
    )  # fmt: skip
    ran = [r for r in report.results if r.status != "skip"]  # it takes no mask
    by = {(r.shape["vocab"], r.attributes.get("temperature", 1.0)): r.status for r in ran}
    assert by[(257, 0.7)] == by[(257, 1.3)] == by[(10000, 1.0)] == "pass"
    assert by[(10000, 0.7)] == by[(10000, 1.3)] == "fail"
