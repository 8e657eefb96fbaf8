"""Spec loading: the built-in spec, add-on specs, and every bad spec refused with a clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcheck import api
from kernelcheck.errors import SpecError, UsageError
from kernelcheck.spec import load_catalog
from tests.conftest import SPECS

LOGP_HEAD = """
op = "mini"
gold = "kernelcheck.ops.logp:gold"
lead = ["batch"]
[dims]
batch = { default = 2 }
vocab = { default = 7 }
[[input]]
name = "logits"
shape = ["batch", "vocab"]
[[input]]
name = "target"
shape = ["batch"]
dtype = "int64"
values = "index"
index_of = "vocab"
[[output]]
name = "logp"
shape = ["batch"]
dtype = "float32"
[grid]
dtypes = ["fp32"]
shapes = [{ batch = 2, vocab = 7 }]
"""


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_builtin_logp_spec(catalog):
    op = catalog.op("logp")
    assert op.lead == ("batch", "seq")
    assert op.dims["seq"].optional
    assert op.tolerance("forward_accuracy", "bf16").atol == 6e-2
    assert op.tolerance("forward_accuracy", "fp32").rtol == 0.0
    assert {"torch", "cpu", "cuda", "ascend"} <= set(op.candidates)
    assert {"normal", "large", "masked", "peaked", "heavy", "lm", "equal"} == set(
        op.grid.distributions
    )
    vocabs = {s["vocab"] for s in op.grid.shapes}
    assert {257, 10000, 151936} <= vocabs
    assert any("seq" not in s for s in op.grid.shapes) and any("seq" in s for s in op.grid.shapes)


def test_a_user_spec_adds_a_candidate_to_a_builtin_op():
    cat = load_catalog([SPECS / "my_kernels.toml"])
    cand = cat.op("logp").candidates["mykernel"]
    assert cand.callable == "my_kernels:logp" and cand.base_dir == SPECS


def test_a_new_op_from_a_spec(tmp_path):
    cat = load_catalog([write(tmp_path, LOGP_HEAD)])
    assert "mini" in cat.ops and cat.op("mini").outputs[0].dtype == "float32"


def test_loading_a_spec_imports_no_candidate(tmp_path):
    text = 'op = "logp"\n[[candidate]]\nname = "x"\ncallable = "no_such_module_xyz:fn"\n'
    text += 'devices = ["cpu"]\n'
    cat = load_catalog([write(tmp_path, text)])
    assert "x" in cat.op("logp").candidates  # loads; the import happens when it runs


CAND = 'name = "{name}"\ncallable = "m:{name}"\ndevices = ["cpu"]\n'
ADDON = 'op = "logp"\n[[candidate]]\n' + CAND.format(name="a")

BAD = [
    ('op = "x"\nbad = = 1\n', "malformed TOML", "line 2"),
    (LOGP_HEAD.replace("[grid]", "[grid]\ndtpyes = []"), "grid.dtpyes", "did you mean 'dtypes'"),
    (LOGP_HEAD.replace('lead = ["batch"]', 'lead = "batch"'), "lead", "expected a list"),
    (LOGP_HEAD.replace('gold = "kernelcheck.ops.logp:gold"\n', ""), "gold", "missing required key"),
    (
        LOGP_HEAD.replace("kernelcheck.ops.logp:gold", "kernelcheck.ops.logp.gold"),
        "gold",
        "expected an import path 'module:attr'",
    ),
    (LOGP_HEAD.replace("default = 2", "default = 0"), "dims.batch.default", ">= 1"),
    (LOGP_HEAD.replace('dtypes = ["fp32"]', 'dtypes = ["fp8"]'), "grid.dtypes", "unknown dtype"),
    (
        LOGP_HEAD.replace(
            'shape = ["batch"]\ndtype = "float32"', 'shape = ["rows"]\ndtype = "float32"'
        ),
        "output.logp.shape",
        "unknown dim 'rows'",
    ),
    (
        LOGP_HEAD + "[checks.forward_invariance]\nbatch_size = [1]\n",
        "checks.forward_invariance.batch_size",
        "did you mean 'batch_sizes'",
    ),
    (
        LOGP_HEAD + "[checks.forward_invariance]\nbatch_sizes = 3\n",
        "checks.forward_invariance.batch_sizes",
        "expected list",
    ),
    (LOGP_HEAD + "[checks.forward_invariant]\n", "checks.forward_invariant", "did you mean"),
    (
        LOGP_HEAD + '[[candidate]]\nname = "a"\ncallable = "m:f"\ndevices = ["gpu"]\n',
        "candidate.a.devices",
        "unknown device 'gpu'",
    ),
    (
        LOGP_HEAD + '[[candidate]]\nname = "a"\ncallable = "m:f"\ndevices = ["cpu"]\n'
        '[[candidate]]\nname = "a"\ncallable = "m:g"\ndevices = ["cpu"]\n',
        "candidate.a",
        "duplicate",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nvalues = "wieght"\n'),
        "input.logits.values",
        "did you mean 'weight'",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nvalues = "mask"\n'),
        "input.logits.dtype",
        'a mask input has dtype = "bool"',
    ),
    (LOGP_HEAD + "[attributes]\neps = []\n", "attributes.eps", "non-empty list"),
    (
        LOGP_HEAD.replace("vocab = { default = 7 }", "vocab = { default = 7, sweep_max = 6 }"),
        "dims.vocab.sweep_max",
        "expected an integer >= default (7), got 6",
    ),
    (
        LOGP_HEAD.replace('index_of = "vocab"\n', 'index_of = "vocab"\nwhen = "maskd"\n')
        + "[attributes]\nmasked = false\n",
        "input.target.when",
        "unknown attribute 'maskd' (did you mean 'masked'?)",
    ),
    (
        LOGP_HEAD.replace('index_of = "vocab"\n', 'index_of = "vocab"\nwhen = "eps"\n')
        + "[attributes]\neps = 1e-6\n",
        "input.target.when",
        "attribute 'eps' must be true or false",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nwhen = "on"\n').replace(
            'index_of = "vocab"\n', 'index_of = "vocab"\nindex_into = "logits"\n'
        )
        + "[attributes]\non = false\n",
        "input.logits.when",
        "input 'target' points into it (index_into) and is always on",
    ),
    (
        LOGP_HEAD + '[contract.masked]\nmask = "target"\noutputs = { logp = 0.0 }\n',
        "contract.masked.mask",
        "unknown mask input 'target'",
    ),
    (
        LOGP_HEAD
        + '[[input]]\nname = "m"\nshape = ["batch"]\ndtype = "bool"\nvalues = "mask"\n'
        + '[contract.masked]\nmask = "m"\noutputs = { logp = 0.0 }\nany_value = ["target"]\n',
        "contract.masked.any_value",
        "unknown float input of shape [batch, ...] 'target'; valid: logits",
    ),
    (  # a shared input has no value at a masked position
        LOGP_HEAD
        + '[[input]]\nname = "m"\nshape = ["batch"]\ndtype = "bool"\nvalues = "mask"\n'
        + '[[input]]\nname = "w"\nshape = ["vocab"]\nvalues = "weight"\n'
        + '[contract.masked]\nmask = "m"\noutputs = { logp = 0.0 }\nany_value = ["w"]\n',
        "contract.masked.any_value",
        "unknown float input of shape [batch, ...] 'w'; valid: logits",
    ),
    (
        LOGP_HEAD + '[contract.must_raise]\ninput = "target"\nvalues = [-1, 1.5]\n',
        "contract.must_raise.values",
        "ints or 'dim+N'",
    ),
    # a table's keys are checked by name first (a misspelled "default" gets its "did you
    # mean"); a table without "default" says what an attribute holds
    (LOGP_HEAD + "[attributes]\neps = { a = 1 }\n", "attributes.eps.a", "valid: default, sweep"),
    (LOGP_HEAD + "[attributes]\neps = {}\n", "attributes.eps", "a number, bool or string"),
    (
        LOGP_HEAD + "[tolerance.forward_accuracy.lgop]\nfp32 = { atol = 1e-5 }\n",
        "tolerance.forward_accuracy.lgop",
        "did you mean 'logp'",
    ),
    (
        LOGP_HEAD + "[tolerance.forward_acuracy]\nfp32 = { atol = 1e-5 }\n",
        "tolerance.forward_acuracy",
        "did you mean 'forward_accuracy'",
    ),
    (
        LOGP_HEAD + '[tolerance.forward_accuracy]\nfp32 = { atol = "small" }\n',
        "tolerance.forward_accuracy.fp32.atol",
        "expected a number",
    ),
    (
        LOGP_HEAD + '[contract.out_of_range]\ninput = "target"\nvalues = [-1]\noutputs = []\n',
        "contract.out_of_range.outputs",
        "at least one output",
    ),
    # add-on specs: several ops, a candidate's op, overrides, in_range
    (
        '[[candidate]]\nop = "lgop"\n' + CAND.format(name="a"),
        "candidate.a.op",
        "did you mean 'logp'",
    ),
    (
        "[[candidate]]\n" + CAND.format(name="a"),
        "candidate.a.op",
        'name the op it implements (op = "logp"',
    ),
    ('op = ["logp", 3]\n[[candidate]]\n' + CAND.format(name="a"), "op", "an op name or a list"),
    (
        'op = "logp"\n' + ("[[candidate]]\n" + CAND.format(name="a")) * 2,
        "candidate.a",
        "duplicate candidate name for op logp",
    ),
    (
        ADDON + "[checks.forward_invariance]\nbatch_sizes = [1]\n",
        "checks",
        "[override.logp.checks]",
    ),
    (ADDON + "[grid]\nseeds = [3]\n", "grid", "[override.logp.grid]"),
    (ADDON + "[override.lgop.grid]\nseeds = [3]\n", "override.lgop", "did you mean 'logp'"),
    (ADDON + "[override.logp.gird]\nseeds = [3]\n", "override.logp.gird", "did you mean 'grid'"),
    (
        ADDON + "[override.logp.tolerance.forward_accuracy]\nfp32 = { atol = 1 }\n",
        "override.logp.tolerance",
        "cannot change an op's tolerances",
    ),
    (
        ADDON + "[override.logp.grid]\nseed = [3]\n",
        "override.logp.grid.seed",
        "did you mean 'seeds'",
    ),
    (
        ADDON + "[override.logp.grid]\nshapes = [{ batch = 2, vocb = 3 }]\n",
        "override.logp.grid.shapes[0].vocb",
        "did you mean 'vocab'",
    ),
    (
        ADDON + "[override.logp.checks.forward_invariance]\nbatch_size = [1]\n",
        "override.logp.checks.forward_invariance.batch_size",
        "did you mean 'batch_sizes'",
    ),
    (
        ADDON + "[override.logp.checks.forward_invariance]\nbatch_sizes = 3\n",
        "override.logp.checks.forward_invariance.batch_sizes",
        "expected list",
    ),
    (ADDON + 'in_range = ["targt"]\n', "candidate.a.in_range", "did you mean 'target'"),
    (
        ADDON + 'in_range = ["logits"]\n',
        "candidate.a.in_range",
        "unknown index input 'logits'; valid: target",
    ),
    ('op = "logp"\ncandidate = []\n', "candidate", "at least one [[candidate]] or [override"),
    (
        LOGP_HEAD + '[[candidate]]\nop = "logp"\n' + CAND.format(name="a"),
        "candidate.a.op",
        "put a candidate of another op in an add-on spec",
    ),
    (
        LOGP_HEAD + "[[candidate]]\n" + CAND.format(name="a") + 'in_range = ["target"]\n',
        "candidate.a.in_range",
        "never passes an out-of-range target; drop it",
    ),
    (
        LOGP_HEAD.replace(
            'shape = ["batch", "vocab"]', 'shape = ["batch", "vocab"]\nlogits_with = "target"'
        ),
        "input.logits.logits_with",
        "expected a [vocab, vocab] input's name",
    ),
]


@pytest.mark.parametrize("text,key,fragment", BAD, ids=[b[1] for b in BAD])
def test_bad_spec_is_refused_naming_file_key_and_expectation(tmp_path, text, key, fragment):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_catalog([path])
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert key in message and fragment in message, message
    assert "\n" not in message


def test_an_out_of_range_scope_left_out_means_all_and_an_empty_list_none(tmp_path):
    rule = '[contract.out_of_range]\ninput = "target"\nvalues = [-1]\n'
    op = load_catalog([write(tmp_path, LOGP_HEAD + rule)], builtin=False).op("mini")
    assert (op.out_of_range.outputs, op.out_of_range.gradients) == (None, None)
    op = load_catalog([write(tmp_path, LOGP_HEAD + rule + "gradients = []\n")], builtin=False)
    assert op.op("mini").out_of_range.gradients == ()


def test_duplicate_candidate_across_files(tmp_path):
    text = 'op = "logp"\n[[candidate]]\nname = "torch"\ncallable = "m:f"\ndevices = ["cpu"]\n'
    with pytest.raises(SpecError, match="candidate.torch: duplicate candidate name"):
        load_catalog([write(tmp_path, text)])


def test_addon_for_unknown_op(tmp_path):
    text = 'op = "nope"\n[[candidate]]\nname = "a"\ncallable = "m:f"\ndevices = ["cpu"]\n'
    with pytest.raises(SpecError, match="unknown op 'nope'"):
        load_catalog([write(tmp_path, text)])


def test_missing_spec_file(tmp_path):
    with pytest.raises(SpecError, match="spec file not found"):
        load_catalog([tmp_path / "absent.toml"])


@pytest.mark.parametrize(
    "gold,fragment",
    [
        ("no_such_module_q:gold", "module 'no_such_module_q' not found"),
        ("kernelcheck.ops.logp:nope", "has no attribute 'nope'"),
    ],
)
def test_unresolvable_gold_is_refused_before_anything_runs(tmp_path, gold, fragment):
    path = write(tmp_path, LOGP_HEAD.replace("kernelcheck.ops.logp:gold", gold))
    with pytest.raises(SpecError, match=fragment):
        api.plan(load_catalog([path]), "mini", device="cpu")


@pytest.mark.parametrize(
    "callable_,fragment",
    [
        ("no_such_module_q:logp", "module 'no_such_module_q' not found"),
        ("my_kernels:nope", "has no attribute 'nope'"),
        ("broken_module:logp", "failed to import: ImportError: libmykernel.so"),
    ],
)
def test_requested_candidate_with_bad_import_path_is_a_usage_error(tmp_path, callable_, fragment):
    import shutil

    from tests.conftest import FIXTURES

    shutil.copy(SPECS / "my_kernels.py", tmp_path)
    shutil.copy(FIXTURES / "broken_module.py", tmp_path)
    text = f'op = "logp"\n[[candidate]]\nname = "x"\ncallable = "{callable_}"\ndevices = ["cpu"]\n'
    cat = load_catalog([write(tmp_path, text)])
    with pytest.raises(UsageError, match=fragment):
        api.plan(cat, "logp", candidate_names=["x"], device="cpu")


def test_per_name_tolerances_fall_back_to_the_op_wide_table(tmp_path):
    text = LOGP_HEAD + (
        "[tolerance.forward_accuracy]\nfp32 = { atol = 1e-5 }\n"
        "[tolerance.forward_accuracy.logp]\nbf16 = { atol = 0.5, rtol = 0.1 }\n"
        '[attributes]\ntemperature = [1.0, 0.7]\nmode = "mean"\n'
    )
    op = load_catalog([write(tmp_path, text)], builtin=False).op("mini")
    assert op.tolerance("forward_accuracy", "fp32", "logp").atol == 1e-5
    assert op.tolerance("forward_accuracy", "bf16", "logp").rtol == 0.1
    assert op.tolerance("forward_accuracy", "bf16") is None
    assert op.attributes == {"temperature": (1.0, 0.7), "mode": ("mean",)}


def test_a_switched_input_exists_only_where_its_attribute_is_true(catalog):
    """logp's mask: off at the default (no input, no masked rule), on with with_mask=true,
    and resolving twice changes nothing."""
    op = catalog.op("logp")
    assert op.switches == {"with_mask"}
    off = op.for_attributes({})
    assert [i.name for i in off.inputs] == ["logits", "target"] and off.masked is None
    assert off.out_of_range is not None and off.for_attributes({}) is off
    on = op.for_attributes({"with_mask": True})
    assert [i.name for i in on.inputs] == ["logits", "target", "mask"]
    assert on.masked.mask == "mask" and not on.switches
    assert on.for_attributes({}) is on  # resolved: the default no longer applies


def test_a_switched_backward_input_is_judged_only_where_it_is_on(catalog):
    """linear_logp's bias: a backward input with with_bias=true, absent without."""
    op = catalog.op("linear_logp")
    assert op.for_attributes({}).grad_inputs == ("hidden", "weight")
    assert op.for_attributes({"with_bias": True}).grad_inputs == ("hidden", "weight", "bias")


