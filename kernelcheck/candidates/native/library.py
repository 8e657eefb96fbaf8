"""Find and load the native kernel libraries (``libkc_logp_<backend>``) through ctypes.

Where they are searched: ``kernelcheck/native_files.py``.

Nothing is loaded at import time: :func:`load` and :func:`library_status` do the work.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

from kernelcheck.native_files import ENV_DIR, find_named, shared_library_name

BACKENDS = ("cpu", "cuda")
ABI_VERSION = 1

# enum kc_dtype
KC_FLOAT32 = 0
KC_BFLOAT16 = 1
KC_FLOAT16 = 2
# enum kc_status
KC_OK = 0

_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL] = {}
# (backend, search setting) -> library: a kernel call must not walk the search path
_found: dict[tuple, ctypes.CDLL] = {}


class NativeLibraryError(RuntimeError):
    """A native library cannot be found, loaded or used here; the message says why."""


def library_filename(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown native backend {backend!r} (expected one of {BACKENDS})")
    return shared_library_name(f"kc_logp_{backend}")


def find_library(backend: str) -> tuple[Path | None, list[str]]:
    """``(path or None, places looked)`` for ``backend``'s library."""
    return find_named(library_filename(backend))


def _declare(lib: ctypes.CDLL, backend: str) -> None:
    c_i64, c_int, c_vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.kc_abi_version.restype = c_int
    lib.kc_abi_version.argtypes = []
    lib.kc_backend_name.restype = ctypes.c_char_p
    lib.kc_backend_name.argtypes = []
    lib.kc_status_string.restype = ctypes.c_char_p
    lib.kc_status_string.argtypes = [c_int]
    lib.kc_logp_forward.restype = c_int
    lib.kc_logp_forward.argtypes = [c_int, c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_vp]
    lib.kc_logp_backward.restype = c_int
    lib.kc_logp_backward.argtypes = [c_int, c_vp, c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_vp]
    lib.kc_set_num_threads.restype = c_int
    lib.kc_set_num_threads.argtypes = [c_int]
    if backend == "cpu":
        for name in ("kc_cpu_set_isa", "kc_cpu_isa_support", "kc_cpu_isa"):
            fn = getattr(lib, name, None)  # absent in an outdated build (library_status)
            if fn is not None:
                fn.restype = c_int
                fn.argtypes = [] if name == "kc_cpu_isa" else [c_int]
    if backend == "cuda":
        lib.kc_cuda_device_count.restype = c_int
        lib.kc_cuda_device_count.argtypes = []


def load(backend: str) -> ctypes.CDLL:
    """Load (once per path) and return the library; raises :class:`NativeLibraryError`."""
    where = (backend, os.environ.get(ENV_DIR, ""), tuple(sys.path))
    lib = _found.get(where)
    if lib is None:
        lib = _found[where] = _load(backend)
    return lib


def _load(backend: str) -> ctypes.CDLL:
    path, looked = find_library(backend)
    if path is None:
        raise NativeLibraryError(
            f"{library_filename(backend)} not built (looked in {', '.join(looked)})"
        )
    path = path.resolve()
    with _lock:
        lib = _loaded.get(path)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise NativeLibraryError(f"cannot load {path}: {exc}") from exc
        try:
            _declare(lib, backend)
        except AttributeError as exc:
            raise NativeLibraryError(f"{path} lacks an expected symbol: {exc}") from exc
        version = lib.kc_abi_version()
        if version != ABI_VERSION:
            raise NativeLibraryError(f"{path} has ABI version {version}, expected {ABI_VERSION}")
        name = lib.kc_backend_name().decode()
        if name != backend:
            raise NativeLibraryError(f"{path} reports backend {name!r}, expected {backend!r}")
        _loaded[path] = lib
        return lib


def status_string(lib: ctypes.CDLL, status: int) -> str:
    return lib.kc_status_string(status).decode(errors="replace")


def _cuda_driver_loadable() -> bool:
    if sys.platform != "linux":
        return True  # let cudaGetDeviceCount decide
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def library_status(backend: str) -> dict:
    """``dict(status=..., path=..., reason=..., detail=...)``.

    status: ``"available"`` (built, loadable, can run here), ``"built"`` (built but cannot run
    here; ``reason`` says why) or ``"missing"`` (not built; ``reason`` says where it looked).
    ``detail`` is a short machine-readable cause: ``not-built``, ``load-failed``,
    ``outdated``, ``no-driver``, ``driver-error``, ``no-gpu`` or ``None``.
    """
    path, looked = find_library(backend)
    if path is None:
        return {
            "status": "missing",
            "path": None,
            "reason": f"{library_filename(backend)} not built (looked in {', '.join(looked)})",
            "detail": "not-built",
        }
    try:
        lib = load(backend)
    except NativeLibraryError as exc:
        return {"status": "built", "path": str(path), "reason": str(exc), "detail": "load-failed"}
    if backend == "cpu":
        if not hasattr(lib, "kc_cpu_isa_support"):  # compiled for AVX2 whatever the CPU
            reason = "built before its portable build: rebuild it (pip install again)"
            return {"status": "built", "path": str(path), "reason": reason, "detail": "outdated"}
        # Every CPU runs it: the library asks the CPU which of its builds it can run (cpuid)
        # and falls back on the portable one (kernels_cpu/logp_cpu.cpp).
        return {"status": "available", "path": str(path), "reason": None, "detail": None}
    if not _cuda_driver_loadable():
        return {
            "status": "built",
            "path": str(path),
            "reason": "CUDA driver not found: libcuda.so.1 missing",
            "detail": "no-driver",
        }
    count = lib.kc_cuda_device_count()
    if count < 0:
        return {
            "status": "built",
            "path": str(path),
            "reason": f"CUDA driver error: {status_string(lib, 5)}",
            "detail": "driver-error",
        }
    if count == 0:
        return {
            "status": "built",
            "path": str(path),
            "reason": "no CUDA GPU visible",
            "detail": "no-gpu",
        }
    return {"status": "available", "path": str(path), "reason": None, "detail": None}
