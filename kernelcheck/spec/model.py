"""Typed, immutable description of an operator and its candidates, as read from TOML.

Nothing here imports a candidate or a gold: import paths stay strings until the runner
is about to call them (so ``kernelcheck list`` works when a candidate module is broken).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Dim:
    """A named dimension. An optional dim may be left out of a grid shape (2-D vs 3-D)."""

    name: str
    default: int
    optional: bool = False


@dataclass(frozen=True)
class InputSpec:
    """One input tensor.

    ``dtype`` is ``"case"`` (the grid dtype) or a fixed dtype name. ``values`` says how
    it is drawn (see ``VALUE_KINDS``): ``"case"`` (the case's distribution), a fixed
    distribution's name (whatever the case's), ``"weight"`` (a norm's weight, near 1),
    ``"mask"`` (bool, ``true_fraction`` of them true) or ``"index"`` (integers in
    ``[0, index_of)``, pointing into ``index_into`` along its last dim).
    """

    name: str
    shape: tuple[str, ...]
    dtype: str = "case"
    values: str = "case"
    index_of: str | None = None
    index_into: str | None = None
    out_of_range_fraction: float = 0.0
    true_fraction: float = 0.5  # values = "mask"
    scale: float = 1.0  # float draws are multiplied by it (an lm_head at ~1/sqrt(H))
    # a bool attribute that switches this input on: drawn and passed only where it is true
    # (logp's optional mask: existing candidates never see it at the default, false)
    when: str | None = None


VALUE_KINDS = {
    "case": "the case's distribution (what the grid's distributions apply to)",
    "index": "integers in [0, index_of), some out of range (out_of_range_fraction)",
    "weight": "a norm's weight: 1 + 0.1 * standard normal",
    "mask": "bool, true_fraction of them true (an attention mask)",
}


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

    ``outputs`` and ``gradients`` scope it by name (empty: every output, every row-wise
    gradient): a fused logp + entropy kernel's entropy is not 0 on ignored rows.
    """

    input: str
    values: tuple[str | int, ...]
    output: float = 0.0
    outputs: tuple[str, ...] = ()
    gradients: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaskedRule:
    """Where the bool input ``mask`` is false, each output in ``outputs`` is exactly its
    value and every row-wise gradient is zero, whatever the index inputs in
    ``any_index`` hold there (out-of-range ids included): ratio_kl's neutral padding."""

    mask: str
    outputs: tuple[tuple[str, float], ...]
    any_index: tuple[str, ...] = ()


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

    @property
    def base_dir(self) -> Path:
        return self.source.parent


@dataclass(frozen=True)
class CheckConfig:
    enabled: bool = True
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Grid:
    dtypes: tuple[str, ...]
    shapes: tuple[dict, ...]
    seeds: tuple[int, ...]
    distributions: tuple[str, ...]


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
    # [attributes]: keyword arguments of the gold, the reference and every candidate
    # (eps, temperature); each a tuple of values, more than one making a grid axis
    attributes: dict[str, tuple] = field(default_factory=dict)
    masked: MaskedRule | None = None  # [contract.masked]
    must_raise: RaiseRule | None = None  # [contract.must_raise]

    @property
    def base_dir(self) -> Path:
        return self.source.parent

    @property
    def switches(self) -> frozenset[str]:
        """Attributes that switch an input on (``when``): never keyword arguments."""
        return frozenset(i.when for i in self.inputs if i.when)

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
            inputs=tuple(replace(i, when=None) for i in self.inputs if i.name not in off),
            masked=kept(masked, *(masked and (masked.mask, *masked.any_index) or ())),
            must_raise=kept(raises, *(raises and (raises.input, raises.where) or ())),
            out_of_range=kept(oor, *(oor and (oor.input,) or ())),
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