def _with_input(extra: str) -> str:
    """LOGP_HEAD with one more input table after the logits."""
    return LOGP_HEAD.replace('[[input]]\nname = "target"', extra + '[[input]]\nname = "target"')


BAD_SCALES_AND_RELATIONS = [
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nscale = "exp(vocab)"\n'),
        "input.logits.scale",
        "'exp(vocab)' is not allowed",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nscale = "__import__(\'os\')"\n'),
        "input.logits.scale",
        "is not allowed",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nscale = "1/sqrt(vocb)"\n'),
        "input.logits.scale",
        "unknown dim 'vocb' (did you mean 'vocab'?)",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nscale = "1/(vocab - 7)"\n'),
        "input.logits.scale",
        "cannot be evaluated",
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nscale = "7 - vocab"\n'),
        "input.logits.scale",
        "expected a number > 0",
    ),
    (
        _with_input('[[input]]\nname = "ref"\nshape = ["batch", "vocab"]\nrelated_to = "logit"\n'),
        "input.ref.related_to",
        "unknown float input 'logit' (did you mean 'logits'?)",
    ),
    (
        _with_input('[[input]]\nname = "ref"\nshape = ["batch", "vocab"]\nrelated_to = "target"\n'),
        "input.ref.related_to",
        "unknown float input 'target'",
    ),
    (
        _with_input('[[input]]\nname = "ref"\nshape = ["vocab"]\nrelated_to = "logits"\n'),
        "input.ref.related_to",
        "'logits' has shape ['batch', 'vocab'], not ['vocab']",
    ),
    (
        _with_input('[[input]]\nname = "ref"\nshape = ["batch", "vocab"]\nvalues = "related"\n'),
        "input.ref.related_to",
        "a related input needs related_to",
    ),
    (
        _with_input('[[input]]\nname = "old"\nshape = ["batch"]\nvalues = "logp"\n'),
        "input.old.related_to",
        'a "logp" input needs related_to',
    ),
    (
        _with_input(
            '[[input]]\nname = "old"\nshape = ["vocab"]\nvalues = "logp"\nrelated_to = "logits"\n'
        ),
        "input.old.related_to",
        "a logp of 'logits' has shape ['batch'] (its rows), not ['vocab']",
    ),
    (
        _with_input(
            '[[input]]\nname = "old"\nshape = ["batch"]\nvalues = "logp"\nrelated_to = "logits"\n'
        ),
        "input.old.related_to",
        "no index input has index_into = 'logits'",
    ),
    (
        _with_input(
            '[[input]]\nname = "old"\nshape = ["batch"]\nvalues = "logp"\ndtype = "int64"\n'
            'related_to = "logits"\n'
        ),
        "input.old.dtype",
        'a "logp" input has a float dtype',
    ),
    (
        LOGP_HEAD.replace('name = "logits"\n', 'name = "logits"\nperturbation = 0.5\n'),
        "input.logits.perturbation",
        'only a values = "related" input has one',
    ),
    (
        LOGP_HEAD + '[grid.left_out]\nzero_row = "no eps"\n',
        "grid.left_out.zero_row",
        "did you mean 'zero_rows'",
    ),
    (LOGP_HEAD + '[grid.left_out]\nlarge = " "\n', "grid.left_out.large", "non-empty string"),
    (LOGP_HEAD + '[grid.left_out]\nnormal = "x"\n', "grid.left_out.normal", "drop one"),
]


