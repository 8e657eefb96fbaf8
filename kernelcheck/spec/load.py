"""Read TOML specs into :mod:`kernelcheck.spec.model` objects, refusing bad ones early.

A spec either declares a whole op (``gold``, ``input``, ``output``, ...) or is an add-on
to ops declared elsewhere: ``[[candidate]]`` tables for one op or several (``op`` on the
file or on each candidate), and ``[override.<op>]`` grid or check settings. Every problem
is a :class:`SpecError` naming the file, the key and what was expected.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from kernelcheck import dtypes
from kernelcheck.errors import SpecError
from kernelcheck.spec.model import (
    DIM_EXPR,
    VALUE_KINDS,
    CandidateSpec,
    CheckConfig,
    Dim,
    Grid,
    InputSpec,
    MaskedRule,
    OpSpec,
    OutOfRangeRule,
    OutputSpec,
    RaiseRule,
    Tolerance,
    scale_names,
    scale_value,
)

DEVICES = ("cpu", "cuda", "npu")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

_OP_KEYS = {
    "op",
    "version",
    "description",
    "gold",
    "gold_backward",
    "gradient_scale",
    "reference",
    "attributes",
    "timeout_s",
    "dims",
    "lead",
    "input",
    "output",
    "backward",
    "contract",
    "tolerance",
    "grid",
    "checks",
    "candidate",
}
_ADDON_KEYS = {"op", "description", "candidate", "override"}
_INPUT_KEYS = {
    "name",
    "shape",
    "dtype",
    "values",
    "index_of",
    "index_into",
    "out_of_range_fraction",
    "true_fraction",
    "scale",
    "when",
    "related_to",
    "perturbation",
    "logits_with",
}
_CANDIDATE_KEYS = {
    "name",
    "callable",
    "devices",
    "backward",
    "probe",
    "description",
    "native",
    "isolate",
    "bench_only",
    "in_range",
}
# The keys of each table below the top ("*": every entry of a table, "[]": every table
# of an array), checked by name before any value is read: see _check_names.
_TABLE_KEYS = {
    "dims.*": {"default", "optional", "sweep_max"},
    "attributes.*": {"default", "sweep"},
    "input[]": _INPUT_KEYS,
    "output[]": {"name", "shape", "dtype"},
    "backward": {"inputs"},
    "contract": {"out_of_range", "masked", "must_raise"},
    "contract.out_of_range": {"input", "values", "output", "outputs", "gradients"},
    "contract.masked": {"mask", "outputs", "any_index", "any_value"},
    "contract.must_raise": {"input", "values", "where"},
    "grid": {"dtypes", "shapes", "seeds", "distributions", "left_out"},
    "candidate[]": _CANDIDATE_KEYS | {"op"},  # op: an add-on's, or its own op's name
}


@dataclass(frozen=True)
class Catalog:
    """Every op known to a run: the built-in specs plus the user's ``--spec`` files."""

    ops: dict[str, OpSpec]
    user_specs: tuple[Path, ...] = ()

    def op(self, name: str) -> OpSpec:
        from kernelcheck.errors import UsageError

        if name not in self.ops:
            raise UsageError(f"unknown op {name!r}; valid ops: {', '.join(sorted(self.ops))}")
        return self.ops[name]


def builtin_spec_dir() -> Path:
    """The repo's ``specs/`` in a checkout, else the copy installed inside the package."""
    here = Path(__file__).resolve()
    checkout = here.parents[2] / "specs"
    if (checkout / "logp.toml").is_file():
        return checkout
    return here.parents[1] / "specs"


def load_catalog(paths: tuple[Path, ...] | list[Path] = (), builtin: bool = True) -> Catalog:
    files = sorted(builtin_spec_dir().glob("*.toml")) if builtin else []
    user = [Path(p).resolve() for p in paths]
    for path in user:
        if path.is_dir():
            raise SpecError(path, "", "is a directory, not a spec; give a .toml file")
        if not path.is_file():
            raise SpecError(path, "", "spec file not found")
    ops: dict[str, OpSpec] = {}
    addons: list[tuple[Path, dict]] = []
    for path in [*files, *user]:
        raw = read_toml(path)
        if _is_addon(raw):
            addons.append((path, raw))
            continue
        op = parse_op(raw, path)
        if op.name in ops:
            raise SpecError(
                path, "op", f"op {op.name!r} is already declared in {ops[op.name].source}"
            )
        ops[op.name] = op
    for path, raw in addons:
        _check_names(raw, path, addon=True)  # a misspelled name first, then the add-on
        ops = _apply_addon(ops, raw, path)
    return Catalog(ops=ops, user_specs=tuple(user))


def read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(path, "", f"malformed TOML: {exc}") from None
    except OSError as exc:
        raise SpecError(path, "", f"cannot read: {exc.strerror}") from None


def _is_addon(raw: dict) -> bool:
    return "gold" not in raw and "input" not in raw and ("candidate" in raw or "override" in raw)


def _add_candidates(op: OpSpec, extra: dict[str, CandidateSpec], path: Path) -> OpSpec:
    merged = dict(op.candidates)
    for name, cand in extra.items():
        if name in merged:
            raise SpecError(
                path,
                f"candidate.{name}",
                f"duplicate candidate name (already declared in {merged[name].source})",
            )
        merged[name] = cand
    _check_in_range(op, extra.values(), path)
    return replace(op, candidates=merged)


# --- the op table ------------------------------------------------------------------------


