"""Stage 4: the checks. Each one judges one property and returns an Outcome; none prints.

The names are part of the interface (spec tables, ``--checks``, JSON, JUnit).
"""

from kernelcheck.checks.accuracy import BackwardAccuracy, ForwardAccuracy
from kernelcheck.checks.backward_precision import BackwardPrecision
from kernelcheck.checks.check import Check
from kernelcheck.checks.context import CaseContext
from kernelcheck.checks.contract import Contract
from kernelcheck.checks.determinism import Determinism
from kernelcheck.checks.integrity import Integrity
from kernelcheck.checks.invariance import BackwardInvariance, ForwardInvariance
from kernelcheck.checks.outcome import CandidateFault, Outcome
from kernelcheck.checks.precision import ForwardPrecision
from kernelcheck.checks.shape_sweep import ShapeSweep
from kernelcheck.checks.trial import Trial

CHECKS: dict[str, type[Check]] = {
    c.name: c
    for c in (
        ForwardAccuracy,
        ForwardPrecision,
        BackwardAccuracy,
        BackwardPrecision,
        ForwardInvariance,
        BackwardInvariance,
        Determinism,
        Contract,
        Integrity,
        ShapeSweep,
    )
}
GRAD_CHECKS = tuple(name for name, c in CHECKS.items() if c.needs_grad)

__all__ = ["CHECKS", "GRAD_CHECKS", "CandidateFault", "CaseContext", "Check", "Outcome", "Trial"]
