"""Where kernelcheck's built native libraries are: the kernels (``libkc_logp_<backend>``)
and its own shims (the large-block keeper, the metrics loops). Plain file lookups that
import nothing heavy, so the command can find the keeper before torch loads.

Search order, first hit wins:

1. every folder in the ``KERNELCHECK_NATIVE_DIR`` environment variable (``os.pathsep`` list);
2. ``_native`` beside the imported ``kernelcheck`` package (a regular install);
3. ``<entry>/kernelcheck/_native`` for every ``sys.path`` entry (scikit-build-core editable
   installs put the libraries there);
4. ``<repo>/build/**`` (plain ``cmake -S . -B build`` builds; newest file wins).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_DIR = "KERNELCHECK_NATIVE_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_library_name(stem: str) -> str:
    """The file CMake makes of the shared library ``stem`` on this platform."""
    if sys.platform == "win32":
        return f"{stem}.dll"
    if sys.platform == "darwin":
        return f"lib{stem}.dylib"
    return f"lib{stem}.so"


def search_dirs() -> list[Path]:
    """Folders searched directly, in order (the ``<repo>/build/**`` glob comes after them)."""
    dirs: list[Path] = []
    for entry in os.environ.get(ENV_DIR, "").split(os.pathsep):
        if entry:
            dirs.append(Path(entry))
    try:
        import kernelcheck

        if getattr(kernelcheck, "__file__", None):
            dirs.append(Path(kernelcheck.__file__).parent / "_native")
    except ImportError:  # pragma: no cover - this module lives inside kernelcheck
        pass
    for entry in sys.path:
        dirs.append(Path(entry or ".") / "kernelcheck" / "_native")
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_named(name: str) -> tuple[Path | None, list[str]]:
    """``(path or None, places looked)`` for the library file ``name`` (a kernel's or
    kernelcheck's own), in the search order."""
    looked: list[str] = []
    for d in search_dirs():
        looked.append(str(d))
        candidate = d / name
        if candidate.is_file():
            return candidate, looked
    build = _REPO_ROOT / "build"
    looked.append(f"{build}/**")
    if build.is_dir():
        hits = [p for p in build.rglob(name) if p.is_file()]
        if hits:
            return max(hits, key=lambda p: p.stat().st_mtime), looked
    return None, looked
