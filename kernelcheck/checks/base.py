"""What every check sees: the case context, shared trials, and the outcome it returns.

Checks are pure judges: they call the candidate through :class:`CaseContext`, compare,
and return an :class:`Outcome`. They never print and never touch reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import torch

from kernelcheck import dtypes, gold
from kernelcheck.cases.grid import Case, lead_shape
from kernelcheck.cases.inputs import make_inputs, make_upstream
from kernelcheck.cases.trial_store import SharedTrials, trial_key
from kernelcheck.checks.metrics import aliasing_problems, integrity_problems, row_digests
from kernelcheck.memory import release_free_heap
from kernelcheck.smaps import unwritten
from kernelcheck.spec.model import OpSpec, Tolerance
from kernelcheck.timing import PhaseClock


class CandidateFault(Exception):
    """The candidate raised (or ran out of memory); the check's status is ``error``."""

    out_of_memory = False


class WrongOutput(CandidateFault):
    """The candidate returned something other than the op's outputs: a ``contract`` fail."""


@dataclass
class Outcome:
    status: str  # pass | fail | error | skip
    message: str = ""
    metrics: dict = field(default_factory=dict)
    tolerance: dict | None = None
    seed: int | None = None
    distribution: str | None = None  # where the failure is: the failing row's distribution
    trial_distribution: str | None = None  # what reruns it (a mixed trial's "a+b+..."); None: same
    plots: dict = field(default_factory=dict)  # bounded data for the HTML report's plots


def no_progress(check: str | None, probe: str) -> None:
    """The default progress sink: a run in process that nobody watches."""


