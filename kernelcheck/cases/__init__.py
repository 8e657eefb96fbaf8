"""Stage 2: the grid of cases and their seeded inputs."""

from kernelcheck.cases.grid import Case, lead_shape, rows
from kernelcheck.cases.inputs import DISTRIBUTIONS, make_inputs, make_upstream

__all__ = ["DISTRIBUTIONS", "Case", "lead_shape", "make_inputs", "make_upstream", "rows"]
