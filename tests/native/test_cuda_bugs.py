"""The planted-bug CUDA kernels (tests/fixtures/cuda_bugs/): they compile here with nvcc,
and on a GPU ``--sanitize`` catches each (memory_safety fails) while the shipped ``cuda``
kernel passes. The GPU tests are skipped elsewhere, with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from native_build import cmake_build
from test_cuda_build import _nvcc

from kernelcheck.candidates.native import cuda
from kernelcheck.runner import sanitize

BUGS = ("oob_read", "shared_race")
BUILT_ENV = "KERNELCHECK_CUDA_BUGS_DIR"  # a build's cuda_bugs/ folder (scripts/gpu_check.sh)
REPO = Path(__file__).resolve().parents[2]
ABI = {"kc_abi_version", "kc_backend_name", "kc_logp_forward", "kc_cuda_device_count"}


def _build(build_dir: Path) -> Path:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no CUDA compiler: nvcc not on PATH and /usr/local/cuda/bin/nvcc absent")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not on PATH")
    flags = [f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    for bug in BUGS:
        cmake_build(build_dir, f"kc_logp_cuda_{bug}", *flags, "-DKC_BUILD_CUDA_BUGS=ON")
    return build_dir / "cuda_bugs"


@pytest.mark.slow
def test_the_planted_bugs_compile_each_into_a_library_of_its_own(tmp_path):
    bugs = _build(tmp_path)
    for bug in BUGS:
        lib = bugs / bug / "libkc_logp_cuda.so"
        assert lib.is_file(), f"{lib} not built"
        if shutil.which("nm"):
            nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True)
            exported = {line.split()[-1] for line in nm.stdout.decode().splitlines()}
            assert ABI <= exported
    assert not list(tmp_path.glob("libkc_logp_cuda_*")), "a bug library beside the real one"


def _ptx(tmp_path: Path, define: str) -> str:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no CUDA compiler: nvcc not on PATH and /usr/local/cuda/bin/nvcc absent")
    out = tmp_path / f"{define}.ptx"
    source = REPO / "tests" / "fixtures" / "cuda_bugs" / "logp_bugs.cu"
    argv = [nvcc, "-O3", "-arch=sm_90", "-ptx", f"-D{define}", f"-I{REPO / 'include'}"]
    subprocess.run([*argv, str(source), "-o", str(out)], check=True, capture_output=True)
    return out.read_text()


def test_the_bugs_survive_the_compiler(tmp_path):
    """The out-of-bounds read is a load the compiler keeps (volatile), and the race build
    has fewer barriers than the other: the bugs are in the code that runs."""
    oob, race = _ptx(tmp_path, "KC_BUG_OOB_READ"), _ptx(tmp_path, "KC_BUG_SHARED_RACE")
    assert "ld.volatile.global.f32" in oob
    assert "ld.volatile.global" not in race
    assert race.count("bar.sync") < oob.count("bar.sync")


_NO_GPU = cuda.probe("cuda")
_NO_SANITIZER = None if sanitize.find_sanitizer() else "compute-sanitizer not found"
on_gpu = pytest.mark.skipif(bool(_NO_GPU or _NO_SANITIZER), reason=str(_NO_GPU or _NO_SANITIZER))


@pytest.fixture(scope="module")
def bug_dirs(tmp_path_factory) -> Path:
    built = os.environ.get(BUILT_ENV)
    return Path(built) if built else _build(tmp_path_factory.mktemp("cuda_bugs"))


def _sanitized(tmp_path: Path, tool: str, native_dir: Path | None) -> dict:
    """The logp run of the ``cuda`` candidate under ``tool``: {check: (status, message)}."""
    env = dict(os.environ)
    if native_dir is not None:  # the planted bug in place of the real library
        env["KERNELCHECK_NATIVE_DIR"] = str(native_dir)
    out = tmp_path / f"{tool}.json"
    argv = [sys.executable, "-m", "kernelcheck", "run", "--op", "logp", "--candidate", "cuda"]
    argv += ["--device", "cuda", "--dtype", "fp32", "--batch", "2", "--seq", "3"]
    argv += ["--vocab", "1000", "--no-check-grad", "--checks", "forward_accuracy", "--seed", "0"]
    argv += ["--distributions", "normal", "--no-shrink", "--sanitize", tool, "--json-out", str(out)]
    subprocess.run(argv, env=env, capture_output=True, timeout=600)
    results = json.loads(out.read_text())["results"]
    return {r["check"]: (r["status"], r["message"]) for r in results}


@on_gpu
@pytest.mark.parametrize("bug,tool", [("oob_read", "memcheck"), ("shared_race", "racecheck")])
def test_the_sanitizer_catches_the_planted_bug(tmp_path, bug_dirs, bug, tool):
    found = _sanitized(tmp_path, tool, bug_dirs / bug)
    status, message = found["memory_safety"]
    assert status == "fail", message
    assert "logp_bug_kernel" in message


@on_gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_the_cuda_kernel_passes_under_the_sanitizer(tmp_path, tool):
    found = _sanitized(tmp_path, tool, None)
    assert found["memory_safety"][0] == "pass", found["memory_safety"][1]
    assert found["forward_accuracy"][0] == "pass", found["forward_accuracy"][1]
