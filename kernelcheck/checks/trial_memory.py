"""When a trial's results are let go: at the Qwen3 shape a gradient is GBs.

A check lists the trial parts it reads (``Check.uses``); ``run_case`` lists each part's
readers on the trial, and the trial frees a part once no check still to observe it reads
it. Inputs the shared store holds are let go of before checks that need small inputs
only, and a released trial drops everything but what reports need.
"""

from __future__ import annotations


class TrialMemory:
    """The memory side of :class:`~kernelcheck.checks.trial.Trial`, which keeps each part
    as ``self.__dict__["_<part>"] = (kind, value)``, kind ``ok``, ``fault`` or ``freed``,
    and has ``ctx``, ``key``, ``seed`` and ``distribution``."""

    # kept by release: what reports and the next trial need
    KEEP = ("ctx", "seed", "distribution", "watch", "key", "readers")

    readers: dict[str, set[str]]  # part -> checks still to read it

    def finished(self, check: str) -> None:
        """``check`` reads this trial no more: free the parts no other check still reads.

        Only parts with readers listed (``run_case`` lists them) are ever freed.
        """
        for part, names in self.readers.items():
            names.discard(check)
            key = f"_{part}"
            if not names and self.__dict__.get(key, ("",))[0] == "ok":
                self.__dict__[key] = ("freed", None)

    def unmap_inputs(self) -> None:
        """Let go of the inputs when the shared store holds them: a later reader maps
        them again at no cost. At the Qwen3 shape they are 2.4 GB of the worker's memory,
        which the checks with pools of their own (invariance) would otherwise add to."""
        if "cpu_inputs" in self.__dict__ and self.ctx.shared.has(self.key, "inputs"):
            del self.__dict__["cpu_inputs"]
            self.__dict__.pop("_clean_inputs", None)  # it holds them too

    def release(self) -> None:
        """Drop the cached tensors (keeps seed and distribution for reporting), and the
        invariance pool drawn for this trial: no later trial reads it."""
        for key in [k for k in self.__dict__ if k not in self.KEEP]:
            del self.__dict__[key]
        self.ctx.drop_pools(self.seed, self.distribution)
