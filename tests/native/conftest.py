"""Fixtures for the native-kernel tests: make sure a CPU library is built and findable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

try:
    import kernelcheck  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(REPO_ROOT))
# Shared helpers (native_ref.py, native_build.py) for the test modules, whatever pytest's
# import mode.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from native_build import cmake_build  # noqa: E402


@pytest.fixture(scope="session")
def cpu_library_dir(tmp_path_factory) -> Path:
    """Folder holding a loadable libkc_logp_cpu; built with CMake into a tmp dir if missing."""
    from kernelcheck.candidates.native import library

    st = library.library_status("cpu")
    if st["status"] == "missing":
        build = tmp_path_factory.mktemp("kc_cpu_build")
        try:
            cmake_build(build, "kc_logp_cpu", "-DKC_BUILD_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release")
        except RuntimeError as exc:
            pytest.fail(f"could not build the CPU library: {exc}")
        lib_dir = build
    else:
        lib_dir = Path(st["path"]).parent
    old = os.environ.get(library.ENV_DIR)
    os.environ[library.ENV_DIR] = str(lib_dir)
    st = library.library_status("cpu")
    if st["status"] != "available":
        pytest.skip(f"CPU library cannot run here: {st['reason']}")
    yield lib_dir
    if old is None:
        os.environ.pop(library.ENV_DIR, None)
    else:
        os.environ[library.ENV_DIR] = old
