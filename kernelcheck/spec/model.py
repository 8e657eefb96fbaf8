"""Typed, immutable description of an operator and its candidates, as read from TOML.

Nothing here imports a candidate or a gold: import paths stay strings until the runner
is about to call them (so ``kernelcheck list`` works when a candidate module is broken).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Dim:
    """A named dimension. An optional dim may be left out of a grid shape (2-D vs 3-D)."""

    name: str
    default: int
    optional: bool = False
    # the largest size shape_sweep gives it (None: the sweep's own, 2^17 + 1): where no
    # model is wider and an honest fp32 reduction over more would break the contract
    sweep_max: int | None = None


@dataclass(frozen=True)
class InputSpec:
    """One input tensor.

    ``dtype`` is ``"case"`` (the grid dtype) or a fixed dtype name. ``values`` says how
    it is drawn (see ``VALUE_KINDS``): ``"case"`` (the case's distribution), a fixed
    distribution's name (whatever the case's), ``"weight"`` (a norm's weight, near 1),
    ``"mask"`` (bool, ``true_fraction`` of them true), ``"index"`` (integers in
    ``[0, index_of)``, pointing into ``index_into`` along its last dim) or ``"related"``
    (the input ``related_to`` plus a seeded normal ``perturbation``: a reference model's
    logits are the policy's give or take a fraction of a nat, never an independent draw)
    or ``"logp"`` (an old policy's log-probabilities of the tokens selected in the logits
    ``related_to`` names).

    ``scale`` multiplies float draws: a number, or a formula of the dims (``"1/sqrt(hidden)"``,
    see :func:`scale_value`) evaluated per case, since a fan-in scale that is right at one
    size is wrong at another.
    """

    name: str
    shape: tuple[str, ...]
    dtype: str = "case"
    values: str = "case"
    index_of: str | None = None
    index_into: str | None = None
    out_of_range_fraction: float = 0.0
    true_fraction: float = 0.5  # values = "mask"
    scale: float | str = 1.0  # float draws are multiplied by it (an lm_head at 1/sqrt(H))
    related_to: str | None = None  # values = "related": the input it is drawn from
    perturbation: float = 0.0  # values = "related": std of the added normal, in its units
    # a bool attribute that switches this input on: drawn and passed only where it is true
    # (logp's optional mask: existing candidates never see it at the default, false)
    when: str | None = None
    # the weight input whose rows this one's rows meet in the logits (x @ weight.T: an
    # lm_head): in `lm` rows, normal rows moved along the selected token's weight row until
    # it is confident, as an `lm` logits row's selected entry is (cases/inputs.py)
    logits_with: str | None = None

    def scale_at(self, sizes: Mapping[str, int]) -> float:
        """The factor of one case's draws (a formula evaluated at its sizes)."""
        return scale_value(self.scale, sizes)


VALUE_KINDS = {
    "case": "the case's distribution (what the grid's distributions apply to)",
    "index": "integers in [0, index_of), some out of range (out_of_range_fraction)",
    "weight": "a norm's weight: 1 + 0.1 * standard normal",
    "mask": "bool, true_fraction of them true (an attention mask)",
    "logp": "an old policy's logps of the tokens selected in related_to: the current ones "
    "give or take 0.2 nats (never above 0), one row in 8 20 to 40 nats lower (stale data)",
    "related": "the input related_to plus a normal perturbation (std perturbation), rounded once",
}


_SCALE_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_SCALE_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_SCALE_FUNCTIONS = {"sqrt": math.sqrt}
SCALE_GRAMMAR = "numbers, dim names, + - * / **, parentheses and sqrt(...)"


def _scale_node_ok(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, ast.Call):
        f = node.func
        return (
            isinstance(f, ast.Name)
            and f.id in _SCALE_FUNCTIONS
            and len(node.args) == 1
            and not node.keywords
        )
    allowed = (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, *_SCALE_BINARY, *_SCALE_UNARY)
    return isinstance(node, allowed)


def _scale_tree(expr: str) -> ast.expr:
    """The parsed formula, every node within :data:`SCALE_GRAMMAR` (else ValueError)."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"cannot parse {expr!r}") from None
    for node in ast.walk(tree):
        if not _scale_node_ok(node):
            what = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
            raise ValueError(f"{what!r} is not allowed (only {SCALE_GRAMMAR})")
    return tree


def _scale_eval(node: ast.expr, sizes: Mapping[str, int]) -> float:
    """Evaluate a tree :func:`_scale_tree` accepted; never ``eval``."""
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            raise ValueError(f"unknown dim {node.id!r}")
        return float(sizes[node.id])
    if isinstance(node, ast.BinOp):
        left, right = _scale_eval(node.left, sizes), _scale_eval(node.right, sizes)
        return float(_SCALE_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp):
        return _SCALE_UNARY[type(node.op)](_scale_eval(node.operand, sizes))
    return _SCALE_FUNCTIONS[node.func.id](_scale_eval(node.args[0], sizes))


def scale_names(expr: str) -> set[str]:
    """The dim names a scale formula reads; ValueError for anything outside the grammar."""
    tree = _scale_tree(expr)
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in funcs}


def scale_value(scale: float | str, sizes: Mapping[str, int]) -> float:
    """A number as it is, or a formula of the dims at ``sizes``: finite and > 0, else
    ValueError (a zero or negative scale would silently draw a constant or flip signs)."""
    if not isinstance(scale, str):
        return float(scale)
    try:
        value = _scale_eval(_scale_tree(scale), sizes)
    except (ArithmeticError, TypeError, ValueError) as exc:  # 1/0, overflow, sqrt(-1)
        raise ValueError(f"{scale!r} cannot be evaluated at {dict(sizes)}: {exc}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{scale!r} is {value} at {dict(sizes)}; expected a number > 0")
    return value


@dataclass(frozen=True)
class OutputSpec:
    """One output. ``dtype`` is a fixed dtype name or ``"like:<input>"``."""

    name: str
    shape: tuple[str, ...]
    dtype: str


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class OutOfRangeRule:
    """Index values outside ``[0, dim)`` must give exactly ``output`` and a zero gradient.

    ``outputs`` and ``gradients`` scope it by name (None: every output, every row-wise
    gradient; an empty ``gradients``: no gradient). The gradient judged is the one that
    flows from ``outputs`` alone: a fused logp + entropy kernel's entropy, and so its
    gradient, is not 0 on ignored rows.
    """

    input: str
    values: tuple[str | int, ...]
    output: float = 0.0
    outputs: tuple[str, ...] | None = None
    gradients: tuple[str, ...] | None = None


@dataclass(frozen=True)
class MaskedRule:
    """Where the bool input ``mask`` is false, each output in ``outputs`` is exactly its
    value and every row-wise gradient is zero, whatever the index inputs in
    ``any_index`` hold there (out-of-range ids included) and whatever the float inputs in
    ``any_value`` hold there (NaN and infinities included: a rollout buffer's padding,
    left as ``torch.empty`` gave it or filled with -inf): ratio_kl's neutral padding."""

    mask: str
    outputs: tuple[tuple[str, float], ...]
    any_index: tuple[str, ...] = ()
    any_value: tuple[str, ...] = ()


@dataclass(frozen=True)
class RaiseRule:
    """``input`` holding one of ``values`` (at a position where ``where``, a bool mask
    input, is true) must make the candidate raise: an out-of-range id that would be read."""

    input: str
    values: tuple[str | int, ...]
    where: str | None = None


@dataclass(frozen=True)
class CandidateSpec:
    name: str
    callable: str
    devices: tuple[str, ...]
    source: Path
    backward: bool = True
    probe: str | None = None
    description: str = ""
    native: bool = False
    isolate: bool | None = None
    # a baseline for `bench` only (plain eager PyTorch): `run` checks it only when named
    bench_only: bool = False
    # index inputs its caller keeps in range (ids masked before the call): drawn in range
    # only for it, and the contract rules about out-of-range values of them not checked
    in_range: tuple[str, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.source.parent


@dataclass(frozen=True)
class CheckConfig:
    enabled: bool = True
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Grid:
    """The dtype x shape x seed x distribution axes of a run. ``left_out`` names each
    distribution the op does not draw and why: a gap in coverage must be a decision the
    spec states, not an oversight (distribution -> reason)."""

    dtypes: tuple[str, ...]
    shapes: tuple[dict, ...]
    seeds: tuple[int, ...]
    distributions: tuple[str, ...]
    left_out: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OpSpec:
    name: str
    source: Path
    version: str
    description: str
    gold: str
    reference: str | None
    dims: dict[str, Dim]
    lead: tuple[str, ...]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    grad_inputs: tuple[str, ...]
    out_of_range: OutOfRangeRule | None
    tolerances: dict[str, dict[str, Tolerance]]
    grid: Grid
    checks: dict[str, CheckConfig]
    candidates: dict[str, CandidateSpec]
    timeout_s: float = 600.0
    # optional analytic float64 gradient, fn(upstream, **inputs) -> {input: grad};
    # without it the gold gradient is autograd of the gold
    gold_backward: str | None = None
    # optional fn(upstream, **inputs) -> {input: float64 magnitudes >= |gold gradient|}:
    # what backward_precision measures an entry's error against where the gradient is
    # a difference of larger terms (default: |gold gradient|)
    gradient_scale: str | None = None
    # [attributes]: keyword arguments of the gold, the reference and every candidate
    # (eps, temperature); each a tuple of values, more than one making a grid axis
    attributes: dict[str, tuple] = field(default_factory=dict)
    # values beyond the grid's that the default run checks too, one attribute at a time
    # (``temperature = { default = 1.0, sweep = [0.7, 1.3] }``)
    attribute_sweeps: dict[str, tuple] = field(default_factory=dict)
    masked: MaskedRule | None = None  # [contract.masked]
    must_raise: RaiseRule | None = None  # [contract.must_raise]
    # index inputs drawn in range only: the op as a candidate with ``in_range`` sees it
    # (:meth:`for_candidate`), part of a trial's key since its draws differ
    in_range: tuple[str, ...] = ()
    # add-on specs whose [override.<op>] changed its grid or check settings
    overridden_by: tuple[Path, ...] = ()
    # inputs an attribute switched on (:meth:`for_attributes`): a candidate may be called
    # without them, as at the attribute's other value
    switched_on: tuple[str, ...] = ()
    # (candidate, another op with that candidate's sibling as its one candidate): a
    # function of the candidate's module for another op (``candidates/siblings.py``),
    # which may share state with it (row statistics kept by one op, read by the other)
    siblings: tuple[tuple[str, OpSpec], ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.source.parent

    def check_params(self, name: str) -> dict:
        """The spec's parameters of check ``name`` (``[checks.NAME]``, ``enabled`` aside)."""
        conf = self.checks.get(name)
        return dict(conf.params) if conf else {}

    def check_enabled(self, name: str) -> bool:
        """Whether the spec leaves check ``name`` on (``enabled = false`` turns it off)."""
        conf = self.checks.get(name)
        return conf is None or conf.enabled

    @property
    def switches(self) -> frozenset[str]:
        """Attributes that switch an input on (``when``): never keyword arguments."""
        return frozenset(i.when for i in self.inputs if i.when)

    def off_grid(self, attrs: dict) -> tuple[str, ...]:
        """The attributes ``attrs`` sets to a value that is not one of the grid's (an
        attribute sweep's or an ``--attr``'s): what runs at the grid's shapes only here."""
        grid = self.attributes
        return tuple(n for n, v in attrs.items() if n in grid and v not in grid[n])

    def for_attributes(self, attrs: dict) -> OpSpec:
        """The op as one case sees it (attributes not in ``attrs`` at their defaults):
        inputs switched off left out, with the contract rules that read them, and those
        switched on plain inputs. Idempotent: a resolved op has no switches left."""
        if not self.switches:
            return self
        off = {
            i.name
            for i in self.inputs
            if i.when and not attrs.get(i.when, self.attributes[i.when][0])
        }

        def kept(rule, *names):
            return None if rule is None or off & set(names) else rule

        masked, raises, oor = self.masked, self.must_raise, self.out_of_range
        return replace(
            self,
            switched_on=tuple(i.name for i in self.inputs if i.when and i.name not in off),
            inputs=tuple(replace(i, when=None) for i in self.inputs if i.name not in off),
            grad_inputs=tuple(n for n in self.grad_inputs if n not in off),
            masked=kept(
                masked, *(masked and (masked.mask, *masked.any_index, *masked.any_value) or ())
            ),
            must_raise=kept(raises, *(raises and (raises.input, raises.where) or ())),
            out_of_range=kept(oor, *(oor and (oor.input,) or ())),
        )

    def out_of_range_uses(self, name: str) -> tuple[str, ...]:
        """What draws or judges out-of-range values of the index input ``name``: what a
        candidate that declares it ``in_range`` is not checked on."""
        oor, masked, raises = self.out_of_range, self.masked, self.must_raise
        uses = {
            "out-of-range draws": self.input(name).out_of_range_fraction > 0,
            "contract.out_of_range": oor is not None and oor.input == name,
            "contract.masked's out-of-range ids": masked is not None and name in masked.any_index,
            "contract.must_raise": raises is not None and raises.input == name,
        }
        return tuple(use for use, applies in uses.items() if applies)

    def for_candidate(self, name: str) -> OpSpec:
        """The op as candidate ``name`` is promised its inputs: each index input of its
        ``in_range`` drawn in range only, without the contract rules about out-of-range
        values of it. Idempotent."""
        narrow = set(self.candidates[name].in_range) - set(self.in_range)
        if not narrow:
            return self
        oor, masked, raises = self.out_of_range, self.masked, self.must_raise
        if masked is not None:
            any_index = tuple(n for n in masked.any_index if n not in narrow)
            masked = replace(masked, any_index=any_index)
        return replace(
            self,
            inputs=tuple(
                replace(i, out_of_range_fraction=0.0) if i.name in narrow else i
                for i in self.inputs
            ),
            out_of_range=None if oor is not None and oor.input in narrow else oor,
            must_raise=None if raises is not None and raises.input in narrow else raises,
            masked=masked,
            in_range=tuple(sorted(narrow | set(self.in_range))),
        )

    def input(self, name: str) -> InputSpec:
        return next(i for i in self.inputs if i.name == name)

    def is_row_wise(self, inp: InputSpec | OutputSpec) -> bool:
        """True when the tensor starts with the lead dims, so its rows are independent."""
        return inp.shape[: len(self.lead)] == self.lead

    def tolerance(self, judgment: str, dtype: str, name: str | None = None) -> Tolerance | None:
        """``[tolerance.<judgment>.<name>]`` for an output or gradient that has its own,
        else the op-wide ``[tolerance.<judgment>]``."""
        table = self.tolerances.get(judgment, {})
        if name is not None and f"{name}:{dtype}" in table:
            return table[f"{name}:{dtype}"]
        return table.get(dtype)


# a size in a spec: a dim name, optionally plus or minus a constant ("vocab+7")
DIM_EXPR = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:([+-])\s*(\d+))?\s*$")


def eval_dim_expr(value: str | int, shape: dict[str, int]) -> int:
    """``"vocab+7"`` -> shape['vocab'] + 7. A tiny grammar, never ``eval``."""
    if isinstance(value, int):
        return value
    m = DIM_EXPR.match(value)
    if not m or m.group(1) not in shape:
        raise ValueError(f"cannot evaluate {value!r} for shape {shape}")
    base = shape[m.group(1)]
    if m.group(2):
        base += int(m.group(3)) * (1 if m.group(2) == "+" else -1)
    return base
