"""Stage 1: declarative op specs (TOML) -> typed :class:`OpSpec` objects."""

from kernelcheck.spec.load import Catalog, builtin_spec_dir, load_catalog
from kernelcheck.spec.model import CandidateSpec, OpSpec, Tolerance

__all__ = ["Catalog", "CandidateSpec", "OpSpec", "Tolerance", "builtin_spec_dir", "load_catalog"]
