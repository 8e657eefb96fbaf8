"""Seeded inputs: one seed, one set of values; every distribution does what it claims."""

from __future__ import annotations

import math

import pytest
import torch

from kernelcheck.cases.grid import Case, parse_shard, shard
from kernelcheck.cases.inputs import edge_columns, make_inputs, make_upstream
from tests.conftest import run_small, with_candidate

SIZES = {"batch": 6, "vocab": 257}


def test_same_seed_same_bits_and_other_seed_other_values(catalog):
    op = catalog.op("logp")
    a = make_inputs(op, SIZES, "bf16", 3, "normal")
    b = make_inputs(op, SIZES, "bf16", 3, "normal")
    c = make_inputs(op, SIZES, "bf16", 4, "normal")
    assert torch.equal(a["logits"].view(torch.int16), b["logits"].view(torch.int16))
    assert torch.equal(a["target"], b["target"])
    assert not torch.equal(a["logits"], c["logits"])


def test_drawn_on_the_cpu_in_the_case_dtype(catalog):
    x = make_inputs(catalog.op("logp"), SIZES, "fp16", 0, "normal")
    assert x["logits"].device.type == "cpu" and x["logits"].dtype == torch.float16
    assert x["target"].dtype == torch.int64 and x["target"].shape == (6,)


def test_chunked_draw_is_the_same_whatever_the_chunk(catalog, monkeypatch):
    from kernelcheck.cases import inputs

    op = catalog.op("logp")
    whole = make_inputs(op, SIZES, "fp32", 1, "heavy")
    monkeypatch.setattr(inputs, "DRAW_CHUNK_ELEMENTS", 257 * 2)
    chunked = make_inputs(op, SIZES, "fp32", 1, "heavy")
    assert whole["logits"].shape == chunked["logits"].shape
    assert torch.isfinite(chunked["logits"]).all()


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_large_is_beyond_exp_range_and_finite(catalog, dtype):
    x = make_inputs(catalog.op("logp"), SIZES, dtype, 0, "large")["logits"].float()
    assert torch.isfinite(x).all()
    assert x.abs().min() > 88  # exp() of it overflows fp32 without max subtraction
    if dtype == "fp16":
        assert x.abs().max() > 6e4  # near fp16's max


def test_masked_spares_the_target_and_never_a_whole_row(catalog):
    x = make_inputs(catalog.op("logp"), {"batch": 64, "vocab": 257}, "bf16", 0, "masked")
    logits, target = x["logits"], x["target"]
    lowest = logits == torch.finfo(logits.dtype).min
    inf = torch.isinf(logits) | lowest  # masked: with -inf, or HF's finfo.min
    assert not inf.all(dim=-1).any()
    # every other row masked with the lowest finite value, the others with -inf
    by_lowest = lowest.any(-1)
    assert 24 <= int(by_lowest.sum()) <= 40 and not torch.isinf(logits[by_lowest]).any()
    # a third of the rows scattered (30%), a third the first half in one run, a third the
    # last half: columns 0 and 1 and whole blocks of any size up to half the row
    first, last = inf[:, :128].all(-1), inf[:, -128:].all(-1)
    scattered = ~first & ~last
    assert 0.2 < inf[scattered].float().mean() < 0.4
    assert 15 <= int(first.sum()) <= 27 and 15 <= int(last.sum()) <= 27
    valid = (target >= 0) & (target < 257)
    picked = logits.gather(-1, target.clamp(0, 256).unsqueeze(-1)).squeeze(-1)
    assert torch.isfinite(picked[valid]).all()


def test_equal_rows_and_heavy_tails(catalog):
    op = catalog.op("logp")
    eq = make_inputs(op, SIZES, "fp32", 0, "equal")["logits"]
    assert (eq == eq[:, :1]).all()
    heavy = make_inputs(op, {"batch": 64, "vocab": 257}, "fp32", 0, "heavy")["logits"]
    assert heavy.abs().max() <= 20 and heavy.abs().max() > 8


