"""Integrity's write detector: did a candidate's call write the inputs it was given?

Small inputs are handed over as fresh copies, and a write is counted element by element
afterwards (``metrics.integrity_problems``). CPU inputs of ``IN_PLACE_BYTES`` or more are
the trial's own tensors, so a GB-sized input is never held twice: mapped from the shared
store, the kernel's copy-on-write count tells whether the call wrote them
(:func:`kernelcheck.smaps.unwritten`); otherwise their 32-bit row digests, taken before
the call. A written input is drawn again before anyone reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch

from kernelcheck.checks.metrics import aliasing_problems, integrity_problems, row_digests
from kernelcheck.memory import release_free_heap
from kernelcheck.smaps import unwritten

IN_PLACE_BYTES = 1 << 28  # CPU inputs this large are not copied for a call (see own_call)


class InputWriteDetector:
    """The calls of :class:`~kernelcheck.checks.trial.Trial`, which has ``ctx``, ``key``,
    ``seed``, ``distribution`` and ``cpu_inputs`` (a cached property: popped, it is drawn
    or mapped again)."""

    watch = False  # integrity observes this trial: its calls check their inputs

    def own_call(self, call: Callable[[dict], list], phase: str = "") -> list:
        """``call(inputs)`` on this trial's inputs, as the candidate gets them: copies, or
        the trial's own tensors when large (see the module's docstring). ``phase`` names a
        watched call: its integrity findings are kept."""
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

    @property
    def findings(self) -> dict[str, list[str]]:
        """Integrity problems seen in this trial's calls, per phase (watched calls only)."""
        return self.__dict__.get("_findings", {})

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