@pytest.mark.parametrize(
    "text,key,fragment",
    BAD_SCALES_AND_RELATIONS,
    ids=[f"{b[1]}:{b[2][:20]}" for b in BAD_SCALES_AND_RELATIONS],
)
def test_bad_scale_relation_or_left_out_is_refused_in_one_line(tmp_path, text, key, fragment):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_catalog([path], builtin=False)
    message = str(info.value)
    assert message.startswith(str(path)) and key in message and fragment in message, message
    assert "\n" not in message


def test_a_scale_formula_a_relation_and_left_out_load(tmp_path):
    text = _with_input(
        '[[input]]\nname = "ref"\nshape = ["batch", "vocab"]\nrelated_to = "logits"\n'
        "perturbation = 0.25\n"
    ).replace('name = "logits"\n', 'name = "logits"\nscale = "1/sqrt(vocab)"\n')
    text += '[grid.left_out]\nzero_rows = "no eps to guard"\n'
    op = load_catalog([write(tmp_path, text)], builtin=False).op("mini")
    assert op.input("logits").scale_at({"batch": 2, "vocab": 16}) == 0.25
    ref = op.input("ref")
    assert (ref.values, ref.related_to, ref.perturbation) == ("related", "logits", 0.25)
    assert op.grid.left_out == {"zero_rows": "no eps to guard"}
    plain = load_catalog([write(tmp_path, LOGP_HEAD, "plain.toml")], builtin=False).op("mini")
    assert plain.grid.left_out == {} and plain.input("logits").scale == 1.0