def test_ignored_targets_take_each_out_of_range_value_of_the_contract(catalog):
    """A kernel's training or rollout path may check only ``t < 0`` (the ignore index)
    and read past the row at ``t >= vocab``: the trials every check sees hold each
    out-of-range value of the contract, not only -100."""
    t = make_inputs(catalog.op("logp"), {"batch": 400, "vocab": 257}, "fp32", 0, "normal")["target"]
    assert ((t >= 0) & (t < 257)).float().mean() > 0.9
    assert set(t[(t < 0) | (t >= 257)].tolist()) == {-100, -1, 257, 264, 2**32 + 1}


def test_a_distributions_first_row_keeps_its_target_in_range(catalog):
    """The first row of each distribution carries its hazard at the selected entry
    (peaked's top token, lm's confident one), and a Qwen3 case has one such row a
    distribution: an ignored target there left it unjudged (logp's seed 0 did). The
    trial still holds an ignored target elsewhere."""
    op = catalog.op("logp")
    dist = "normal+large+masked+peaked+heavy+lm+equal"
    for seed in range(24):
        t = make_inputs(op, {"batch": 8, "vocab": 257}, "fp32", seed, dist)["target"]
        assert ((t[:7] >= 0) & (t[:7] < 257)).all(), (seed, t)
        assert not ((t[7:] >= 0) & (t[7:] < 257)).all(), (seed, t)
    one = [make_inputs(op, {"batch": 1, "vocab": 257}, "fp32", s, "normal") for s in range(80)]
    assert any(not 0 <= int(x["target"]) < 257 for x in one)  # a one-row trial still may


def test_an_out_of_range_value_its_dtype_cannot_hold_is_never_drawn(catalog):
    import dataclasses

    op = catalog.op("logp")
    narrow = [dataclasses.replace(i, dtype="int32") if i.name == "target" else i for i in op.inputs]
    t = make_inputs(dataclasses.replace(op, inputs=tuple(narrow)), {"batch": 400, "vocab": 257},
                    "fp32", 0, "normal")["target"]  # fmt: skip
    assert t.dtype == torch.int32
    assert set(t[(t < 0) | (t >= 257)].tolist()) == {-100, -1, 257, 264}


@pytest.mark.parametrize("vocab", [2, 17, 257, 10000, 151936])
def test_edge_columns_hold_every_power_of_two_tiles_edges(vocab):
    edges = edge_columns(vocab)
    top = 1 << ((vocab - 1).bit_length() - 1)
    assert edges[0] == top  # a second tile's first column, for every tile up to 2^k
    assert {vocab - 1, top - 1, 0} <= set(edges)
    assert all(0 <= c < vocab for c in edges) and len(set(edges)) == len(edges)


def test_every_trial_selects_edge_columns_first_one_first(catalog):
    op = catalog.ops["logp"]
    for sizes in ({"batch": 6, "vocab": 24580}, {"batch": 8, "vocab": 151936}):
        for seed in (0, 1):
            target = make_inputs(op, sizes, "fp32", seed, "normal")["target"].tolist()
            edges = edge_columns(sizes["vocab"])
            assert edges[0] in target, target
            # a quarter of the rows on average: several in a long trial
    many = make_inputs(op, {"batch": 400, "vocab": 151936}, "fp32", 0, "normal")["target"]
    at_edge = sum(int((many == c).sum()) for c in edge_columns(151936))
    assert 60 < at_edge < 140, at_edge


def test_upstream_is_seeded():
    assert torch.equal(
        make_upstream((3, 4), torch.float32, 1), make_upstream((3, 4), torch.float32, 1)
    )


def _case(i):
    return Case("logp", "torch", "cpu", "fp32", (("batch", i + 1), ("vocab", 7)), (0,), ("normal",))


def test_shards_cover_every_case_exactly_once():
    cases = [_case(i) for i in range(11)]
    ids = [c.id for k in range(1, 4) for c in shard(cases, k, 3)]
    assert sorted(ids) == sorted(c.id for c in cases)
    sizes = [len(shard(cases, k, 3)) for k in range(1, 4)]
    assert max(sizes) - min(sizes) <= 1
    assert shard(cases, 2, 3) == shard(list(cases), 2, 3)