@dataclass
class CaseContext:
    """Everything a check needs about one case, and the one way to call the candidate."""

    op: OpSpec
    case: Case
    fn: Callable
    gold_fn: Callable
    reference_fn: Callable | None
    device: torch.device
    grad: bool  # backward checks requested and the candidate declares a backward
    grad_reason: str = ""
    # told (check, probe) before each step, so a crash or a hang is pinned to that step
    progress: Callable[[str | None, str], None] = no_progress
    clock: PhaseClock = field(default_factory=PhaseClock)
    gold_backward_fn: Callable | None = None  # the op's analytic gold gradient, if it has one
    # trials of every candidate (by default none: not shared)
    shared: SharedTrials = field(default_factory=lambda: SharedTrials(None))
    _pools: dict = field(default_factory=dict, repr=False)

    @property
    def sizes(self) -> dict[str, int]:
        return self.case.sizes

    @property
    def lead(self) -> tuple[int, ...]:
        return lead_shape(self.op, self.sizes)

    def tolerance(self, judgment: str, name: str | None = None) -> Tolerance | None:
        return self.op.tolerance(judgment, self.case.dtype, name)

    def draw(
        self,
        seed: int,
        dist: str,
        lead: tuple[int, ...] | None = None,
        salt: str = "",
        part: str | None = None,
    ):
        """The inputs of one trial; drawn straight into the shared store's files when it
        will keep them as ``part`` of the trial (``SharedTrials.allocator``)."""
        empty = self.shared.allocator(self.trial_key(seed, dist), part) if part else None
        with self.clock.phase("inputs"):
            return make_inputs(
                self.op, self.sizes, self.case.dtype, seed, dist, lead=lead, salt=salt, empty=empty
            )

    def to_device(self, cpu_inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fresh device copies, so a candidate that writes its inputs spoils nothing else."""
        return {k: v.to(self.device, copy=True) for k, v in cpu_inputs.items()}

    def call(self, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Call the candidate as the gold is called: ``fn(**inputs)``; outputs as a list."""
        try:
            with torch.no_grad(), self.clock.phase("candidate"):
                out = self.fn(**inputs)
        except Exception as exc:
            raise _fault(exc, "candidate raised") from None
        return self.outputs_list(out)

    def call_backward(
        self, inputs: dict[str, torch.Tensor], upstream: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """Forward with grad, then ``autograd.grad`` w.r.t. the op's grad inputs."""
        args = dict(inputs)
        for name in self.op.grad_inputs:
            args[name] = args[name].detach().requires_grad_(True)
        try:
            with torch.enable_grad(), self.clock.phase("candidate"):
                outs = self.outputs_list(self.fn(**args))
                for i, (o, u) in enumerate(zip(outs, upstream)):
                    if tuple(o.shape) != tuple(u.shape):
                        raise WrongOutput(
                            f"output {self.op.outputs[i].name!r} shape {tuple(o.shape)} != "
                            f"expected {tuple(u.shape)}"
                        )
                wrt = [args[n] for n in self.op.grad_inputs]
                grads = torch.autograd.grad(
                    outs,
                    wrt,
                    [u.to(o.device, o.dtype) for u, o in zip(upstream, outs)],
                    allow_unused=True,
                )
        except CandidateFault:
            raise
        except Exception as exc:
            raise _fault(exc, "candidate backward raised") from None
        result = {}
        for name, g in zip(self.op.grad_inputs, grads):
            if g is None:
                raise CandidateFault(f"candidate backward gave no gradient for {name!r}")
            result[name] = g.detach()
        return [o.detach() for o in outs], result

    def outputs_list(self, out) -> list[torch.Tensor]:
        want = len(self.op.outputs)
        outs = (
            list(out) if isinstance(out, tuple) or (want > 1 and isinstance(out, list)) else [out]
        )
        if len(outs) != want or not all(isinstance(o, torch.Tensor) for o in outs):
            got = ", ".join(type(o).__name__ for o in outs)
            raise WrongOutput(
                f"candidate returned ({got}); expected {len(self.op.outputs)} tensor(s) "
                f"({', '.join(o.name for o in self.op.outputs)})"
            )
        return outs

    def expected_dtype(self, index: int) -> torch.dtype:
        spec = self.op.outputs[index].dtype
        if spec.startswith("like:"):
            inp = self.op.input(spec[5:])
            return (
                dtypes.torch_dtype(self.case.dtype)
                if inp.dtype == "case"
                else dtypes.FIXED_DTYPES[inp.dtype]
            )
        return dtypes.FIXED_DTYPES[spec]

    def expected_shape(self, index: int, lead: tuple[int, ...] | None = None) -> tuple[int, ...]:
        out = self.op.outputs[index]
        lead = self.lead if lead is None else lead
        inner = [self.sizes[d] for d in out.shape[len(self.op.lead) :] if d in self.sizes]
        if not self.op.is_row_wise(out):
            return tuple(self.sizes[d] for d in out.shape if d in self.sizes)
        return (*lead, *inner)

    def input_rows(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """An input (or its gradient) as ``[rows, ...]``: a row-wise one by its lead rows,
        a shared one (a norm's weight) as one row."""
        nlead = len(self.lead)
        if self.op.is_row_wise(self.op.input(name)) and t.dim() >= nlead:
            return flat_rows(t, nlead)
        return t.reshape(1, -1)

    def trial_key(self, seed: int, dist: str) -> str:
        c = self.case
        return trial_key(c.op, self.op.version, c.dtype, c.shape, seed, dist, c.attrs)

    def pool(self, seed: int, dist: str, rows: int) -> tuple[dict, list]:
        """The invariance pool of one trial, ``rows`` rows: (inputs, upstream gradients).

        Drawn once per case for both invariance checks, and shared with the run's other
        candidates like a trial (the checks copy it before each call, so nobody spoils it).
        """
        mine = (seed, dist, rows)
        if mine not in self._pools:
            key, part = self.trial_key(seed, dist), f"pool{rows}"
            self._pools[mine] = self.shared.get_or_make(
                key,
                part,
                lambda: {
                    "inputs": self.draw(seed, dist, lead=(rows,), salt="pool", part=part),
                    "upstream": self.upstream(seed, lead=(rows,), salt="pool"),
                },
            )
        found = self._pools[mine]
        return found["inputs"], found["upstream"]

    def drop_pools(self, seed: int, dist: str) -> None:
        """Forget the invariance pools of one trial (it is released: no one reads them)."""
        for mine in [m for m in self._pools if m[:2] == (seed, dist)]:
            del self._pools[mine]

    def upstream(self, seed: int, lead: tuple[int, ...] | None = None, salt: str = ""):
        with self.clock.phase("inputs"):
            return self._upstream(seed, lead, salt)

    def _upstream(self, seed: int, lead: tuple[int, ...] | None, salt: str):
        return [
            make_upstream(self.expected_shape(i, lead), self.expected_dtype(i), seed, salt + str(i))
            for i in range(len(self.op.outputs))
        ]


IN_PLACE_BYTES = 1 << 28  # CPU inputs this large are not copied for a call (see own_call)


class Trial:
    """One (seed, distribution) draw, with the candidate's and the gold's results cached.

    Checks that judge the same call (accuracy, precision) share one candidate run.
    """

    PARTS = ("outputs", "grads", "gold", "reference", "reference_grads")

    def __init__(self, ctx: CaseContext, seed: int, distribution: str):
        self.ctx = ctx
        self.seed = seed
        self.distribution = distribution
        self.watch = False  # integrity observes this trial: its calls check their inputs
        self.readers: dict[str, set[str]] = {}  # part -> checks still to read it

    def finished(self, check: str) -> None:
        """``check`` reads this trial no more: free the parts no other check still reads.

        Only parts with readers listed (``run_case`` lists them) are ever freed.
        """
        for part, names in self.readers.items():
            names.discard(check)
            key = f"_{part}"
            if not names and self.__dict__.get(key, ("",))[0] == "ok":
                self.__dict__[key] = ("freed", None)

    def ensure(self, part: str) -> None:
        """Make the trial's own call behind ``part`` (if not made yet); raise its fault."""
        kind, value = self.__dict__.get(f"_{part}", (None, None))
        if kind is None:
            getattr(self, part)
        elif kind == "fault":
            raise value

    @cached_property
    def key(self) -> str:
        return self.ctx.trial_key(self.seed, self.distribution)

    def _shared(self, part: str, make):
        """A part of the trial another candidate computed, or compute and share it."""
        return self.ctx.shared.get_or_make(self.key, part, make)

    @cached_property
    def cpu_inputs(self) -> dict[str, torch.Tensor]:
        draw = self.ctx.draw
        return self._shared("inputs", lambda: draw(self.seed, self.distribution, part="inputs"))

    def _cached(self, name: str, make):
        # A candidate fault is cached too: every check that needs the call reports it.
        key = f"_{name}"
        if key not in self.__dict__:
            try:
                self.__dict__[key] = ("ok", make())
            except CandidateFault as exc:
                self.__dict__[key] = ("fault", exc)
        kind, value = self.__dict__[key]
        if kind == "fault":
            raise value
        if kind == "freed":  # a check that reads a part must list it in ``uses``
            raise RuntimeError(f"trial {name} were freed: no remaining check listed them")
        return value

    def own_call(self, call: Callable[[dict], list], phase: str = "") -> list:
        """``call(inputs)`` on this trial's inputs, as the candidate gets them.

        Fresh device copies, so a candidate that writes its inputs spoils nothing else;
        but on the CPU, inputs of ``IN_PLACE_BYTES`` or more are the trial's own tensors, so
        a GB-sized input is never held twice: their 32-bit row digests, taken before the
        first call, tell afterwards whether the candidate wrote them, and a written input
        is drawn again before anyone reads it. Smaller inputs are copied: cheap, and
        a write is then counted element by element. ``phase`` names a watched call:
        its integrity findings are kept.
        """
        in_place = self.ctx.device.type == "cpu" and self.input_bytes >= IN_PLACE_BYTES
        mapped = False
        if in_place:
            # mapped from the shared file and never written: the kernel's copy-on-write
            # count tells afterwards whether the call wrote them, no digests needed (known
            # already when the last call's count said so for these very tensors: reading
            # /proc/self/smaps walks the page tables of every mapping, ~50 ms at Qwen3 size)
            clean = self.__dict__.get("_clean_inputs") is self.cpu_inputs
            mapped = clean or unwritten(self.cpu_inputs.values())
            before = None if mapped else self.input_digests
            dev = dict(self.cpu_inputs)
        else:
            dev = self.ctx.to_device(self.cpu_inputs)
        changed: list[str] = []
        if in_place:  # the call's output will be the run's largest allocation
            release_free_heap()
        try:
            results = call(dev)
        finally:
            still_clean = in_place and mapped and unwritten(dev.values())
            # the very tensors known clean (unmap_inputs lets go of this reference too)
            self.__dict__["_clean_inputs"] = self.cpu_inputs if still_clean else None
            if in_place and not still_clean:
                before = self._pristine_digests() if before is None else before
                changed = self._settle(before, dev, phase or "a call")
        if self.watch and phase:
            if in_place:
                found = changed + aliasing_problems(dev, results, phase)
            else:
                found = integrity_problems(self.cpu_inputs, dev, results, phase)
            self.__dict__.setdefault("_findings", {})[phase] = found
        return results

    def unmap_inputs(self) -> None:
        """Let go of the inputs when the shared store holds them: a later reader maps
        them again at no cost. At the Qwen3 shape they are 2.4 GB of the worker's memory,
        which the checks with pools of their own (invariance) would otherwise add to."""
        if "cpu_inputs" in self.__dict__ and self.ctx.shared.has(self.key, "inputs"):
            del self.__dict__["cpu_inputs"]
            self.__dict__.pop("_clean_inputs", None)  # it holds them too

    @cached_property
    def input_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.cpu_inputs.values())

    @cached_property
    def input_digests(self) -> dict[str, torch.Tensor]:
        return {k: row_digests(self.ctx.input_rows(k, v)) for k, v in self.cpu_inputs.items()}

    def _pristine_digests(self) -> dict[str, torch.Tensor]:
        """Row digests of the inputs as the shared file holds them (a call wrote pages of
        the mapping: what did it change?)."""
        pristine = self.ctx.shared.get(self.key, "inputs")
        if pristine is None:  # the file is gone (not while the run lives): draw them again
            pristine = self.ctx.draw(self.seed, self.distribution)
        return {k: row_digests(self.ctx.input_rows(k, v)) for k, v in pristine.items()}

    def _settle(self, before: dict, used: dict, phase: str) -> list[str]:
        """Which inputs a call on the trial's own tensors changed; draw those again."""
        problems = []
        for name, want in before.items():
            now = row_digests(self.ctx.input_rows(name, used[name].detach()))
            rows = int((now != want).sum()) if now.shape == want.shape else -1
            if rows:
                problems.append(f"{phase} changed input {name!r} ({rows} of {len(want)} rows)")
        if problems:  # the next reader gets the inputs drawn (or loaded) again
            self.__dict__.pop("cpu_inputs", None)
        return problems

    @property
    def outputs(self) -> list[torch.Tensor]:
        def run():
            outs = self.own_call(self.ctx.call, "forward")
            return [o.detach().cpu() for o in outs]

        return self._cached("outputs", run)

    @property
    def findings(self) -> dict[str, list[str]]:
        """Integrity problems seen in this trial's calls, per phase (watched calls only)."""
        return self.__dict__.get("_findings", {})

    @property
    def gold(self) -> list[torch.Tensor]:
        def run():
            inputs = self.cpu_inputs
            with self.ctx.clock.phase("gold"):
                return gold.forward(
                    self.ctx.op,
                    self.ctx.gold_fn,
                    inputs,
                    self.ctx.lead,
                    device=gold.gold_device(self.ctx.case.device),
                )

        return self._cached("gold", lambda: self._shared("gold", run))

    @property
    def reference(self) -> list[torch.Tensor]:
        def run():
            inputs = self.cpu_inputs
            with torch.no_grad(), self.ctx.clock.phase("gold"):
                # row-wise like the gold, so evaluated in the same bounded row chunks
                fn = self.ctx.reference_fn

                def reference(**args):
                    return self.ctx.outputs_list(fn(**args))

                return gold.forward(self.ctx.op, reference, inputs, self.ctx.lead, upcast=False)

        return self._cached("reference", lambda: self._shared("reference", run))

    @cached_property
    def upstream(self) -> list[torch.Tensor]:
        return self.ctx.upstream(self.seed)

    @property
    def grads(self) -> dict[str, torch.Tensor]:
        def run():
            def call(dev):
                outs, grads = self.ctx.call_backward(dev, self.upstream)
                return [*outs, *grads.values()]

            results = self.own_call(call, "backward")
            names = self.ctx.op.grad_inputs
            return dict(zip(names, (g.cpu() for g in results[-len(names) :])))

        return self._cached("grads", run)

    def release(self) -> None:
        """Drop the cached tensors (keeps seed and distribution for reporting), and the
        invariance pool drawn for this trial: no later trial reads it."""
        keep = ("ctx", "seed", "distribution", "watch", "key", "readers")
        for key in [k for k in self.__dict__ if k not in keep]:
            del self.__dict__[key]
        self.ctx.drop_pools(self.seed, self.distribution)

    def gold_grad_chunks(self):
        """The float64 gold gradient, chunk by chunk (timed as ``gold``)."""
        inputs, ups = self.cpu_inputs, self.upstream
        chunks = gold.backward_chunks(
            self.ctx.op,
            self.ctx.gold_fn,
            inputs,
            ups,
            self.ctx.lead,
            self.ctx.gold_backward_fn,
            device=gold.gold_device(self.ctx.case.device),
        )
        return self._timed(chunks)

    def _timed(self, chunks):
        """``chunks`` with the time of making each one counted as ``gold``."""
        while True:
            with self.ctx.clock.phase("gold"):
                item = next(chunks, None)
            if item is None:
                return
            yield item

    def reference_grad_chunks(self):
        """The honest fp32 reference's gradient (autograd of ``ctx.reference_fn`` on the
        inputs as the candidate gets them, in their dtype), in the gold's very chunks
        (same slices, same order: zip it with :meth:`gold_grad_chunks`); timed as ``gold``
        like the forward reference."""
        fn = self.ctx.reference_fn
        chunks = gold.backward_chunks(
            self.ctx.op,
            lambda **args: differentiable_call(fn, args),
            self.cpu_inputs,
            self.upstream,
            self.ctx.lead,
            upcast=False,
        )
        return self._timed(chunks)

    def reference_grads(self, make: Callable[[], dict]) -> dict:
        """``backward_precision``'s summary of the reference gradient's errors (a few
        numbers a row, whatever the candidate): ``make()``'s, made once per trial and
        shared with the run's other candidates like the reference. A method, not a
        property: ``make`` may do its caller's own work in the same pass over the gold."""
        return self._cached("reference_grads", lambda: self._shared("reference_grads", make))


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def differentiable_call(fn: Callable, args: dict) -> list[torch.Tensor]:
    """``fn(**args)`` as a list of outputs, recorded for autograd with every saved tensor
    copied when saved: a reference that works in place on a tensor autograd saved (logp's
    flushed ``exp_`` for 16-bit logits thresholds exp's output in place) stays
    differentiable, with the gradient of what it computed."""
    with torch.autograd.graph.saved_tensors_hooks(_copy, _same):
        out = fn(**args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


class Check:
    """Base of every check: observe each trial, then give one outcome for the case."""

    name: ClassVar[str] = ""
    PARAMS: ClassVar[dict] = {}
    needs_grad: ClassVar[bool] = False
    # the trial results it reads (of Trial.PARTS): the trial frees each once no check
    # still to observe the trial reads it (at the Qwen3 shape, a gradient is GBs)
    uses: ClassVar[frozenset[str]] = frozenset()
    # observes with small inputs only (pools or draws of its own, a trial's first rows):
    # the trial's full inputs may be let go of before it runs (Trial.unmap_inputs)
    small_inputs: ClassVar[bool] = False
    # draws inputs of its own (invariance pools, other shapes): observes after every check
    # that reads the trial's results, so those are freed before its draws (it may read
    # them first, listed in ``uses``, and call ``trial.finished`` itself)
    draws_own: ClassVar[bool] = False
    summary: ClassVar[str] = ""

    def __init__(self, ctx: CaseContext, params: dict | None = None):
        self.ctx = ctx
        self.params = {**self.PARAMS, **(params or {})}

    def skip_reason(self) -> str | None:
        """Why this check does not apply to this op/candidate (None: it applies)."""
        if self.needs_grad and not self.ctx.grad:
            return self.ctx.grad_reason or "backward checks are off"
        return None

    def trials_wanted(self, trials: list[Trial]) -> list[Trial]:
        """Which trials this check observes; ``max_seeds`` limits it per distribution."""
        limit = self.params.get("max_seeds")
        if not limit:
            return trials
        seen: dict[str, int] = {}
        out = []
        for t in trials:
            if seen.get(t.distribution, 0) < limit:
                out.append(t)
                seen[t.distribution] = seen.get(t.distribution, 0) + 1
        return out

    def progress(self, probe: str) -> None:
        """Say which step of this check runs now (a crash or hang is reported on it)."""
        self.ctx.progress(self.name, probe)

    def observe(self, trial: Trial) -> None:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError


_OOM_TEXT = ("out of memory", "not enough memory", "failed to allocate", "can't allocate memory")


def _fault(exc: Exception, what: str) -> CandidateFault:
    """A candidate's exception as a fault; running out of memory is named as such."""
    text = _first_line(exc)
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(
        t in text.lower() for t in _OOM_TEXT
    ):
        fault = CandidateFault(f"out of memory: {type(exc).__name__}: {text}")
        fault.out_of_memory = True
        return fault
    return CandidateFault(f"{what} {type(exc).__name__}: {text}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else "(no message)"


@contextmanager
def torch_threads(n: int):
    """Run a block at ``n`` CPU threads (torch's intra-op pool, which candidates read
    through ``torch.get_num_threads()``), then restore the count: a kernel whose results
    follow the thread count shows it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def flat_rows(t: torch.Tensor, nlead: int) -> torch.Tensor:
    """``[*lead, *inner]`` -> ``[rows, *inner]``."""
    return t.reshape(math.prod(t.shape[:nlead]), *t.shape[nlead:])


def fmt_index(row: int, rest: tuple, lead: tuple[int, ...]) -> str:
    from kernelcheck.checks.metrics import unravel

    return str(list(unravel(row, lead) + tuple(rest)))