def test_every_shipped_spec_draws_or_explains_every_distribution():
    """A distribution an op's grid leaves out is a decision its spec states: walk
    specs/*.toml, each distribution in the grid or in [grid.left_out] with a reason."""
    from kernelcheck.cases.inputs import DISTRIBUTIONS
    from kernelcheck.spec.load import builtin_spec_dir, parse_op, read_toml

    files = sorted(builtin_spec_dir().glob("*.toml"))
    assert len(files) >= 6
    for path in files:
        raw = read_toml(path)
        if "gold" not in raw:
            continue  # an add-on spec: candidates only
        grid = parse_op(raw, path).grid
        for dist in DISTRIBUTIONS:
            reason = grid.left_out.get(dist, "")
            assert dist in grid.distributions or reason.strip(), (path.name, dist)


# --- add-on specs: several ops, overrides, a narrower input contract ------------------------


def test_one_addon_adds_candidates_to_several_ops(tmp_path):
    """A candidate's own ``op`` (a name or a list) wins over the file's ``op``."""
    text = (
        'op = "logp"\n[[candidate]]\n' + CAND.format(name="a")
        + '[[candidate]]\nop = "entropy"\n' + CAND.format(name="b")
        + '[[candidate]]\nop = ["rms_norm", "swiglu"]\n' + CAND.format(name="c")
    )  # fmt: skip
    cat = load_catalog([write(tmp_path, text, "upstream.toml")])
    assert "a" in cat.op("logp").candidates and "a" not in cat.op("entropy").candidates
    assert "b" in cat.op("entropy").candidates and "b" not in cat.op("logp").candidates
    assert "c" in cat.op("rms_norm").candidates and "c" in cat.op("swiglu").candidates
    without_file_op = text.replace('op = "logp"\n[[candidate]]\n' + CAND.format(name="a"), "")
    cat = load_catalog([write(tmp_path, without_file_op, "upstream.toml")])
    assert "b" in cat.op("entropy").candidates


