"""One trial: a (seed, distribution) draw, and its results, each made once.

The candidate's outputs and gradients, the gold and the reference of a trial are made
on first read and kept (a candidate fault too: every check that needs the call reports
it), so checks that judge the same call (accuracy, precision) share one candidate run.
The gold and the reference are shared with the run's other candidates through the trial
store. When parts are let go is ``TrialMemory``'s (``checks/trial_memory.py``); whether
a call wrote its inputs, ``InputWriteDetector``'s (``checks/input_writes.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property

import torch

from kernelcheck import gold
from kernelcheck.cases.inputs import first_rows, selected_hazard_rows, sparse_seed
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.differentiable import differentiable_call
from kernelcheck.checks.input_writes import InputWriteDetector
from kernelcheck.checks.outcome import CandidateFault
from kernelcheck.checks.trial_memory import TrialMemory


class Trial(TrialMemory, InputWriteDetector):
    """One (seed, distribution) draw, with the candidate's and the gold's results cached.

    Checks that judge the same call (accuracy, precision) share one candidate run.
    """

    PARTS = ("outputs", "grads", "grad_outputs", "gold", "reference", "reference_grads")

    def __init__(self, ctx: CaseContext, seed: int, distribution: str):
        self.ctx = ctx
        self.seed = seed
        self.distribution = distribution
        self.watch = False  # integrity observes this trial: its calls check their inputs
        self.readers = {}  # part -> checks still to read it (TrialMemory frees by it)

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

    @property
    def outputs(self) -> list[torch.Tensor]:
        def run():
            outs = self.own_call(self.ctx.call, "forward")
            return [o.detach().cpu() for o in outs]

        return self._cached("outputs", run)

    def repeated(self, kind: str, results: list[torch.Tensor]) -> Trial:
        """This trial again, its inputs, upstream and gold shared, with another call's
        ``results`` on the very same inputs (a repeated call whose bits differ from the
        first's), so the checks judge that call: ``kind`` "forward", its outputs, or
        "backward", its with-grad outputs then gradients (as :meth:`backward_results`)."""
        again = Trial(self.ctx, self.seed, self.distribution)
        again.__dict__["cpu_inputs"] = self.cpu_inputs
        again.__dict__["upstream"] = self.upstream
        if self.__dict__.get("_gold", ("",))[0] == "ok":
            again.__dict__["_gold"] = self.__dict__["_gold"]
        if kind == "forward":
            again.__dict__["_outputs"] = ("ok", [o.detach().cpu() for o in results])
        else:
            names = self.ctx.op.grad_inputs
            outs, grads = results[: len(results) - len(names)], results[-len(names) :]
            again.__dict__["_grad_outputs"] = ("ok", list(outs))
            again.__dict__["_grads"] = ("ok", dict(zip(names, grads)))
        return again

    def as_reference(self, kind: str) -> Trial:
        """This trial with the honest fp32 reference's results in the candidate's place
        (:meth:`repeated`'s layout): ``kind`` "forward", its outputs; "backward", its
        outputs then its gradients (autograd of the reference, in the inputs' shapes), so
        a check can ask whether the reference itself meets a rule it judges by."""
        results = list(self.reference)
        if kind == "backward":
            grads = gold.gathered(self.reference_grad_chunks())
            inputs = self.cpu_inputs
            results += [grads[n].reshape(inputs[n].shape) for n in self.ctx.op.grad_inputs]
        return self.repeated(kind, results)

    def call_again(self, kind: str) -> list[torch.Tensor]:
        """One more call of ``kind`` on a fresh copy of this trial's inputs (the upstream
        too), its results on the CPU in :meth:`repeated`'s layout."""
        inputs = self.ctx.to_device(self.cpu_inputs)
        if kind == "forward":
            return [o.detach().cpu() for o in self.ctx.call(inputs)]
        outs, grads = self.ctx.call_backward(inputs, self.upstream)
        return [t.cpu() for t in (*outs, *(grads[n] for n in self.ctx.op.grad_inputs))]

    def backward_results(self) -> list[torch.Tensor]:
        """This trial's backward call's with-grad outputs then gradients (CPU), in the op's
        order: one list, as a repeated backward call's is compared with it."""
        grads = self.grads
        return [*self.grad_outputs, *(grads[n] for n in self.ctx.op.grad_inputs)]

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
        """Upstream gradients with a loss mask (exact zeros) on some rows: never a
        distribution's first row (a sweep's only one, whose gradient must be judged), nor
        a row an op's own mask input masks out (its gradient is zero by contract; a zero
        upstream there would hide one that leaks), nor, but at sparse seeds (whose few
        live rows are their hazard), a row whose selected entry its distribution set."""
        rows = math.prod(self.ctx.lead)
        allowed = ~first_rows(self.distribution, rows)
        if not sparse_seed(self.seed):
            allowed &= ~selected_hazard_rows(self.distribution, rows)
        for spec in self.ctx.op.inputs:
            mask = self.cpu_inputs.get(spec.name) if spec.values == "mask" else None
            if mask is not None and mask.numel() == rows:
                allowed &= mask.reshape(-1).bool()
        return self.ctx.upstream(self.seed, loss_mask=allowed)

    @property
    def grads(self) -> dict[str, torch.Tensor]:
        def run():
            def call(dev):
                outs, grads = self.ctx.call_backward(dev, self.upstream)
                return [*outs, *grads.values()]

            results = self.own_call(call, "backward")
            names = self.ctx.op.grad_inputs
            outs = results[: len(results) - len(names)]
            self.__dict__["_grad_outputs"] = ("ok", [o.cpu() for o in outs])
            return dict(zip(names, (g.cpu() for g in results[-len(names) :])))

        return self._cached("grads", run)

    @property
    def grad_outputs(self) -> list[torch.Tensor]:
        """The outputs of the backward's own forward call (made with grad, as training
        makes it): a kernel may take another path there (a fused forward that computes
        the gradient too), whose values the no-grad ``outputs`` never show."""
        self.ensure("grads")
        return self._cached("grad_outputs", self._no_grad_outputs)

    def _no_grad_outputs(self) -> list[torch.Tensor]:
        # the backward's run stores them beside the gradients: never judge none in silence
        raise RuntimeError("trial grad_outputs were never stored: the backward call did not run")

    def gold_grad_chunks(self, backward: Callable | None = None):
        """The float64 gold gradient, chunk by chunk (timed as ``gold``); ``backward``:
        another float64 function of the upstream and inputs, in the very same chunks
        (default the op's analytic ``gold_backward``, else autograd of the gold)."""
        chunks = gold.backward_chunks(
            self.ctx.op,
            self.ctx.gold_fn,
            self.cpu_inputs,
            self.upstream,
            self.ctx.lead,
            backward or self.ctx.gold_backward_fn,
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

    def gradient_scale_chunks(self):
        """The op's ``gradient_scale`` (``backward_precision``'s yardstick) in the gold's
        very chunks, or None where the op has none (the yardstick is then |gold|)."""
        fn = self.ctx.gradient_scale_fn
        return None if fn is None else self.gold_grad_chunks(fn)

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