def parse_op(raw: dict, path: Path) -> OpSpec:
    _check_names(raw, path)
    for key in ("op", "gold", "dims", "lead", "input", "output", "grid"):
        if key not in raw:
            raise SpecError(path, key, f"missing required key{_WHOLE_OP}")
    name = _get(raw, "op", str, path, "")
    gold = _import_path(raw, "gold", path, "")
    reference = _import_path(raw, "reference", path, "") if "reference" in raw else None
    gold_backward = _import_path(raw, "gold_backward", path, "") if "gold_backward" in raw else None
    scale = _import_path(raw, "gradient_scale", path, "") if "gradient_scale" in raw else None
    dims = _parse_dims(_get(raw, "dims", dict, path, ""), path)
    lead = tuple(_str_list(raw, "lead", path, ""))
    for d in lead:
        if d not in dims:
            raise SpecError(path, "lead", f"unknown dim {d!r}; declared dims: {', '.join(dims)}")
    inputs = tuple(
        _parse_input(t, path, i, dims) for i, t in enumerate(_tables(raw, "input", path))
    )
    names = [i.name for i in inputs]
    if len(set(names)) != len(names):
        raise SpecError(path, "input", "duplicate input names")
    for inp in inputs:
        _check_references(inp, inputs, path)
    _check_related(inputs, path)
    outputs = tuple(
        _parse_output(t, path, i, dims, names) for i, t in enumerate(_tables(raw, "output", path))
    )
    backward = _get(raw, "backward", dict, path, "", default={})
    _check_keys(backward, {"inputs"}, path, "backward")
    grad_inputs = tuple(_str_list(backward, "inputs", path, "backward", default=[]))
    for g in grad_inputs:
        if g not in names:
            raise SpecError(path, "backward.inputs", f"unknown input {g!r}; inputs: {names}")
    contract = _get(raw, "contract", dict, path, "", default={})
    _check_keys(contract, {"out_of_range", "masked", "must_raise"}, path, "contract")
    oor = _parse_out_of_range(
        contract.get("out_of_range"), path, inputs, [o.name for o in outputs], list(grad_inputs)
    )
    grid = _parse_grid(_get(raw, "grid", dict, path, ""), path, dims)
    _check_scales(inputs, dims, grid, path)
    attributes, sweeps = _parse_attributes(
        _get(raw, "attributes", dict, path, "", default={}), path
    )
    _check_switches(inputs, attributes, path)
    op = OpSpec(
        name=name,
        source=path,
        version=str(raw.get("version", "1")),
        description=_get(raw, "description", str, path, "", default=""),
        gold=gold,
        reference=reference,
        gold_backward=gold_backward,
        gradient_scale=scale,
        dims=dims,
        lead=lead,
        inputs=inputs,
        outputs=outputs,
        grad_inputs=grad_inputs,
        out_of_range=oor,
        tolerances=_parse_tolerances(
            _get(raw, "tolerance", dict, path, "", default={}),
            path,
            {
                "forward_accuracy": [o.name for o in outputs],
                "backward_accuracy": list(grad_inputs),
            },
        ),
        grid=grid,
        checks=_parse_checks(_get(raw, "checks", dict, path, "", default={}), path),
        candidates=_parse_candidates(raw.get("candidate", []), path, name),
        timeout_s=float(_get(raw, "timeout_s", (int, float), path, "", default=600.0)),
        attributes=attributes,
        attribute_sweeps=sweeps,
        masked=_parse_masked(contract.get("masked"), path, inputs, [o.name for o in outputs]),
        must_raise=_parse_must_raise(contract.get("must_raise"), path, inputs),
    )
    _check_in_range(op, op.candidates.values(), path)
    return op


_WHOLE_OP = (
    " (a spec declares a whole op: op, gold, dims, lead, input, output, grid; "
    "or adds [[candidate]] tables to one)"
)


def _check_names(raw: dict, path: Path, addon: bool = False) -> None:
    """Every table's and key's name, at every level, before any value is read or any key
    required: a misspelled name gets its "did you mean?", rather than a confusing error
    downstream (``[tolerance.forward_acuracy]`` in a spec without ``gold`` would say
    that ``gold`` is missing)."""
    from kernelcheck.checks import CHECKS

    _check_keys(raw, _OP_KEYS | ({"override"} if addon else set()), path, "")
    for where, allowed in _TABLE_KEYS.items():
        for key, table in _tables_at(raw, where):
            _check_keys(table, allowed, path, key)
    tolerance = _dict(raw.get("tolerance"))
    _check_keys(tolerance, set(tolerance_tables()), path, "tolerance", "tolerance table")
    checks = _dict(raw.get("checks"))
    _check_keys(checks, set(CHECKS), path, "checks", "check")
    for name, conf in checks.items():
        params = {*CHECKS[name].PARAMS, "enabled"}
        _check_keys(_dict(conf), params, path, f"checks.{name}", "parameter")


def _tables_at(raw: dict, where: str) -> list[tuple[str, dict]]:
    """The tables at ``where`` (a ``_TABLE_KEYS`` pattern), each with its key; a value
    of another type is the parser's to refuse later."""
    found = [("", raw)]
    for part in where.split("."):
        name = part.rstrip("*[]")
        step = []
        for key, t in found:
            at = f"{key}.{name}" if key else name
            if part.endswith("[]"):
                items = t.get(name) if isinstance(t.get(name), list) else []
                step += [(f"{at}[{i}]", x) for i, x in enumerate(items)]
            elif part == "*":
                step += [(f"{key}.{k}", v) for k, v in t.items()]
            else:
                step.append((at, t.get(name)))
        found = [(k, v) for k, v in step if isinstance(v, dict)]
    return found


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _check_switches(inputs, attributes: dict, path: Path) -> None:
    """``when = "<attribute>"``: a bool attribute, and no input that is always there
    points into the switched one (a switched backward input is judged where it is on)."""
    for inp in inputs:
        if inp.when is None:
            continue
        key = f"input.{inp.name}.when"
        values = attributes.get(inp.when)
        if values is None:
            raise SpecError(path, key, _unknown("attribute", inp.when, list(attributes)))
        if not all(isinstance(v, bool) for v in values):
            raise SpecError(path, key, f"attribute {inp.when!r} must be true or false")
        for other in inputs:
            if other.index_into == inp.name and other.when != inp.when:
                raise SpecError(
                    path, key, f"input {other.name!r} points into it (index_into) and is always on"
                )