def test_an_override_changes_a_shipped_ops_checks_and_grid(tmp_path, catalog):
    text = (
        "[override.logp.checks.forward_invariance]\nbatch_sizes = [1, 524, 525, 526]\n"
        "[override.logp.grid]\nshapes = [{ batch = 530, vocab = 257 }]\n"
        'distributions = ["normal", "zero_rows"]\n'
    )
    op = load_catalog([write(tmp_path, text)]).op("logp")
    shipped = catalog.op("logp")
    inv = op.checks["forward_invariance"]
    assert inv.params == {
        **shipped.checks["forward_invariance"].params,
        "batch_sizes": [1, 524, 525, 526],
    }
    assert op.checks["backward_invariance"] == shipped.checks["backward_invariance"]
    assert op.grid.shapes == ({"batch": 530, "vocab": 257},)
    assert op.grid.distributions == ("normal", "zero_rows")
    assert "zero_rows" not in op.grid.left_out and "tiny_rows" in op.grid.left_out
    assert (op.grid.dtypes, op.grid.seeds) == (shipped.grid.dtypes, shipped.grid.seeds)
    assert op.candidates == shipped.candidates


def test_a_candidate_declares_ids_in_range():
    from tests.conftest import FIXTURES

    op = load_catalog([FIXTURES / "in_range.toml"]).op("logp")
    assert op.candidates["masked_ids"].in_range == ("target",)
    narrowed = op.for_candidate("masked_ids")
    assert narrowed.input("target").out_of_range_fraction == 0.0
    assert narrowed.out_of_range is None and narrowed.masked.any_index == ()
    assert narrowed.in_range == ("target",) and narrowed.for_candidate("masked_ids") == narrowed
    assert op.for_candidate("torch") is op and op.out_of_range is not None


