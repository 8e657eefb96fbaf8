"""CMake helper shared by the native-kernel tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cmake_build(build_dir: Path, target: str, *extra: str) -> None:
    """Configure ``REPO_ROOT`` into ``build_dir`` and build ``target`` (raises on failure)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake not on PATH")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (
        [cmake, "-S", str(REPO_ROOT), "-B", str(build_dir), *gen, *extra],
        [cmake, "--build", str(build_dir), "--target", target],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