def _input_of(name, kinds: tuple[str, ...], inputs, path: Path, key: str) -> str:
    found = [i for i in inputs if i.name == name and i.values in kinds]
    if not isinstance(name, str) or not found:
        valid = [i.name for i in inputs if i.values in kinds]
        raise SpecError(path, key, _unknown(f"{'/'.join(kinds)} input", str(name), valid))
    return name


def _rule_table(t, path: Path, key: str, keys: set[str]) -> dict:
    if not isinstance(t, dict):
        raise SpecError(path, key, f"expected a table, got {_tname(t)}")
    _check_keys(t, keys, path, key)
    return t


def _parse_masked(t, path: Path, inputs, outputs: list[str]) -> MaskedRule | None:
    if t is None:
        return None
    key = "contract.masked"
    _rule_table(t, path, key, _TABLE_KEYS[key])
    mask = _input_of(t.get("mask"), ("mask",), inputs, path, f"{key}.mask")
    values = _get(t, "outputs", dict, path, key)
    for name, v in values.items():
        if name not in outputs:
            raise SpecError(path, f"{key}.outputs.{name}", _unknown("output", name, outputs))
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise SpecError(path, f"{key}.outputs.{name}", f"expected a number, got {v!r}")
    any_index = tuple(
        _input_of(n, ("index",), inputs, path, f"{key}.any_index")
        for n in _str_list(t, "any_index", path, key, default=[])
    )
    # a float input with a value at each masked position: its shape starts with the mask's
    lead = tuple(next(i for i in inputs if i.name == mask).shape)
    floats = [
        i.name
        for i in inputs
        if i.values not in ("index", "mask") and tuple(i.shape[: len(lead)]) == lead
    ]
    any_value = tuple(_str_list(t, "any_value", path, key, default=[]))
    for name in any_value:
        if name not in floats:
            what = f"float input of shape [{', '.join(lead)}, ...]"
            raise SpecError(path, f"{key}.any_value", _unknown(what, name, floats))
    outs = tuple((k, float(v)) for k, v in values.items())
    return MaskedRule(mask, outs, any_index, any_value)


def _parse_must_raise(t, path: Path, inputs) -> RaiseRule | None:
    if t is None:
        return None
    key = "contract.must_raise"
    _rule_table(t, path, key, {"input", "values", "where"})
    name = _input_of(t.get("input"), ("index",), inputs, path, f"{key}.input")
    values = t.get("values")
    if (
        not isinstance(values, list)
        or not values
        or not all(
            (isinstance(v, int) and not isinstance(v, bool))
            or (isinstance(v, str) and DIM_EXPR.match(v))
            for v in values
        )
    ):
        raise SpecError(path, f"{key}.values", "expected a non-empty list of ints or 'dim+N'")
    where = t.get("where")
    if where is not None:
        where = _input_of(where, ("mask",), inputs, path, f"{key}.where")
    return RaiseRule(name, tuple(values), where)


ATTRIBUTE_TYPES = (bool, int, float, str)