@pytest.mark.parametrize("bad", ["3/2", "0/2", "1/0", "a/b", "2"])
def test_bad_shard(bad):
    with pytest.raises(ValueError):
        parse_shard(bad)


def test_case_id_is_readable():
    assert _case(1).id == "torch-fp32-2x7" and math.prod([2, 7]) == 14


def test_generator_output_is_pinned(catalog):
    """Reports and repros name (seed, distribution): the values behind them must never
    change silently. A deliberate change of the generator updates these bits."""
    op = catalog.op("logp")
    x = make_inputs(op, {"batch": 2, "vocab": 6}, "fp32", 0, "normal")
    assert x["logits"].view(torch.int32).tolist() == [
        [1062607581, -1075465147, 1065212457, -1072473591, -1085105079, -1098035586],
        [-1102794256, -1078773278, 1066833967, -1096637467, -1098879768, 1067073216],
    ]
    # the first row (the distribution's first, never ignored) at the first edge column,
    # the other ignored (one of the contract's out-of-range values)
    assert x["target"].tolist() == [4, -1]
    y = make_inputs(op, {"batch": 2, "vocab": 6}, "bf16", 7, "lm")
    assert y["logits"].view(torch.int16).tolist() == [
        [16364, 16587, -16161, -16369, 16612, 16539],  # column 4 the confident target
        [16434, 16521, 16617, 16652, -16349, 16556],
    ]


