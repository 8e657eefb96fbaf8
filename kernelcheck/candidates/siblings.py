"""A candidate's siblings: the functions of its module for the catalog's other ops.

A kernel library keeps its ops in one module, and ops of one library may share state: a
logp that keeps each row's logsumexp for the entropy of the same logits, keyed by the
tensor's address and version. Each op judged alone is honest there; the entropy is wrong
only after the logp ran at a temperature, or on a buffer refilled since. ``contract``
calls the siblings on the case's own tensors before the candidate (``_after_siblings``).
"""

from __future__ import annotations

from dataclasses import replace

from kernelcheck.spec.imports import ImportPathError, resolve
from kernelcheck.spec.model import CandidateSpec, OpSpec


def _module_of(cand: CandidateSpec) -> str:
    return cand.callable.rpartition(":")[0]


def _sibling(cand: CandidateSpec, other: OpSpec) -> CandidateSpec | None:
    """``cand``'s sibling for ``other``: a candidate of ``other`` from the same module (and
    base directory), else the module's callable named after ``other``; or None."""
    module = _module_of(cand)
    for theirs in other.candidates.values():
        if _module_of(theirs) == module and theirs.base_dir == cand.base_dir:
            return replace(theirs, name=cand.name)
    path = f"{module}:{other.name}"
    try:
        fn = resolve(path, cand.base_dir)
    except ImportPathError:
        return None
    if not callable(fn):
        return None
    return CandidateSpec(cand.name, path, cand.devices, cand.source, backward=False)


def with_siblings(spec: OpSpec, ops: dict[str, OpSpec], names: list[str]) -> OpSpec:
    """``spec`` with the siblings of its candidates ``names`` among ``ops`` (each sibling
    op holding that one candidate, its own siblings none)."""
    found = []
    for name in names:
        for other in ops.values():
            if other.name == spec.name:
                continue
            sib = _sibling(spec.candidates[name], other)
            if sib is not None:
                found.append((name, replace(other, candidates={name: sib}, siblings=())))
    return replace(spec, siblings=tuple(found))