def _parse_attributes(table: dict, path: Path) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(grid values, sweep values) per attribute.

    ``eps = 1e-6`` (one value), ``temperature = [1.0, 0.7]`` (a grid axis: every value
    with every shape) or ``temperature = { default = 1.0, sweep = [0.7, 1.3] }``: the
    default run also checks each sweep value, one attribute at a time, the others at
    their defaults, and each pair of swept attributes at their first sweep values (on
    the grid's first shape and its longest row up to 2^14: ``api.sweep_shapes``).
    """
    values_of, sweeps = {}, {}
    for name, value in table.items():
        key = f"attributes.{name}"
        if not name.isidentifier():
            raise SpecError(path, key, "expected a Python identifier (it is a keyword argument)")
        sweep: list = []
        if isinstance(value, dict):
            if "default" not in value:
                raise SpecError(
                    path,
                    key,
                    "expected a number, bool or string, a non-empty list of them, or "
                    f"{{ default = value, sweep = [values] }}, got {value!r}",
                )
            _check_keys(value, {"default", "sweep"}, path, key)
            sweep = value.get("sweep", [])
            if not isinstance(sweep, list):
                raise SpecError(path, f"{key}.sweep", f"expected a list, got {_tname(sweep)}")
            value = value["default"]
        values = value if isinstance(value, list) else [value]
        for what, vals in ((key, values), (f"{key}.sweep", sweep or values)):
            if not vals or not all(isinstance(v, ATTRIBUTE_TYPES) for v in vals):
                raise SpecError(
                    path,
                    what,
                    f"expected a number, bool or string, or a non-empty list of them, got {vals!r}",
                )
        if sweep and any(type(v) is not type(values[0]) for v in sweep):
            raise SpecError(path, f"{key}.sweep", f"expected values like the default {values[0]!r}")
        values_of[name] = tuple(values)
        extra = tuple(dict.fromkeys(v for v in sweep if v not in values))
        if extra:
            sweeps[name] = extra
    return values_of, sweeps


def _parse_dims(table: dict, path: Path) -> dict[str, Dim]:
    dims = {}
    for name, value in table.items():
        key = f"dims.{name}"
        if isinstance(value, int) and not isinstance(value, bool):
            value = {"default": value}
        if not isinstance(value, dict):
            raise SpecError(path, key, f"expected a table {{ default = N }}, got {_tname(value)}")
        _check_keys(value, _TABLE_KEYS["dims.*"], path, key)
        default = _get(value, "default", int, path, key)
        if default < 1:
            raise SpecError(path, f"{key}.default", f"expected an integer >= 1, got {default}")
        sweep_max = _get(value, "sweep_max", int, path, key, default=None)
        if sweep_max is not None and sweep_max < default:
            raise SpecError(
                path,
                f"{key}.sweep_max",
                f"expected an integer >= default ({default}), got {sweep_max}",
            )
        optional = bool(_get(value, "optional", bool, path, key, default=False))
        dims[name] = Dim(name, default, optional, sweep_max)
    if not dims:
        raise SpecError(path, "dims", "expected at least one dim")
    return dims


def _shape(value, path: Path, key: str, dims: dict[str, Dim]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(path, key, f"expected a list of dim names, got {_tname(value)}")
    for d in value:
        if d not in dims:
            raise SpecError(path, key, f"unknown dim {d!r}; declared dims: {', '.join(dims)}")
    return tuple(value)


def _parse_input(t: dict, path: Path, i: int, dims: dict[str, Dim]) -> InputSpec:
    key = f"input[{i}]"
    _check_keys(t, _INPUT_KEYS, path, key)
    name = _get(t, "name", str, path, key)
    key = f"input.{name}"
    dtype = _get(t, "dtype", str, path, key, default="case")
    if dtype != "case" and dtype not in dtypes.FIXED_DTYPES:
        valid = ", ".join(["case", *dtypes.FIXED_DTYPES])
        raise SpecError(path, f"{key}.dtype", f"unknown dtype {dtype!r}; expected one of: {valid}")
    related_to = _get(t, "related_to", str, path, key, default=None)
    values = _get(t, "values", str, path, key, default="related" if related_to else "case")
    from kernelcheck.cases.inputs import DISTRIBUTIONS

    if values not in VALUE_KINDS and values not in DISTRIBUTIONS:
        raise SpecError(
            path, f"{key}.values", _unknown("value kind", values, [*VALUE_KINDS, *DISTRIBUTIONS])
        )
    if values == "logp" and dtype != "case" and not dtypes.FIXED_DTYPES[dtype].is_floating_point:
        raise SpecError(path, f"{key}.dtype", 'a "logp" input has a float dtype')
    if values == "mask" and dtype != "bool":
        raise SpecError(path, f"{key}.dtype", 'a mask input has dtype = "bool"')
    true_fraction = float(_get(t, "true_fraction", (int, float), path, key, default=0.5))
    if not 0.0 <= true_fraction <= 1.0:
        raise SpecError(path, f"{key}.true_fraction", f"expected 0..1, got {true_fraction}")
    scale = _parse_scale(t, path, key, dims)
    perturbation = _parse_related(t, path, key, values, related_to)
    index_of = _get(t, "index_of", str, path, key, default=None)
    if values == "index" and index_of not in dims:
        raise SpecError(path, f"{key}.index_of", "an index input needs index_of = <a declared dim>")
    frac = float(_get(t, "out_of_range_fraction", (int, float), path, key, default=0.0))
    if not 0.0 <= frac <= 1.0:
        raise SpecError(path, f"{key}.out_of_range_fraction", f"expected 0..1, got {frac}")
    return InputSpec(
        name=name,
        shape=_shape(t.get("shape"), path, f"{key}.shape", dims),
        dtype=dtype,
        values=values,
        index_of=index_of,
        index_into=_get(t, "index_into", str, path, key, default=None),
        out_of_range_fraction=frac,
        true_fraction=true_fraction,
        scale=scale,
        when=_get(t, "when", str, path, key, default=None),
        related_to=related_to,
        perturbation=perturbation,
        logits_with=_get(t, "logits_with", str, path, key, default=None),
    )


def _parse_scale(t: dict, path: Path, key: str, dims: dict[str, Dim]) -> float | str:
    """A number > 0, or a formula of declared dims (``"1/sqrt(hidden)"``): its grammar and
    names are checked here, its value at every grid shape by :func:`_check_scales`."""
    scale = _get(t, "scale", (int, float, str), path, key, default=1.0)
    if isinstance(scale, str):
        try:
            names = scale_names(scale)
        except ValueError as exc:
            raise SpecError(
                path, f"{key}.scale", f"expected a number or a formula of the dims: {exc}"
            ) from None
        for n in sorted(names):
            if n not in dims:
                raise SpecError(path, f"{key}.scale", _unknown("dim", n, dims))
        return scale
    if not scale > 0 or not math.isfinite(scale):
        raise SpecError(path, f"{key}.scale", f"expected a number > 0, got {scale}")
    return float(scale)


def _parse_related(t: dict, path: Path, key: str, values: str, related_to: str | None) -> float:
    """``related_to`` and ``perturbation`` (a std >= 0) belong to values = "related" only."""
    if values in ("related", "logp") and related_to is None:
        what = "a related input" if values == "related" else 'a "logp" input'
        raise SpecError(path, f"{key}.related_to", f"{what} needs related_to = <an input>")
    if related_to is not None and values not in ("related", "logp"):
        raise SpecError(
            path, f"{key}.values", 'an input with related_to has values = "related" or "logp"'
        )
    if "perturbation" in t and values != "related":
        raise SpecError(path, f"{key}.perturbation", 'only a values = "related" input has one')
    perturbation = float(_get(t, "perturbation", (int, float), path, key, default=0.0))
    if not 0.0 <= perturbation < math.inf:
        raise SpecError(path, f"{key}.perturbation", f"expected a std >= 0, got {perturbation}")
    return perturbation


def _check_related(inputs: tuple[InputSpec, ...], path: Path) -> None:
    """A related input derives from a float input of its shape, drawn before it (not
    itself related) and present whenever it is (same ``when``)."""
    floats = {i.name: i for i in inputs if i.values not in ("index", "mask", "related", "logp")}
    for inp in inputs:
        if inp.related_to is None:
            continue
        key = f"input.{inp.name}.related_to"
        base = floats.get(inp.related_to)
        if base is None:
            raise SpecError(path, key, _unknown("float input", inp.related_to, floats))
        if inp.values == "logp":
            _check_logp_of(inp, base, inputs, path)
        elif base.shape != inp.shape:
            shapes = f"{list(base.shape)}, not {list(inp.shape)}"
            raise SpecError(path, key, f"{base.name!r} has shape {shapes}")
        if base.when != inp.when:
            whens = f"when = {base.when!r}, this input by {inp.when!r}"
            raise SpecError(path, key, f"{base.name!r} is switched by {whens}")


def _check_logp_of(inp: InputSpec, base: InputSpec, inputs, path: Path) -> None:
    """A "logp" input follows the selected logps of ``base``: one per row of it, at an
    index input pointing into it."""
    key = f"input.{inp.name}.related_to"
    if base.shape[:-1] != inp.shape:
        want = f"{list(base.shape[:-1])} (its rows), not {list(inp.shape)}"
        raise SpecError(path, key, f"a logp of {base.name!r} has shape {want}")
    if not any(i.values == "index" and i.index_into == base.name for i in inputs):
        raise SpecError(path, key, f"no index input has index_into = {base.name!r}")


def _check_scales(inputs: tuple[InputSpec, ...], dims: dict[str, Dim], grid: Grid, path: Path):
    """A scale formula gives a number > 0 at the default dims and at every grid shape."""
    defaults = {name: d.default for name, d in dims.items()}
    for inp in inputs:
        if not isinstance(inp.scale, str):
            continue
        for sizes in (defaults, *grid.shapes):
            try:
                scale_value(inp.scale, sizes)
            except ValueError as exc:
                raise SpecError(path, f"input.{inp.name}.scale", str(exc)) from None


def _parse_output(t: dict, path: Path, i: int, dims: dict[str, Dim], inputs: list) -> OutputSpec:
    key = f"output[{i}]"
    _check_keys(t, {"name", "shape", "dtype"}, path, key)
    name = _get(t, "name", str, path, key)
    key = f"output.{name}"
    dtype = _get(t, "dtype", str, path, key)
    if dtype.startswith("like:"):
        if dtype[5:] not in inputs:
            raise SpecError(path, f"{key}.dtype", f"'like:' names no input; inputs: {inputs}")
    elif dtype not in dtypes.FIXED_DTYPES:
        raise SpecError(
            path, f"{key}.dtype", f"expected a dtype name or 'like:<input>', got {dtype!r}"
        )
    return OutputSpec(name, _shape(t.get("shape"), path, f"{key}.shape", dims), dtype)


def _parse_out_of_range(
    t, path: Path, inputs: tuple[InputSpec, ...], outputs: list[str], grad_inputs: list[str]
) -> OutOfRangeRule | None:
    if t is None:
        return None
    key = "contract.out_of_range"
    if not isinstance(t, dict):
        raise SpecError(path, key, f"expected a table, got {_tname(t)}")
    _check_keys(t, {"input", "values", "output", "outputs", "gradients"}, path, key)
    name = _get(t, "input", str, path, key)
    match = [i for i in inputs if i.name == name and i.values == "index"]
    if not match:
        raise SpecError(path, f"{key}.input", f"expected the name of an index input, got {name!r}")
    values = t.get("values")
    if not isinstance(values, list) or not values:
        raise SpecError(
            path, f"{key}.values", "expected a non-empty list of ints or 'dim+N' strings"
        )
    for v in values:
        if isinstance(v, str) and not DIM_EXPR.match(v):
            raise SpecError(path, f"{key}.values", f"expected an int or 'dim+N', got {v!r}")
        if not isinstance(v, (int, str)) or isinstance(v, bool):
            raise SpecError(path, f"{key}.values", f"expected an int or 'dim+N', got {v!r}")
    output = float(_get(t, "output", (int, float), path, key, default=0.0))
    scope = {}
    for field_name, valid in (("outputs", outputs), ("gradients", grad_inputs)):
        if field_name not in t:
            continue  # every output, every row-wise gradient
        names = _str_list(t, field_name, path, key)
        for n in names:
            if n not in valid:
                raise SpecError(path, f"{key}.{field_name}", _unknown("name", n, valid))
        scope[field_name] = tuple(names)
    if scope.get("outputs") == ():
        raise SpecError(
            path, f"{key}.outputs", "expected at least one output (leave it out for every output)"
        )
    return OutOfRangeRule(name, tuple(values), output, **scope)


def tolerance_tables() -> list[str]:
    """The checks that read a ``[tolerance.<check>]`` table."""
    from kernelcheck.checks import CHECKS

    return [c.judgment for c in CHECKS.values() if getattr(c, "judgment", "")]


def _parse_tolerances(
    table: dict, path: Path, names: dict[str, list[str]]
) -> dict[str, dict[str, Tolerance]]:
    """``[tolerance.<check>]``: ``dtype = { atol, rtol }`` entries (op-wide), and per output
    or gradient ``[tolerance.<check>.<name>]`` tables of the same (kept as "name:dtype")."""
    out: dict[str, dict[str, Tolerance]] = {}
    valid = tolerance_tables()
    for judgment, per_dtype in table.items():
        key = f"tolerance.{judgment}"
        if judgment not in valid:  # a misspelled table would silently skip its check
            raise SpecError(path, key, _unknown("tolerance table", judgment, valid))
        if not isinstance(per_dtype, dict):
            raise SpecError(path, key, f"expected a table of dtypes, got {_tname(per_dtype)}")
        out[judgment] = {}
        own = names.get(judgment, [])
        for dname, tol in per_dtype.items():
            short = dtypes.canonical(dname)
            if short is not None:  # op-wide: fp32 = { atol, rtol }
                out[judgment][short] = _tolerance(tol, path, f"{key}.{dname}")
            elif dname in own:  # [tolerance.<check>.<name>]: its own dtype table
                if not isinstance(tol, dict):
                    raise SpecError(path, f"{key}.{dname}", "expected a table of dtypes")
                for d, t in tol.items():
                    short = _tolerance_dtype(d, path, f"{key}.{dname}.{d}")
                    out[judgment][f"{dname}:{short}"] = _tolerance(t, path, f"{key}.{dname}.{d}")
            else:
                valid = ["fp32", "bf16", "fp16", *own]
                raise SpecError(
                    path, f"{key}.{dname}", _unknown("dtype, output or gradient", dname, valid)
                )
    return out


def _tolerance_dtype(name: str, path: Path, key: str) -> str:
    short = dtypes.canonical(name)
    if short is None:
        raise SpecError(path, key, "unknown dtype; expected fp32, bf16 or fp16")
    return short


def _tolerance(tol, path: Path, key: str) -> Tolerance:
    if not isinstance(tol, dict):
        raise SpecError(path, key, "expected { atol = X, rtol = Y }")
    _check_keys(tol, {"atol", "rtol"}, path, key)
    atol = float(_get(tol, "atol", (int, float), path, key))
    rtol = float(_get(tol, "rtol", (int, float), path, key, default=0.0))
    if atol < 0 or rtol < 0:
        raise SpecError(path, key, "atol and rtol must be >= 0")
    return Tolerance(atol, rtol)


def _parse_grid(t: dict, path: Path, dims: dict[str, Dim]) -> Grid:
    from kernelcheck.cases.inputs import DISTRIBUTIONS

    _check_keys(t, {"dtypes", "shapes", "seeds", "distributions", "left_out"}, path, "grid")
    dts = []
    for d in _str_list(t, "dtypes", path, "grid"):
        short = dtypes.canonical(d)
        if short is None:
            raise SpecError(path, "grid.dtypes", f"unknown dtype {d!r}; valid: fp32, bf16, fp16")
        dts.append(short)
    shapes = t.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise SpecError(path, "grid.shapes", "expected a non-empty list of { dim = size } tables")
    parsed = tuple(_grid_shape(s, path, f"grid.shapes[{i}]", dims) for i, s in enumerate(shapes))
    seeds = t.get("seeds", [0])
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds) or not seeds:
        raise SpecError(path, "grid.seeds", f"expected a non-empty list of ints, got {seeds!r}")
    dists = _str_list(t, "distributions", path, "grid", default=["normal"])
    for d in dists:
        if d not in DISTRIBUTIONS:
            raise SpecError(path, "grid.distributions", _unknown("distribution", d, DISTRIBUTIONS))
    left_out = _parse_left_out(t, path, dists)
    return Grid(tuple(dts), parsed, tuple(seeds), tuple(dists), left_out)


def _parse_left_out(t: dict, path: Path, dists: list[str]) -> dict[str, str]:
    """``left_out = { zero_rows = "reason", ... }``: distributions the grid does not draw,
    each with the reason the spec gives (an empty reason is no reason)."""
    from kernelcheck.cases.inputs import DISTRIBUTIONS

    table = _get(t, "left_out", dict, path, "grid", default={})
    for name, reason in table.items():
        key = f"grid.left_out.{name}"
        if name not in DISTRIBUTIONS:
            raise SpecError(path, key, _unknown("distribution", name, DISTRIBUTIONS))
        if name in dists:
            raise SpecError(path, key, "is in grid.distributions too; drop one of the two")
        if not isinstance(reason, str) or not reason.strip():
            raise SpecError(path, key, "expected a non-empty string: why the grid leaves it out")
    return dict(table)


def _grid_shape(s, path: Path, key: str, dims: dict[str, Dim]) -> dict:
    if not isinstance(s, dict):
        raise SpecError(path, key, f"expected a {{ dim = size }} table, got {_tname(s)}")
    return resolve_shape(s, dims, lambda k, msg: SpecError(path, f"{key}.{k}" if k else key, msg))


def resolve_shape(sizes: dict, dims: dict[str, Dim], error) -> dict:
    """Fill defaults for required dims, drop absent optional ones, validate sizes."""
    for name, size in sizes.items():
        if name not in dims:
            raise error(name, _unknown("dim", name, dims))
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise error(name, f"expected an integer >= 1, got {size!r}")
    out = {}
    for name, dim in dims.items():
        if name in sizes:
            out[name] = sizes[name]
        elif not dim.optional:
            out[name] = dim.default
    return out


def _parse_checks(table: dict, path: Path) -> dict[str, CheckConfig]:
    from kernelcheck.checks import CHECKS

    out = {}
    for name, conf in table.items():
        key = f"checks.{name}"
        if name not in CHECKS:
            raise SpecError(path, key, _unknown("check", name, CHECKS))
        if not isinstance(conf, dict):
            raise SpecError(path, key, f"expected a table, got {_tname(conf)}")
        params = dict(conf)
        enabled = params.pop("enabled", True)
        if not isinstance(enabled, bool):
            raise SpecError(path, f"{key}.enabled", f"expected true or false, got {enabled!r}")
        defaults = CHECKS[name].PARAMS
        for p, v in params.items():
            if p not in defaults:
                raise SpecError(
                    path, f"{key}.{p}", _unknown("parameter", p, [*defaults, "enabled"])
                )
            want = type(defaults[p])
            if want is tuple and isinstance(v, list):  # a TOML array: a list of names
                v = params[p] = tuple(v)
            ok = isinstance(v, want) or (want is float and isinstance(v, int))
            if not ok or isinstance(v, bool) != isinstance(defaults[p], bool):
                raise SpecError(path, f"{key}.{p}", f"expected {want.__name__}, got {_tname(v)}")
        out[name] = CheckConfig(enabled, params)
    return out


def _parse_candidates(items, path: Path, op: str) -> dict[str, CandidateSpec]:
    """The ``[[candidate]]`` tables of op ``op``'s own spec."""
    out: dict[str, CandidateSpec] = {}
    for i, t in enumerate(_candidate_tables(items, path)):
        cand = _parse_candidate(t, path, i)
        key = f"candidate.{cand.name}"
        if t.get("op", op) not in (op, [op]):  # its own op, said again, is harmless
            raise SpecError(
                path,
                f"{key}.op",
                f"a candidate in op {op!r}'s own spec is one of its candidates; put a "
                "candidate of another op in an add-on spec (a file without gold)",
            )
        if cand.name in out:
            raise SpecError(path, key, "duplicate candidate name in this file")
        out[cand.name] = cand
    return out


def _candidate_tables(items, path: Path) -> list:
    if not isinstance(items, list):
        raise SpecError(path, "candidate", "expected an array of tables ([[candidate]])")
    for i, t in enumerate(items):
        if not isinstance(t, dict):
            raise SpecError(path, f"candidate[{i}]", f"expected a table, got {_tname(t)}")
    return items


def _parse_candidate(t: dict, path: Path, i: int) -> CandidateSpec:
    """One ``[[candidate]]`` table (its ``op`` key, if any, is read by the caller)."""
    key = f"candidate[{i}]"
    _check_keys(t, _CANDIDATE_KEYS | {"op"}, path, key)
    name = _get(t, "name", str, path, key)
    if not re.match(r"^[A-Za-z0-9_.-]+$", name):
        raise SpecError(
            path, f"{key}.name", f"expected letters, digits, '_', '-' or '.', got {name!r}"
        )
    key = f"candidate.{name}"
    devices = _str_list(t, "devices", path, key)
    for d in devices:
        if d not in DEVICES:
            raise SpecError(path, f"{key}.devices", _unknown("device", d, DEVICES))
    isolate = t.get("isolate")
    if isolate is not None and not isinstance(isolate, bool):
        raise SpecError(path, f"{key}.isolate", f"expected true or false, got {isolate!r}")
    return CandidateSpec(
        name=name,
        callable=_import_path(t, "callable", path, key),
        devices=tuple(devices),
        source=path,
        backward=_get(t, "backward", bool, path, key, default=True),
        probe=_import_path(t, "probe", path, key) if "probe" in t else None,
        description=_get(t, "description", str, path, key, default=""),
        native=_get(t, "native", bool, path, key, default=False),
        isolate=isolate,
        bench_only=_get(t, "bench_only", bool, path, key, default=False),
        in_range=tuple(dict.fromkeys(_str_list(t, "in_range", path, key, default=[]))),
    )


def _check_in_range(op: OpSpec, cands, path: Path) -> None:
    """``in_range = ["target"]``: index inputs of the op that some draw or contract rule
    takes out of range (else the promise would change nothing, silently)."""
    index = [i.name for i in op.inputs if i.values == "index"]
    for cand in cands:
        key = f"candidate.{cand.name}.in_range"
        for name in cand.in_range:
            if name not in index:
                raise SpecError(path, key, _unknown("index input", name, index))
            if not op.out_of_range_uses(name):
                raise SpecError(
                    path, key, f"op {op.name} never passes an out-of-range {name}; drop it"
                )


# --- add-on specs ----------------------------------------------------------------------------

_OVERRIDE_KEYS = {"grid", "checks"}


def _apply_addon(ops: dict[str, OpSpec], raw: dict, path: Path) -> dict[str, OpSpec]:
    """``ops`` with an add-on file's candidates added and its ``[override.<op>]`` tables
    applied; a candidate's ``op`` (a name or a list) wins over the file's."""
    for key in raw:
        if key in _OVERRIDE_KEYS:  # an op's own table, written at the top of an add-on
            op = raw["op"] if isinstance(raw.get("op"), str) else "<op>"
            raise SpecError(
                path, key, f"an add-on spec sets an op's {key} in [override.{op}.{key}]"
            )
    _check_keys(raw, _ADDON_KEYS, path, "")
    overrides = _get(raw, "override", dict, path, "", default={})
    items = _candidate_tables(raw.get("candidate", []), path)
    if not items and not overrides:
        raise SpecError(
            path, "candidate", "expected at least one [[candidate]] or [override.<op>] table"
        )
    out = dict(ops)
    for name, extra in _addon_candidates(items, path, ops, _op_names(raw, path, "", ops)).items():
        out[name] = _add_candidates(out[name], extra, path)
    for name, table in overrides.items():
        out[name] = _override(out, name, table, path)
    return out


def _addon_candidates(
    items: list, path: Path, ops: dict, file_ops: tuple[str, ...]
) -> dict[str, dict[str, CandidateSpec]]:
    """An add-on's candidates by op: each of the ops its ``op`` names, else the file's."""
    by_op: dict[str, dict[str, CandidateSpec]] = {}
    for i, t in enumerate(items):
        cand = _parse_candidate(t, path, i)
        key = f"candidate.{cand.name}"
        names = _op_names(t, path, key, ops) or file_ops
        if not names:
            raise SpecError(
                path,
                f"{key}.op",
                'missing: name the op it implements (op = "logp", or a list of ops), '
                "on the candidate or at the top of the file",
            )
        for name in names:
            group = by_op.setdefault(name, {})
            if cand.name in group:
                raise SpecError(path, key, f"duplicate candidate name for op {name} in this file")
            group[cand.name] = cand
    return by_op


def _op_names(t: dict, path: Path, where: str, ops: dict) -> tuple[str, ...]:
    """``op = "logp"`` or ``op = ["logp", "entropy"]``, each a known op; () when absent."""
    full = f"{where}.op" if where else "op"
    value = t.get("op", [])
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(path, full, f"expected an op name or a list of op names, got {value!r}")
    for n in names:
        if n not in ops:
            raise SpecError(path, full, _unknown("op", n, sorted(ops)))
    return tuple(dict.fromkeys(names))


def _override(ops: dict[str, OpSpec], name: str, table, path: Path) -> OpSpec:
    """``[override.<op>]``: the op with its ``grid`` keys and ``checks`` parameters
    replaced by the table's (the rest kept), validated as in the op's own spec."""
    key = f"override.{name}"
    if name not in ops:
        raise SpecError(path, key, _unknown("op", name, sorted(ops)))
    if not isinstance(table, dict):
        raise SpecError(path, key, f"expected a table, got {_tname(table)}")
    if "tolerance" in table:
        raise SpecError(path, f"{key}.tolerance", "an add-on cannot change an op's tolerances")
    _check_keys(table, _OVERRIDE_KEYS, path, key)
    op = ops[name]
    try:
        if "grid" in table:
            op = replace(op, grid=_override_grid(op, table["grid"], path))
        if "checks" in table:
            op = replace(op, checks=_override_checks(op, table["checks"], path))
    except SpecError as exc:  # the key as written in the add-on
        raise SpecError(path, f"{key}.{exc.key}", exc.problem) from None
    return replace(op, overridden_by=(*op.overridden_by, path))


def _override_grid(op: OpSpec, t, path: Path) -> Grid:
    """The op's grid with the keys ``t`` gives replaced; a distribution ``t`` puts back in
    the grid leaves ``left_out`` unless ``t`` gives ``left_out`` too."""
    if not isinstance(t, dict):
        raise SpecError(path, "grid", f"expected a table, got {_tname(t)}")
    g = op.grid
    dists = t.get("distributions", g.distributions)
    merged = {
        "dtypes": list(g.dtypes),
        "shapes": [dict(s) for s in g.shapes],
        "seeds": list(g.seeds),
        "distributions": list(g.distributions),
        "left_out": {k: v for k, v in g.left_out.items() if not _listed(k, dists)},
        **t,
    }
    grid = _parse_grid(merged, path, op.dims)
    _check_scales(op.inputs, op.dims, grid, path)
    return grid


def _listed(name: str, values) -> bool:
    return isinstance(values, (list, tuple)) and name in values


def _override_checks(op: OpSpec, t, path: Path) -> dict[str, CheckConfig]:
    """The op's check settings with each parameter ``t`` gives replaced."""
    if not isinstance(t, dict):
        raise SpecError(path, "checks", f"expected a table, got {_tname(t)}")
    merged = {}
    for name, conf in t.items():
        old = op.checks.get(name)
        base = {"enabled": old.enabled, **old.params} if old else {}
        merged[name] = {**base, **conf} if isinstance(conf, dict) else conf
    return {**op.checks, **_parse_checks(merged, path)}


# --- small validators ----------------------------------------------------------------------


_MISSING = object()


def _get(t: dict, key: str, typ, path: Path, where: str, default=_MISSING):
    full = f"{where}.{key}" if where else key
    if key not in t:
        if default is _MISSING:
            raise SpecError(path, full, "missing required key")
        return default
    value = t[key]
    types = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(value, bool) and bool not in types:
        raise SpecError(path, full, f"expected {_names(types)}, got a boolean")
    if not isinstance(value, types):
        raise SpecError(path, full, f"expected {_names(types)}, got {_tname(value)}")
    return value


def _str_list(t: dict, key: str, path: Path, where: str, default=_MISSING) -> list[str]:
    value = _get(t, key, list, path, where, default=default)
    if not all(isinstance(v, str) for v in value):
        full = f"{where}.{key}" if where else key
        raise SpecError(path, full, "expected a list of strings")
    return value


def _tables(t: dict, key: str, path: Path) -> list[dict]:
    value = t.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise SpecError(path, key, f"expected one or more [[{key}]] tables")
    return value


def _import_path(t: dict, key: str, path: Path, where: str) -> str:
    value = _get(t, key, str, path, where)
    if not _IMPORT_PATH.match(value):
        full = f"{where}.{key}" if where else key
        raise SpecError(path, full, f"expected an import path 'module:attr', got {value!r}")
    return value


def _check_keys(t: dict, allowed: set[str], path: Path, where: str, kind: str = "key") -> None:
    for key in t:
        if key not in allowed:
            full = f"{where}.{key}" if where else key
            raise SpecError(path, full, _unknown(kind, key, sorted(allowed)))


DEVICE_ALIASES = {"gpu": "cuda", "nvidia": "cuda", "ascend": "npu", "host": "cpu"}


def _unknown(kind: str, name: str, valid) -> str:
    valid = list(valid)
    alias = DEVICE_ALIASES.get(name.lower()) if kind == "device" else None
    near = [alias] if alias in valid else difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"unknown {kind} {name!r}{hint}; valid: {', '.join(valid)}"


def _tname(value) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _names(types) -> str:
    if set(types) == {int, float}:
        return "a number"
    words = {int: "an integer", float: "a number", str: "a string", dict: "a table",
             list: "a list", bool: "true or false"}  # fmt: skip
    return " or ".join(words.get(t, t.__name__) for t in types)


def _check_references(inp: InputSpec, inputs, path: Path) -> None:
    """``index_into`` names an input; ``logits_with`` a 2-D input whose first dim an index
    input selects and whose second is this input's last (the rows meet in ``x @ weight.T``)."""
    if inp.index_into and inp.index_into not in [i.name for i in inputs]:
        raise SpecError(path, f"input.{inp.name}.index_into", f"unknown input {inp.index_into!r}")
    if inp.logits_with is None:
        return
    key = f"input.{inp.name}.logits_with"
    weight = next((i for i in inputs if i.name == inp.logits_with), None)
    if weight is None or len(weight.shape) != 2 or weight.shape[1] != inp.shape[-1]:
        raise SpecError(path, key, f"expected a [vocab, {inp.shape[-1]}] input's name")
    if not any(i.values == "index" and i.index_of == weight.shape[0] for i in inputs):
        raise SpecError(path, key, f"no index input selects a row of {weight.name!r}")
