"""The code style the project keeps: ruff for Python, clang-format for the native kernels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NATIVE = [
    *REPO.glob("include/*.h"),
    *REPO.glob("kernels_cpu/*.cpp"),
    *REPO.glob("metrics_cpu/*.cpp"),
    *REPO.glob("allocator_cpu/*.c"),
    *REPO.glob("kernels_cuda/*.cu"),
    *REPO.glob("tests/fixtures/cuda_bugs/*.cu"),
    *REPO.glob("kernels_ascend/*.asc"),
    *REPO.glob("kernels_ascend/*.cpp"),
]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (pip install -e '.[test]' installs it)")
    return path


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    p = subprocess.run([_tool("ruff"), *args], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_native_sources_are_clang_formatted():
    assert NATIVE, "no native sources found"
    p = subprocess.run(
        [_tool("clang-format"), "--dry-run", "--Werror", *map(str, NATIVE)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr[-2000:]