def test_a_candidate_may_name_its_own_op_in_the_ops_spec(tmp_path):
    own = LOGP_HEAD + '[[candidate]]\nop = "mini"\n' + CAND.format(name="a")
    assert "a" in load_catalog([write(tmp_path, own)], builtin=False).op("mini").candidates


# A misspelled name, at any level of a spec, says "did you mean" before anything else:
# in a spec that only overrides (no gold), it once ended in "gold: missing required key".
MISSPELLED = [
    ("[tolerance.forward_acuracy]\nfp32 = { atol = 1e-5 }", "tolerance.forward_acuracy",
     "unknown tolerance table 'forward_acuracy' (did you mean 'forward_accuracy'?)"),
    ("[tolerence.forward_accuracy]\nfp32 = { atol = 1e-5 }", "tolerence",
     "(did you mean 'tolerance'?)"),
    ("[checks.forward_invarance]\nenabled = false", "checks.forward_invarance",
     "unknown check 'forward_invarance' (did you mean 'forward_invariance'?)"),
    ("[checks.determinism]\nrepeat = 3", "checks.determinism.repeat",
     "unknown parameter 'repeat' (did you mean 'repeats'?)"),
    ("[contract.out_of_rnge]\ninput = 'x'", "contract.out_of_rnge",
     "(did you mean 'out_of_range'?)"),
    ("[contract.out_of_range]\ninpt = 'x'", "contract.out_of_range.inpt",
     "(did you mean 'input'?)"),
    ("[grid]\ndtype = ['fp32']", "grid.dtype", "(did you mean 'dtypes'?)"),
    ("[dims.vocab]\ndefualt = 3", "dims.vocab.defualt", "(did you mean 'default'?)"),
    ("[attributes.t]\ndefualt = 1.0", "attributes.t.defualt", "(did you mean 'default'?)"),
    ("[[input]]\nnme = 'x'", "input[0].nme", "(did you mean 'name'?)"),
    ("[[output]]\nshpe = ['batch']", "output[0].shpe", "(did you mean 'shape'?)"),
    ("[backward]\ninput = ['x']", "backward.input", "(did you mean 'inputs'?)"),
    ("[[candidate]]\nname = 'a'\ncallable = 'm:f'\ndevices = ['cpu']\n"
     "[tolerance.forward_acuracy]\nfp32 = { atol = 1e-5 }", "tolerance.forward_acuracy",
     "(did you mean 'forward_accuracy'?)"),
]  # fmt: skip


