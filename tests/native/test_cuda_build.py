"""The CUDA library configures and builds with CMake (sm_90 only) and exports the C ABI.

This only compiles and links; nothing here claims the kernel ran (see test_cuda_kernel.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from native_build import cmake_build

EXPECTED_SYMBOLS = {
    "kc_abi_version",
    "kc_backend_name",
    "kc_status_string",
    "kc_logp_forward",
    "kc_logp_backward",
    "kc_set_num_threads",
    "kc_cuda_device_count",
}


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() and os.access(default, os.X_OK) else None


@pytest.mark.slow
def test_cuda_library_builds_and_exports_abi(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no CUDA compiler: nvcc not on PATH and /usr/local/cuda/bin/nvcc absent")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not on PATH")
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not on PATH")
    cmake_build(
        tmp_path,
        "kc_logp_cuda",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        "-DCMAKE_BUILD_TYPE=Release",
    )
    libs = list(tmp_path.glob("libkc_logp_cuda.*"))
    assert libs, f"no libkc_logp_cuda in {tmp_path}"
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(libs[0])], capture_output=True, text=True, check=True
    )
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if " T " in line}
    assert EXPECTED_SYMBOLS <= exported, f"missing: {EXPECTED_SYMBOLS - exported}"
    # Static cudart: the only CUDA library needed at run time is the driver (dlopened).
    ldd = shutil.which("ldd")
    if ldd:
        deps = subprocess.run([ldd, str(libs[0])], capture_output=True, text=True).stdout
        assert "libcudart" not in deps
