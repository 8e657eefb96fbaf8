"""What every check sees of its case, and the one way to call the candidate."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from kernelcheck import dtypes
from kernelcheck.cases import grid
from kernelcheck.cases.grid import Case, lead_shape
from kernelcheck.cases.inputs import loss_mask_rows, make_inputs, make_upstream
from kernelcheck.cases.trial_store import SharedTrials, trial_key
from kernelcheck.checks.metrics import changed_elements
from kernelcheck.checks.outcome import CandidateFault, WrongOutput, candidate_fault
from kernelcheck.checks.rows import flat_rows
from kernelcheck.fresh_memory import poisoned_allocations
from kernelcheck.spec.model import OpSpec, Tolerance
from kernelcheck.timing import PhaseClock


def handed_copy(u: torch.Tensor, device, dtype: torch.dtype) -> torch.Tensor:
    """``u`` on ``device`` in ``dtype`` for a backward to read, never ``u`` itself: a
    backward that writes its upstream gradient must not change the tensor the gold reads
    next. Where no conversion is needed the copy keeps ``u``'s very layout (strides,
    offset, the padding between elements: the contract's strided-upstream probe); an
    expanded tensor (one element for many) is handed as is: a write into it raises."""
    if u.device != torch.device(device) or u.dtype != dtype:
        return u.to(device, dtype)
    if any(st == 0 and n > 1 for st, n in zip(u.stride(), u.shape)):
        return u
    storage = u.untyped_storage().clone()
    return torch.empty(0, dtype=dtype, device=u.device).set_(
        storage, u.storage_offset(), u.size(), u.stride()
    )


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
    # the other values of each value attribute the candidate takes (the grid's and the
    # sweep's), and ``rebound(changes)`` -> (fn, gold_fn) at the case's attributes with
    # ``changes``: the contract calls them in this process, as a model's layers would
    other_attribute_values: dict[str, tuple] = field(default_factory=dict)
    rebound: Callable[[dict], tuple[Callable, Callable]] | None = None
    # each switch attribute whose input the candidate takes -> (its other value, the op
    # as a case at that value sees it): logp with a mask, where the case has none
    switched_ops: dict[str, tuple[bool, OpSpec]] = field(default_factory=dict)
    # the swept attributes the candidate can be called at (None: every one): where it
    # takes none, no sweep case runs for it and the first grid case is its big-batch case
    swept_taken: frozenset[str] | None = None
    # (label, op, callable) of the candidate's siblings: its module's functions for other
    # ops, which may share state with it (candidates/siblings.py)
    siblings: tuple[tuple[str, OpSpec, Callable], ...] = ()
    gradient_scale_fn: Callable | None = None  # backward_precision's yardstick, if not |gold|
    # trials of every candidate (by default none: not shared)
    shared: SharedTrials = field(default_factory=lambda: SharedTrials(None))
    # ``in_pristine_process(program, *args)``: ``program(ctx, *args)`` run in a process
    # where the candidate was never called (runner/pristine.py), with this case's
    # context built afresh there; its result comes back (None: no such process here)
    in_pristine_process: Callable | None = None
    # whether the case runs in a process of its own (an isolated worker's fork), where a
    # process-wide setting (an address-space limit) touches no one else's code
    own_process: bool = False
    # backward calls of this case that wrote the upstream gradient handed to them (a
    # model may read that tensor again: PyTorch forbids it); ``integrity`` reports them
    upstream_writes: list[str] = field(default_factory=list)
    # why pristine processes imported the candidate's module from its own folder, not a
    # private copy (runner/case.py): files kept beside it were shared; ``determinism``
    # lists them as not judged
    shared_module_folder: list[str] = field(default_factory=list)
    _pools: dict = field(default_factory=dict, repr=False)

    @property
    def sizes(self) -> dict[str, int]:
        return self.case.sizes

    @property
    def lead(self) -> tuple[int, ...]:
        return lead_shape(self.op, self.sizes)

    @property
    def row_work(self) -> int:
        """``cases.grid.row_work`` of the case's shape."""
        return grid.row_work(self.op, self.sizes)

    def row_bytes(self, itemsize: int) -> int:
        """Bytes of one lead row of the row-wise inputs, their floats at ``itemsize``."""
        per_row = 0
        for spec in self.op.inputs:
            if self.op.is_row_wise(spec):
                inner = [self.sizes[d] for d in spec.shape[len(self.op.lead) :] if d in self.sizes]
                per_row += itemsize * math.prod(inner)
        return max(1, per_row)

    def widest_row(self) -> int:
        """A row's elements in the op's widest row-wise input (a buffer's size)."""
        op = self.op
        return max(
            math.prod(self.sizes[d] for d in s.shape[len(op.lead) :] if d in self.sizes)
            for s in op.inputs
            if op.is_row_wise(s)
        )

    def big_batch_rows(self, most: int, elements: int, work: int) -> int:
        """A big batch's rows (0: none in this case, see :meth:`takes_big_batch_probes`):
        up to ``most``, within ``elements`` of the widest row-wise input and ``work`` of
        a row's products (``cases.grid.row_work``)."""
        if not self.takes_big_batch_probes():
            return 0
        return min(most, elements // self.widest_row(), work // self.row_work)

    def takes_big_batch_probes(self) -> bool:
        """Whether the interface probes' big batches (``contract``'s training and wide
        batches, ``integrity``'s wide second call) run in this case: the grid's first
        shape's cases at its attributes, and the big-batch cases; never for an op
        without lead dims."""
        op = self.op
        first = not op.off_grid(self.case.attributes) and grid.at_first_shape(op, self.case)
        return bool(op.lead) and (first or self.is_big_batch_case())

    def is_big_batch_case(self) -> bool:
        """Whether this case takes the checks' batches far past the grid's (invariance's
        80M elements whatever its row length; determinism's training batch past 16,384
        rows): it sets as many attributes off the grid as the attribute sweeps combine
        (two, or the one an op sweeps), each at its first sweep value, so each swept
        attribute meets a kernel's large-batch path (a temperature forgotten past 2^25
        logits) once, and a repro pinning them does too. An op that sweeps no attribute
        takes it in its first dtype's case of its first grid shape (swiglu's 64 x 1,000
        grid rows would never pass 2^24 elements, where a kernel may take a flat threaded
        path). A candidate is judged there at the sweeps it can be called at: one that
        takes no swept attribute (a linear_logp without a bias) takes it in the first grid
        case, where it runs, and never meets the huge batches otherwise."""
        op, taken = self.op, self.swept_taken
        sweeps = {n: v for n, v in op.attribute_sweeps.items() if taken is None or n in taken}
        if not sweeps:  # no sweep case to take it: the first grid case does
            return self.at_first_grid_case()
        attrs = self.case.attributes
        off = op.off_grid(attrs)
        firsts = all(sweeps.get(n, (None,))[0] == attrs[n] for n in off)
        return bool(off) and firsts and len(off) >= min(2, len(sweeps))

    def at_first_dtype(self) -> bool:
        """``cases.grid.at_first_dtype`` of the case."""
        return grid.at_first_dtype(self.op, self.case)

    def at_first_grid_case(self) -> bool:
        """``cases.grid.at_first_grid_case`` of the case."""
        return grid.at_first_grid_case(self.op, self.case)

    def at_attributes(self, changes: dict) -> CaseContext:
        """This context with the candidate and the gold bound to the case's attributes
        updated with ``changes`` (``rebound``); the analytic gold gradient, bound to the
        case's own values, is dropped."""
        fn, gold_fn = self.rebound(changes)
        return replace(self, fn=fn, gold_fn=gold_fn, gold_backward_fn=None)

    @property
    def other_dtypes(self) -> list[str]:
        """The grid's dtypes other than the case's, in grid order: a process may call the
        kernel in any of them before or after this case's (an evaluation in fp32 before
        bf16 training), and a choice or cache keyed without the dtype keeps that call's."""
        return [d for d in self.op.grid.dtypes if d != self.case.dtype]

    def case_dtype_inputs(self, inputs: dict[str, torch.Tensor]) -> list[str]:
        """The float inputs the spec draws in the case's dtype (``dtype = "case"``): what
        a call in another dtype changes."""
        return [
            s.name
            for s in self.op.inputs
            if s.dtype == "case" and s.name in inputs and inputs[s.name].is_floating_point()
        ]

    def in_dtype(self, inputs: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
        """``inputs`` with the case-dtype ones cast to ``dtype`` (the others kept)."""
        cast, to = set(self.case_dtype_inputs(inputs)), dtypes.torch_dtype(dtype)
        return {k: v.to(to) if k in cast else v for k, v in inputs.items()}

    @property
    def shared_grad_inputs(self) -> list[str]:
        """The grad inputs that are not row-wise (a norm's weight, an lm_head): their
        gradient sums every row, which a training batch exercises."""
        return [n for n in self.op.grad_inputs if not self.op.is_row_wise(self.op.input(n))]

    def at_sizes(self, sizes: dict[str, int], share: bool = False) -> CaseContext:
        """The case's context at another shape: same candidate, dtype, attributes; its
        trials shared with the other candidates only if ``share``."""
        case = replace(self.case, shape=tuple(sizes.items()))
        shared = self.shared if share else SharedTrials(None)
        return replace(self, case=case, shared=shared, _pools={})

    def training_rows(self, big_rows: int, big_work: int) -> int:
        """A training batch's rows: ``big_rows``, fewer at long rows (``big_work``
        products of a row's dims in all); 0 where that is no more than the case's own."""
        rows = min(big_rows, big_work // self.row_work)
        return rows if rows > math.prod(self.lead) else 0

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

    def call(self, inputs: dict[str, torch.Tensor], inference: bool = False) -> list[torch.Tensor]:
        """Call the candidate as the gold is called: ``fn(**inputs)``; outputs as a list.
        Under ``torch.no_grad``, or ``inference``: ``torch.inference_mode`` (a rollout's)."""
        mode = torch.inference_mode() if inference else torch.no_grad()
        try:
            with mode, self.clock.phase("candidate"), poisoned_allocations():
                out = self.fn(**inputs)
        except Exception as exc:
            raise candidate_fault(exc, "candidate raised") from None
        return self.outputs_list(out)

    def call_backward(
        self,
        inputs: dict[str, torch.Tensor],
        upstream: list[torch.Tensor | None],
        wrt: tuple[str, ...] | None = None,
        missing_ok: bool = False,
        edit=None,
    ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """Forward with grad, then ``autograd.grad`` w.r.t. the op's grad inputs (``wrt``:
        only these require grad, the others are frozen, as a LoRA model's base weights).
        An upstream of None leaves that output out of the loss: its gradient reaches the
        backward as None (a KL-free loss never uses ratio_kl's kl); ``missing_ok``: a grad
        input that no used output reaches gets zeros, not a fault; ``edit(outputs)`` runs
        between forward and backward, as a caller's in-place edit would."""
        args, outs = self.forward_with_grad(inputs, upstream, wrt)
        if edit is not None:
            try:
                with torch.enable_grad():
                    edit(outs)
            except CandidateFault:
                raise
            except Exception as exc:  # an edit of the outputs that raised in the candidate
                raise candidate_fault(exc, "editing the outputs raised") from None
        grads = self.backward_of(args, outs, upstream, wrt, missing_ok)
        return [o.detach() for o in outs], grads

    def forward_with_grad(
        self,
        inputs: dict[str, torch.Tensor],
        upstream: list[torch.Tensor | None],
        wrt: tuple[str, ...] | None = None,
    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """(the call's arguments, its outputs with their graph): the forward half of
        :meth:`call_backward`, for callers that order forwards and backwards themselves.
        A grad input that is already a leaf requiring grad is passed as it is (the same
        tensor call after call, as a model's parameter); any other, detached."""
        args = dict(inputs)
        for name in tuple(self.op.grad_inputs) if wrt is None else wrt:
            v = args[name]
            if not (v.is_leaf and v.requires_grad):
                args[name] = v.detach().requires_grad_(True)
        try:
            with torch.enable_grad(), self.clock.phase("candidate"), poisoned_allocations():
                outs = self.outputs_list(self.fn(**args))
        except CandidateFault:
            raise
        except Exception as exc:
            raise candidate_fault(exc, "candidate backward raised") from None
        for i, (o, u) in enumerate(zip(outs, upstream)):
            if u is not None and tuple(o.shape) != tuple(u.shape):
                raise WrongOutput(
                    f"output {self.op.outputs[i].name!r} shape {tuple(o.shape)} != "
                    f"expected {tuple(u.shape)}"
                )
        return args, outs

    def backward_of(
        self,
        args: dict[str, torch.Tensor],
        outs: list[torch.Tensor],
        upstream: list[torch.Tensor | None],
        wrt: tuple[str, ...] | None = None,
        missing_ok: bool = False,
        retain: bool = False,
    ) -> dict[str, torch.Tensor]:
        """The backward half of :meth:`call_backward` (``retain``: keep the graph for
        another backward through it)."""
        names = tuple(self.op.grad_inputs) if wrt is None else wrt
        used = [i for i, u in enumerate(upstream) if u is not None]
        try:
            with self.clock.phase("candidate"), poisoned_allocations():
                handed = [handed_copy(upstream[i], outs[i].device, outs[i].dtype) for i in used]
                grads = torch.autograd.grad(
                    [outs[i] for i in used],
                    [args[n] for n in names],
                    handed,
                    retain_graph=retain,
                    allow_unused=True,
                )
        except CandidateFault:
            raise
        except Exception as exc:
            raise candidate_fault(exc, "candidate backward raised") from None
        self._note_upstream_writes(
            [upstream[i] for i in used], handed, [outs[i] for i in used], used
        )
        result = {}
        for name, g in zip(names, grads):
            if g is None and missing_ok:
                g = torch.zeros_like(args[name])
            if g is None:
                raise CandidateFault(f"candidate backward gave no gradient for {name!r}")
            result[name] = g.detach()
        return result

    def accumulate_backward(
        self, args: dict[str, torch.Tensor], outs: list[torch.Tensor], upstream: list
    ) -> None:
        """``torch.autograd.backward`` through ``outs``, as ``loss.backward()`` runs it in
        a training loop: the gradients add into each leaf's ``.grad``."""
        used = [i for i, u in enumerate(upstream) if u is not None]
        try:
            with self.clock.phase("candidate"), poisoned_allocations():
                handed = [handed_copy(upstream[i], outs[i].device, outs[i].dtype) for i in used]
                torch.autograd.backward([outs[i] for i in used], handed)
        except CandidateFault:
            raise
        except Exception as exc:
            raise candidate_fault(exc, "candidate backward raised") from None

    def _note_upstream_writes(self, upstream: list, handed: list, outs: list, index) -> None:
        """Record each upstream gradient the backward changed (bits of the tensor handed
        over against its source, both in the handed dtype); ``index``: their outputs."""
        for i, u, h, o in zip(index, upstream, handed, outs):
            changed = changed_elements(u.to(o.dtype), h.detach())
            if changed:
                name = self.op.outputs[i].name
                self.upstream_writes.append(
                    f"backward changed the upstream gradient of {name!r} ({changed} elements)"
                )

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

    def out_of_range_rows(self, inputs: dict, nlead: int) -> torch.Tensor | None:
        """Per row of ``inputs`` (their first ``nlead`` dims flattened), whether its index
        input holds an index out of range, where the op's out-of-range rule owns its
        outputs and gradient (None: no such rule over a row-wise index input)."""
        rule = self.op.out_of_range
        spec = None if rule is None else self.op.input(rule.input)
        if spec is None or not spec.index_of or not self.op.is_row_wise(spec):
            return None
        idx = flat_rows(inputs[rule.input], nlead)
        idx = idx.reshape(idx.shape[0], -1)
        return ((idx < 0) | (idx >= self.sizes[spec.index_of])).any(dim=1)

    def fixed_rows(self, inputs: dict, nlead: int) -> torch.Tensor:
        """Per row of ``inputs`` (as :meth:`out_of_range_rows`), whether a contract rule
        fixes its outputs and gradient: an index out of range, a mask false there."""
        rows = math.prod(next(iter(inputs.values())).shape[:nlead])
        found = self.out_of_range_rows(inputs, nlead)
        if found is None:
            found = torch.zeros(rows, dtype=torch.bool)
        rule = self.op.masked
        if rule is not None and rule.mask in inputs:
            mask = flat_rows(inputs[rule.mask], nlead)
            found = found | ~mask.reshape(mask.shape[0], -1).bool().all(dim=1)
        return found

    def trial_key(self, seed: int, dist: str) -> str:
        c = self.case
        narrowed = (("in_range", ",".join(self.op.in_range)),) if self.op.in_range else ()
        return trial_key(c.op, self.op.version, c.dtype, c.shape, seed, dist, c.attrs + narrowed)

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

    def upstream(
        self,
        seed: int,
        lead: tuple[int, ...] | None = None,
        salt: str = "",
        loss_mask: torch.Tensor | None = None,
    ):
        """Upstream gradients of a call on ``lead`` rows; with ``loss_mask`` (the rows it
        may drop), exactly 0 on the rows a loss mask drops (the trials': a pool's rows
        stay nonzero, each one a comparison that counts)."""
        with self.clock.phase("inputs"):
            masked = loss_mask is not None and self.op.lead
            zero = loss_mask_rows(loss_mask, seed, salt) if masked else None
            return [
                make_upstream(
                    self.expected_shape(i, lead),
                    self.expected_dtype(i),
                    seed,
                    salt + str(i),
                    zero if self.op.is_row_wise(spec) else None,
                )
                for i, spec in enumerate(self.op.outputs)
            ]
