"""Stage 3: the kernels under test. Spec entries become callables only when about to run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelcheck.candidates import devices
from kernelcheck.spec.imports import ImportPathError, resolve
from kernelcheck.spec.model import CandidateSpec


@dataclass(frozen=True)
class LoadedCandidate:
    spec: CandidateSpec
    fn: Callable
    implementation: str


def probe(cand: CandidateSpec, device: str) -> str | None:
    """None when ``cand`` can run on ``device`` here; otherwise the reason it cannot."""
    if device not in cand.devices:
        return f"needs device {' or '.join(cand.devices)} (asked for {device})"
    dev = devices.status(device)
    if not dev.available:
        return f"needs device {device}: {dev.reason}"
    if cand.probe:
        try:
            reason = resolve(cand.probe, cand.base_dir)(device)
        except ImportPathError as exc:
            return f"probe {cand.probe}: {exc}"
        except Exception as exc:
            return f"probe {cand.probe} raised {type(exc).__name__}: {exc}"
        if reason:
            return str(reason)
    return None


def load(cand: CandidateSpec) -> LoadedCandidate:
    """Import the candidate's callable (raises :class:`ImportPathError`)."""
    fn = resolve(cand.callable, cand.base_dir)
    if not callable(fn):
        raise ImportPathError(f"{cand.callable} is not callable")
    module = getattr(fn, "__module__", None)
    impl = getattr(fn, "IMPLEMENTATION", None) or _module_attr(module, "IMPLEMENTATION")
    return LoadedCandidate(cand, fn, impl or cand.callable)


def _module_attr(module: str | None, name: str):
    import sys

    return getattr(sys.modules.get(module or ""), name, None)
