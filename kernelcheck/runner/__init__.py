"""Drives stages 2-4 for each case: load the candidate, draw trials, run the checks."""

from kernelcheck.runner.case import run_case
from kernelcheck.runner.repro import repro_command

__all__ = ["repro_command", "run_case"]
