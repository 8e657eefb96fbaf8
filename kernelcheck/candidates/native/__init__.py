"""Native (C ABI, ctypes) logp candidates: ``cpu`` (AVX2 C++) and ``cuda``.

The shared libraries are built by the top-level CMakeLists.txt; :mod:`.library` finds and
loads them lazily - importing this package loads nothing.
"""

from kernelcheck.candidates.native.library import (
    NativeLibraryError,
    find_library,
    library_status,
)

__all__ = ["NativeLibraryError", "find_library", "library_status"]