@pytest.mark.parametrize("body,key,fragment", MISSPELLED, ids=[m[1] for m in MISSPELLED])
def test_a_misspelled_name_at_any_level_says_did_you_mean(tmp_path, body, key, fragment):
    path = tmp_path / "mine.toml"
    path.write_text(f'op = "logp"\n{body}\n')
    with pytest.raises(SpecError) as err:
        load_catalog([path])
    assert err.value.key == key and fragment in err.value.problem, str(err.value)


def test_a_spec_without_gold_says_what_a_spec_holds(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('op = "logp"\n[tolerance.forward_accuracy]\nfp32 = { atol = 1e-5 }\n')
    with pytest.raises(SpecError, match=r"gold: missing required key \(a spec declares a whole"):
        load_catalog([path])


def test_a_directory_is_no_spec_file(tmp_path):
    with pytest.raises(SpecError, match="is a directory, not a spec; give a .toml file"):
        load_catalog([tmp_path])


def test_a_list_parameter_is_read_as_the_tuple_its_check_takes(tmp_path):
    """``only = ["normal", "lm"]`` (a TOML array) sets a check parameter whose default is
    a tuple; a list where a number is wanted is still refused."""
    only = '[checks.forward_accuracy]\nonly = ["normal", "lm"]\n'
    op = load_catalog([write(tmp_path, LOGP_HEAD + only)], builtin=False).op("mini")
    assert op.check_params("forward_accuracy") == {"only": ("normal", "lm")}
    ratio = write(tmp_path, LOGP_HEAD + "[checks.forward_precision]\nratio = [2]\n")
    with pytest.raises(SpecError, match="checks.forward_precision.ratio"):
        load_catalog([ratio], builtin=False)


def test_ratio_kls_masked_rule_lets_the_old_logps_hold_anything_at_padding(catalog):
    """A rollout buffer's padded old logps may be NaN (``torch.empty``) or -inf: the
    masked rule plants them there (``any_value``), beside any id (``any_index``)."""
    rule = catalog.op("ratio_kl").masked
    assert (rule.any_index, rule.any_value) == (("action_ids",), ("old_logps",))