def test_draw_does_not_depend_on_the_thread_count(catalog, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from kernelcheck.cases import inputs

    op = catalog.op("logp")
    sizes = {"batch": 40, "vocab": 100_000}  # 4 chunks per input
    many = make_inputs(op, sizes, "bf16", 3, "normal+lm")
    monkeypatch.setattr(inputs, "_POOL", ThreadPoolExecutor(1))
    one = make_inputs(op, sizes, "bf16", 3, "normal+lm")
    assert torch.equal(many["logits"].view(torch.int16), one["logits"].view(torch.int16))


PER_INPUT_SPEC = """\
op = "mixed_inputs"
gold = "kernelcheck.ops.swiglu:gold"
lead = ["batch"]
[dims]
batch = { default = 8 }
hidden = { default = 64 }
[[input]]
name = "x"
shape = ["batch", "hidden"]
[[input]]
name = "weight"
shape = ["hidden"]
values = "weight"
[[input]]
name = "old"
shape = ["batch"]
dtype = "float32"
values = "normal"
[[input]]
name = "mask"
shape = ["batch", "hidden"]
dtype = "bool"
values = "mask"
true_fraction = 0.25
[[output]]
name = "y"
shape = ["batch", "hidden"]
dtype = "like:x"
[grid]
dtypes = ["bf16"]
shapes = [{ batch = 8 }]
"""


def test_each_input_draws_from_its_own_generator(tmp_path):
    """The case's distribution applies to values = "case" inputs only: a norm's weight
    stays near 1 and a fixed-dtype "normal" input stays normal under 'large' and
    'masked'; a mask is bool with its true fraction."""
    from kernelcheck.spec import load_catalog

    path = tmp_path / "mixed.toml"
    path.write_text(PER_INPUT_SPEC)
    op = load_catalog([path], builtin=False).op("mixed_inputs")
    sizes = {"batch": 4096, "hidden": 64}
    for dist in ("large", "masked"):
        t = make_inputs(op, sizes, "bf16", 0, dist)
        assert t["x"].dtype == torch.bfloat16
        w = t["weight"].float()
        assert t["weight"].dtype == torch.bfloat16 and int((w == 0).sum()) == 1  # one pruned
        assert (w[w != 0] - 1).abs().max() < 0.7
        assert t["old"].dtype == torch.float32 and t["old"].abs().max() < 8
        assert torch.isfinite(t["old"]).all() and torch.isfinite(w).all()
        m = t["mask"]
        assert m.dtype == torch.bool and 0.2 < m.float().mean() < 0.3
    assert make_inputs(op, sizes, "bf16", 0, "large")["x"].float().abs().min() > 1e3


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_zero_and_tiny_rows(catalog, dtype):
    op = catalog.op("rms_norm")
    sizes = {"batch": 8, "hidden": 256}
    zero = make_inputs(op, sizes, dtype, 0, "zero_rows")["x"].float()
    tiny = make_inputs(op, sizes, dtype, 0, "tiny_rows")["x"].float()
    rms = tiny.square().mean(-1).sqrt()
    assert (zero[::4] == 0).all() and (zero[1::4].abs().amax(-1) > 0).all()
    assert (rms[::4] > 0).all() and (rms[::4] < 1e-3).all() and (rms[1::4] > 0.5).all()


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("inter", [256, 1000, 5])
def test_spikes_meet_outlier_to_outlier(catalog, dtype, inter):
    """Every row of gate and up holds an outlier past exp's fp32 range, at the same
    columns in both (never an outlier up against an ordinary gate); the rest is normal,
    and a product of two outliers stays finite in fp16."""
    op = catalog.op("swiglu")
    t = make_inputs(op, {"batch": 9, "inter": inter}, dtype, 0, "spikes")
    gate, up = t["gate"].float(), t["up"].float()
    spiked = gate.abs() >= 99
    assert torch.equal(spiked, up.abs() >= 99)
    assert (spiked.sum(-1) >= 1).all() and spiked.float().mean() <= 1 / 64 + 1 / inter
    assert (gate[spiked] > 88.8).any() and gate.abs().max() <= 201
    assert gate[~spiked].abs().max() < 10
    assert torch.isfinite(t["gate"] * t["up"]).all()


def test_peaked_rows_hold_all_but_a_sliver_in_one_entry_over_a_flat_tail(catalog):
    """A converged policy's rows: the top entry holds p = 1 - q, q from 1e-7 to 1e-2,
    and at the Qwen3 vocabulary every 4,096-column tile but the top's sits 20+ nats below
    the row's max in a fifth of the rows (where a kernel may skip it as negligible), in
    some of them holding more than 1e-5 of the mass (what a logsumexp then loses)."""
    op = catalog.op("entropy")
    x = make_inputs(op, {"batch": 64, "vocab": 151936}, "fp32", 0, "peaked")["logits"]
    p = torch.softmax(x.double(), -1)
    q = 1 - p.amax(-1)
    assert (q > 0.9e-7).all() and (q < 1.1e-2).all()
    assert (q < 1e-4).sum() >= 16 and (q > 1e-4).sum() >= 16
    top = x.amax(-1, keepdim=True)
    tiles = torch.nn.functional.pad(x, (0, -x.shape[-1] % 4096), value=-1e9).unflatten(
        -1, (-1, 4096)
    )
    far_tiles = tiles.amax(-1) < top - 20
    far = far_tiles.sum(-1)
    assert (far >= tiles.shape[1] - 1).sum() >= 8 and (far == 0).sum() >= 8
    tile_mass = torch.nn.functional.pad(p, (0, -p.shape[-1] % 4096)).unflatten(-1, (-1, 4096))
    lost = (tile_mass.sum(-1) * far_tiles).sum(-1)
    assert (lost > 1e-5).sum() >= 8


def test_a_converged_policy_samples_its_top_token_in_every_other_peaked_row(catalog):
    """logp's target (an index into the logits) is the peaked row's largest entry in every
    other such row, its logp about -q; the other rows keep a drawn target."""
    op = catalog.op("logp")
    t = make_inputs(op, {"batch": 28, "vocab": 1000}, "fp32", 0, "normal+peaked")
    rows, target = t["logits"][1::2], t["target"][1::2]
    top = rows.argmax(-1)
    at_top, drawn = target[::2], target[1::2]
    in_range = (at_top >= 0) & (at_top < 1000)
    assert in_range.sum() >= 4 and (at_top == top[::2])[in_range].all()
    assert (drawn != top[1::2]).sum() >= 4


def test_bands_rows_put_whole_warps_in_silus_tail(catalog):
    """Each bands row sits at one level of +-1 to 64 (std 0.5): some rows hold 32 gates
    in a row all between 8 and 17 (fp32's sigmoid below 1 there), some all below -8,
    where a vector's early-out acts; scattered draws never give a whole warp there."""
    op = catalog.op("swiglu")
    gate = make_inputs(op, {"batch": 256, "inter": 64}, "fp32", 0, "bands")["gate"]
    level = gate.mean(-1)
    assert (level.abs() > 0.9).all() and (level.abs() < 65).all()
    assert ((gate - level[:, None]).std(-1) < 0.7).all()
    warps = gate.reshape(-1, 32)
    assert ((warps >= 8) & (warps < 17)).all(-1).sum() >= 8
    assert (warps <= -8).all(-1).sum() >= 8
    heavy = make_inputs(op, {"batch": 256, "inter": 64}, "fp32", 0, "heavy")["gate"]
    assert not (heavy.reshape(-1, 32).abs() >= 8).all(-1).any()


@pytest.mark.parametrize("hidden", [64, 1024])
def test_an_input_scale_formula_follows_the_shape(catalog, hidden):
    """linear_logp's lm_head is drawn at scale = "1/sqrt(hidden)" at every hidden size, so
    its logits stay ~N(0, 1); a fixed 0.1 gave std 3.2 at hidden 1024 (and 0.1, not
    0.125, at 64: this test replaces the one that pinned the fixed 0.1)."""
    op = catalog.op("linear_logp")
    x = make_inputs(op, {"tokens": 64, "hidden": hidden, "vocab": 1000}, "fp32", 0, "normal")
    assert abs(float(x["weight"].std()) * math.sqrt(hidden) - 1) < 0.03
    logits = x["hidden"] @ x["weight"].T
    assert abs(float(logits.std()) - 1) < 0.05


SCALED_SPEC = """\
op = "scaled"
gold = "kernelcheck.ops.swiglu:gold"
lead = ["batch"]
[dims]
batch = { default = 8 }
hidden = { default = 64 }
[[input]]
name = "x"
shape = ["batch", "hidden"]
scale = SCALE
[[output]]
name = "y"
shape = ["batch", "hidden"]
dtype = "like:x"
[grid]
dtypes = ["bf16"]
shapes = [{ batch = 8 }]
"""


def test_a_scale_formula_draws_the_bits_of_its_value(tmp_path):
    """A formula is evaluated per case and then scales exactly as a number would: the
    draws of specs with numeric scales stay bit-identical."""
    from kernelcheck.spec import load_catalog

    ops = []
    for k, scale in enumerate(["0.125", '"1/sqrt(hidden)"', '"2 ** -3 * (hidden / 64)"']):
        path = tmp_path / f"s{k}.toml"
        path.write_text(SCALED_SPEC.replace("SCALE", scale))
        ops.append(load_catalog([path], builtin=False).op("scaled"))
    drawn = [make_inputs(op, {"batch": 8, "hidden": 64}, "bf16", 2, "heavy")["x"] for op in ops]
    bits = [t.view(torch.int16) for t in drawn]
    assert torch.equal(bits[0], bits[1]) and torch.equal(bits[0], bits[2])
    wide = make_inputs(ops[1], {"batch": 8, "hidden": 256}, "bf16", 2, "heavy")["x"]
    assert 0.4 < float(wide.float().abs().max() / drawn[1].float().abs().max()) < 0.6


RATIO_KL_SIZES = {"batch": 64, "vocab": 257}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_related_logits_stay_a_fraction_of_a_nat_from_their_input(catalog, dtype):
    """ratio_kl's reference logits are the policy's plus N(0, 0.5^2), rounded once, in
    every distribution: the same -inf (masked) entries (but in `masked` rows 2 and 3 of
    every 4, finite there), and a KL below a few nats where independent draws put policy
    and reference thousands of nats apart (large)."""
    from kernelcheck.ops import ratio_kl

    op = catalog.op("ratio_kl")
    for dist in ("normal", "large", "masked", "heavy", "lm", "equal", "normal+large"):
        x = make_inputs(op, RATIO_KL_SIZES, dtype, 0, dist)
        pol, ref = x["policy_logits"].double(), x["ref_logits"].double()
        finite = torch.isfinite(pol)
        unmasked = torch.arange(pol[..., 0].numel()).view(pol.shape[:-1]) % 4 >= 2
        alike = (finite == torch.isfinite(ref)) | (unmasked[..., None] & (dist == "masked"))
        assert alike.all() and torch.isfinite(ref[finite]).all(), dist
        diff = (ref - pol)[finite]
        assert float(diff.abs().max()) < 3.5, (dist, float(diff.abs().max()))
        ids, mask = x["action_ids"], x["attention_mask"]
        _, kl = ratio_kl.gold(pol, ref, ids, mask, x["old_logps"].double())
        assert torch.isfinite(kl).all() and float(kl.max()) < 5, (dist, float(kl.max()))
    normal = make_inputs(op, RATIO_KL_SIZES, dtype, 0, "normal")
    diff = normal["ref_logits"].double() - normal["policy_logits"].double()
    assert 0.45 < float(diff.std()) < 0.55


def test_a_16_bit_large_row_cannot_hold_the_perturbation(catalog):
    """At |x| ~ 1e4 a bf16 ulp is 64 nats: rounding takes the reference back to the
    policy's value (kl exactly 0), never a full ulp away (kl ~ e^64). fp32 keeps it."""
    op = catalog.op("ratio_kl")
    bf16 = make_inputs(op, RATIO_KL_SIZES, "bf16", 1, "large")
    assert torch.equal(bf16["ref_logits"], bf16["policy_logits"])
    fp32 = make_inputs(op, RATIO_KL_SIZES, "fp32", 1, "large")
    diff = fp32["ref_logits"].double() - fp32["policy_logits"].double()
    assert 0.45 < float(diff.std()) < 0.55


@pytest.mark.parametrize(
    "bug,vocab",
    [("nan_when_the_row_starts_masked", 257), ("nan_in_masked_block", 5000)],
)
def test_masked_runs_fail_kernels_that_only_a_fully_masked_block_trips(catalog, bug, vocab):
    """Scattered -inf never fills a block nor columns 0 and 1 together: each of these
    kernels passed every check before the masked rows took runs; the honest formula
    passes the same trials."""
    for name, want in ((f"tile_bugs:{bug}", "fail"), ("tile_bugs:honest", "pass")):
        cat = with_candidate(catalog, "k", name)
        shape = {"batch": 2, "seq": 3, "vocab": vocab}
        res = run_small(cat, "k", ["forward_accuracy"], shape=shape, distributions="masked")
        assert res["forward_accuracy"].status == want, (name, res["forward_accuracy"].message)


def test_a_trials_upstream_is_zero_on_the_rows_a_loss_mask_drops():
    from kernelcheck.cases.inputs import loss_mask_rows

    allowed = torch.arange(64) >= 6  # each distribution's first row is kept
    zero = loss_mask_rows(allowed, 0)
    assert 1 <= int(zero.sum()) < 24 and not zero[:6].any()
    assert loss_mask_rows(torch.tensor([False, True]), 5).tolist() == [False, True]
    assert not loss_mask_rows(torch.zeros(6, dtype=torch.bool), 0).any()
    up = make_upstream((8, 8, 3), torch.bfloat16, 0, "0", zero)
    rows = up.view(64, 3)
    assert (rows[zero] == 0).all() and (rows[~zero] != 0).all()
    # the other rows keep the draw they had without a mask
    plain = make_upstream((8, 8, 3), torch.bfloat16, 0, "0").view(64, 3)
    assert torch.equal(rows[~zero], plain[~zero])


@pytest.mark.parametrize("dist", ["peaked", "normal+peaked+lm", "lm+normal"])
def test_the_rows_named_for_their_selected_entry_are_the_rows_the_draw_sets(catalog, dist):
    """selected_hazard_rows (which the trial's upstream keeps live, checks/trial.py) names
    the rows whose selected entry the draw set: a peaked row's top token, an lm row's
    confident one (p from 0.5 to 0.999); the lm or peaked rows it leaves out keep their
    drawn targets."""
    from kernelcheck.cases.inputs import row_distribution, selected_hazard_rows

    rows = 36
    x = make_inputs(catalog.op("logp"), {"batch": rows, "vocab": 1000}, "fp32", 0, dist)
    logits, target = x["logits"].double(), x["target"]
    ok = (target >= 0) & (target < 1000)
    p = torch.softmax(logits, -1).gather(1, target.clamp(0, 999)[:, None])[:, 0]
    set_by_draw = torch.tensor(
        [
            bool(ok[r])
            and {
                "peaked": int(target[r]) == int(logits[r].argmax()),
                "lm": 0.45 < p[r] < 0.9995,
            }.get(row_distribution(dist, r), False)
            for r in range(rows)
        ]
    )
    named = selected_hazard_rows(dist, rows) & ok  # an ignored target sets nothing
    assert int(named.sum()) >= 6, named
    assert bool(set_by_draw[named].all()), (named, set_by_draw)
    left_out = (
        ok
        & ~named
        & torch.tensor([row_distribution(dist, r) in ("lm", "peaked") for r in range(rows)])
    )
    assert int(left_out.sum()) >= 6  # mostly as drawn (an lm target may be confident anyway)
    assert int((~set_by_draw[left_out]).sum()) > int(left_out.sum()) // 2


def test_no_row_is_named_for_its_selected_entry_where_no_distribution_sets_one():
    from kernelcheck.cases.inputs import selected_hazard_rows

    assert not selected_hazard_rows("normal+heavy+masked", 12).any()


@pytest.mark.parametrize("vocab", [2, 3, 4, 5])
def test_masked_runs_never_mask_a_whole_short_row(catalog, vocab):
    """A first-half run plus scattered -inf could fill a short row (the gold of a fully
    masked row is NaN): the column after the run is kept."""
    for op in ("logp", "entropy"):
        x = make_inputs(catalog.op(op), {"batch": 300, "vocab": vocab}, "fp32", 0, "masked")
        assert not torch.isinf(x["logits"]).all(dim=-1).any(), op


def test_every_other_lm_rows_target_is_confident():
    """A rollout's own sampled token: in every other lm row the selected entry holds 50%
    to 99.9% of the softmax (a little more or less once rounded to bf16)."""
    from kernelcheck.api import load_catalog

    op = load_catalog().ops["logp"]
    x = make_inputs(op, {"batch": 4, "seq": 16, "vocab": 1000}, "bf16", 0, "lm")
    logits, target = x["logits"].reshape(64, -1).double(), x["target"].reshape(-1)
    valid = (target >= 0) & (target < 1000)
    p = torch.softmax(logits, -1).gather(-1, target.clamp(0, 999).unsqueeze(-1)).squeeze(-1)
    confident, other = p[0::2][valid[0::2]], p[1::2][valid[1::2]]
    assert len(confident) > 20 and bool(((confident > 0.45) & (confident < 0.9997)).all())
    assert float(other.max()) < 0.45


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_old_logps_follow_the_policy_with_stale_rows_where_the_gradient_holds_them(catalog, dtype):
    """values = "logp": the policy's own selected logps give or take a PPO step (ratio
    ~1), one row in 8 stale (log-ratio 20 to 40; fp16 4 to 8, where its gradient still
    fits), never at a confident target, whose gradient term cancels; drawn apart past
    STALE_TO (a 16-bit lm row's deep targets); never above 0, a peaked row's top token's
    included."""
    from kernelcheck.cases.inputs import OLD_LOGP_STEP, STALE_FROM, STALE_NATS, STALE_TO
    from kernelcheck.ops import ratio_kl

    op = catalog.op("ratio_kl")
    for dist in ("normal", "lm", "heavy", "masked", "peaked"):
        x = make_inputs(op, RATIO_KL_SIZES, dtype, 0, dist)
        assert x["old_logps"].dtype == torch.float32
        assert bool((x["old_logps"] <= 0).all()), dist  # a probability's log, at a top token too
        pol, ids = x["policy_logits"].double(), x["action_ids"]
        lp = torch.log_softmax(pol, -1).gather(-1, ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        log_ratio = lp - x["old_logps"].double()
        stale = log_ratio > 5 * OLD_LOGP_STEP
        low, high = STALE_NATS[dtype]
        assert 1 <= int(stale.sum()) <= 16, dist
        assert bool((log_ratio[stale] >= low - 1e-4).all() & (log_ratio[stale] <= high).all())
        assert bool((lp[stale] <= -STALE_FROM).all()), dist
        follows = (lp >= -STALE_TO) & ~stale
        assert float(log_ratio[follows].abs().max()) < 5 * OLD_LOGP_STEP, dist
    ratio, _ = ratio_kl.gold(*(t.double() if t.is_floating_point() else t for t in x.values()))
    assert torch.isfinite(ratio).all()


@pytest.mark.parametrize("width", [1, 7, 200, 24_583])
def test_edges_rows_hold_their_largest_entries_at_their_ends(width):
    """The largest |entry| in the last column, the next in the first, and so on inwards;
    the rest keep their order between (shape_sweep's row for head and tail paths)."""
    from kernelcheck.cases.inputs import EDGE_ENTRIES, draw_float

    x = draw_float(3, (width,), "edges", "fp32", 11)
    k = min(EDGE_ENTRIES, width)
    for row in x:
        ranked = row.abs().sort(descending=True).values
        ends = [width - 1 - i // 2 if i % 2 == 0 else i // 2 for i in range(k)]
        assert torch.equal(row[ends].abs(), ranked[:k])
    if width > 1000:  # normal entries of std 4, placed, not scaled
        assert 3.8 < float(x.std()) < 4.2
    assert draw_float(3, (width,), "edges", "fp32", 11).equal(x)  # seeded


@pytest.mark.parametrize("hidden", [64, 1024])
def test_lm_hidden_states_make_every_other_selected_token_confident(catalog, hidden):
    """linear_logp's `lm` rows (logits_with = "weight"): normal hidden states, every other
    one moved along its target's lm_head row until the target holds p = 0.5 to 0.999."""
    op = catalog.ops["linear_logp"]
    sizes = {"tokens": 32, "hidden": hidden, "vocab": 1000}
    inputs = make_inputs(op, sizes, "bf16", 0, "lm")
    h, w, t = inputs["hidden"].double(), inputs["weight"].double(), inputs["target"]
    p = torch.softmax(h @ w.T, -1).gather(1, t[:, None])[:, 0]
    assert bool(((p[::2] > 0.45) & (p[::2] < 0.9995)).all()), p[::2]
    assert float(p[1::2].max()) < 0.05  # the others as drawn: normal rows
    normal = make_inputs(op, sizes, "bf16", 0, "normal")["hidden"]
    assert 0.8 < float(normal.float().std()) < 1.2
    # fp32: normal rows alone (an honest fp32 gradient there is as far off as its logits'
    # rounding amplified by 1 / (1 - p))
    fp32 = make_inputs(op, sizes, "fp32", 0, "lm")
    p32 = torch.softmax(fp32["hidden"].double() @ fp32["weight"].double().T, -1)
    assert float(p32.gather(1, fp32["target"][:, None]).max()) < 0.05


@pytest.mark.parametrize("hidden,vocab", [(1, 16), (4, 16), (16, 3072)])
def test_lm_hidden_states_stay_finite_where_no_move_makes_the_target_confident(
    catalog, hidden, vocab
):
    """At a tiny hidden size another weight row may outgrow the target's along every
    direction: Newton's steps stop there and the row stays as drawn, never inf or NaN
    (the shape sweep's hidden=4 once drew a NaN gold)."""
    op = catalog.ops["linear_logp"]
    for seed in range(4):
        inputs = make_inputs(
            op, {"tokens": 5, "hidden": hidden, "vocab": vocab}, "bf16", seed, "lm"
        )
        assert bool(torch.isfinite(inputs["hidden"].float()).all()), seed
