"""The ``native-cpu`` candidate: libkc_logp_cpu (deterministic, any CPU) through ctypes.

The library holds up to three builds of the same row loops, which give the same bits:
portable (plain C++, every CPU; the only one on ARM), and on x86 AVX2 and AVX-512 (one
16-lane register where AVX2 takes two 8-lane ones). The library asks the CPU (cpuid) which
it can run and runs the fastest, unless :func:`set_isa` or
``KERNELCHECK_CPU_ISA=portable|avx2|avx512`` (read at the first call) says otherwise.
``IMPLEMENTATION`` names the one in use.
"""

from __future__ import annotations

import os

import torch

from kernelcheck.candidates.native import _common, library

BACKEND = "cpu"
ISAS = {"portable": 3, "avx2": 1, "avx512": 2}  # enum kc_cpu_isa, slowest first
ISA_ENV = "KERNELCHECK_CPU_ISA"
_NOT_BUILT, _CPU_LACKS = 1, 2  # enum kc_cpu_isa_support (0: it runs here)
_NEEDS = {"avx2": "AVX2, FMA and F16C", "avx512": "AVX-512F"}
_env_applied = False


def probe(device: str) -> str | None:
    """None when the CPU library can run on ``device`` here; otherwise the reason."""
    if str(device).split(":", 1)[0] != "cpu":
        return "needs device cpu"
    st = library.library_status(BACKEND)
    if st["status"] != "available":
        return st["reason"]
    return _env_isa_problem()


def logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """fp32 ``logits[..., target] - logsumexp(logits)``; +0.0 where target is out of range.

    logits: [..., V] float32/bfloat16/float16 on CPU; target: [...] int64. Differentiable
    with respect to ``logits`` (native backward kernel).
    """
    _apply_env_isa()
    # threads over rows follow torch's intra-op count (what a caller sets, and what
    # kernelcheck's thread-count layouts vary); the backward runs with the same count
    set_num_threads(torch.get_num_threads())
    return _common.logp(BACKEND, "cpu", logits, target)


def _apply_env_isa() -> None:
    """``KERNELCHECK_CPU_ISA``, once per process (isolated workers inherit it), unless
    :func:`set_isa` chose first. A bad value raises every time, so every probe says why."""
    if _env_applied:
        return
    name = os.environ.get(ISA_ENV, "").strip().lower()
    if name:
        set_isa(name)  # marks it applied once it worked
    _mark_applied()


def _env_isa_problem() -> str | None:
    """Apply ``KERNELCHECK_CPU_ISA`` if not yet done; why it cannot be (None: it was)."""
    try:
        _apply_env_isa()
    except (ValueError, RuntimeError) as exc:
        return f"{ISA_ENV}: {exc}"
    return None


def _mark_applied() -> None:
    global _env_applied
    _env_applied = True


def set_num_threads(n: int) -> None:
    """Threads over rows for the CPU kernel (0 = hardware concurrency). Results never change."""
    if int(n) < 0:
        raise ValueError("number of threads must be >= 0")
    lib = library.load(BACKEND)
    status = lib.kc_set_num_threads(int(n))
    if status != library.KC_OK:
        raise RuntimeError(f"kc_set_num_threads failed: {library.status_string(lib, status)}")


def isa() -> str:
    """The build the kernel runs with here (``portable``, ``avx2`` or ``avx512``)."""
    _env_isa_problem()  # a bad KERNELCHECK_CPU_ISA leaves the default; the probe says why
    code = library.load(BACKEND).kc_cpu_isa()
    return next((name for name, c in ISAS.items() if c == code), f"isa {code}")


def why_not(name: str) -> str | None:
    """Why the build ``name`` cannot run here, as the library says (None: it can)."""
    support = library.load(BACKEND).kc_cpu_isa_support(ISAS[name])
    if support == _NOT_BUILT:
        return f"this library has no {name} build (x86 only, where the compiler can build it)"
    if support == _CPU_LACKS:
        return f"this CPU lacks {_NEEDS[name]}"
    return None


def isa_note() -> str | None:
    """Why the build in use runs rather than a faster one (for ``kernelcheck doctor``): the
    environment chose it, or what the faster ones lack here. None for the fastest."""
    names = list(ISAS)
    faster = names[names.index(isa()) + 1 :] if isa() in names else []
    chosen = os.environ.get(ISA_ENV, "").strip()
    if chosen and _env_isa_problem() is None:
        return f"{ISA_ENV}={chosen}"
    lacks = [f"{name}: {why}" for name in faster if (why := why_not(name))]
    return "; ".join(lacks) or None


def set_isa(name: str | None) -> None:
    """Run the portable, AVX2 or AVX-512 build (``None``: the fastest this CPU runs). The bits
    are the same; only the speed differs. Raises ``RuntimeError`` where the CPU or the build
    lacks it, ``ValueError`` for an unknown name."""
    if name is not None and name not in ISAS:
        raise ValueError(f"unknown instruction set {name!r} (one of {', '.join(ISAS)})")
    why = why_not(name) if name is not None else None
    if why:
        raise RuntimeError(f"{name} not available: {why}")
    lib = library.load(BACKEND)
    status = lib.kc_cpu_set_isa(0 if name is None else ISAS[name])
    if status != library.KC_OK:
        raise RuntimeError(f"kc_cpu_set_isa failed: {library.status_string(lib, status)}")
    _mark_applied()  # an explicit choice wins over the environment


def __getattr__(name: str):
    # IMPLEMENTATION says which build runs (the candidate loader reads it from the module)
    if name == "IMPLEMENTATION":
        try:
            return "native:cpu" if _env_isa_problem() else f"native:cpu-{isa()}"
        except library.NativeLibraryError:
            return "native:cpu"  # not built (the probe says)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
