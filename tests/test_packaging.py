"""Packaging (pyproject.toml, packaging/): a wheel built with ``python -m build`` and installed,
not editable, into a fresh virtual environment carries its native libraries and op specs, and
runs: ``kernelcheck doctor`` and a small run, with the fastest cpu build and the portable one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL_RUN = ["run", "--op", "logp", "--candidate", "cpu", "--candidate", "torch", "--device",
             "cpu", "--dtype", "fp32,bf16", "--batch", "2", "--vocab", "300", "--no-sweep",
             "--checks", "forward_accuracy,backward_accuracy,determinism"]  # fmt: skip


def _run(command: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{command}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env(**extra: str) -> dict:
    """This environment without what points at the checkout's own build or sources."""
    drop = ("KERNELCHECK_NATIVE_DIR", "PYTHONPATH", "VIRTUAL_ENV", "KERNELCHECK_CPU_ISA")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


@pytest.mark.slow
def test_a_built_wheel_installs_and_runs(tmp_path):
    """A couple of minutes: the wheel (the CUDA library left out, to save its compile) into
    a fresh environment that borrows this one's third-party packages (torch, typer, ...)
    through a ``.pth`` line, so pip finds them installed and adds only the wheel.
    kernelcheck itself is the wheel's: the borrowed folder comes after the environment's
    own, and its editable-install hooks (``.pth`` files there) are never run."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("python -m build is missing (the 'test' extra installs it)")
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", dist,
          "-C", "cmake.define.KC_BUILD_CUDA=OFF", "-C", f"build-dir={tmp_path / 'build'}",
          REPO_ROOT])  # fmt: skip
    (wheel,) = dist.glob("kernelcheck-*.whl")
    _run([sys.executable, "-m", "venv", venv])
    bin_dir = venv / "bin"
    own = _run(
        [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    )
    borrowed = Path(torch.__file__).resolve().parents[1]  # this environment's site-packages
    (Path(own.stdout.strip()) / "borrowed.pth").write_text(f"{borrowed}\n")
    _run([bin_dir / "pip", "install", "-q", "--no-build-isolation", wheel], env=_clean_env())
    env = _clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    doctor = json.loads(_run(["kernelcheck", "doctor", "--format", "json"], cwd=tmp_path,
                             env=env).stdout)  # fmt: skip
    cpu = doctor["native_libraries"]["cpu"]
    assert cpu["status"] == "available" and cpu["path"].startswith(str(venv)), cpu
    assert doctor["verifier_libraries"]["metrics"]["status"] == "available"
    for isa in (cpu["isa"], "portable"):
        out = tmp_path / f"{isa}.json"
        _run(["kernelcheck", *SMALL_RUN, "--json-out", out], cwd=tmp_path,
             env={**env, "KERNELCHECK_CPU_ISA": isa})  # fmt: skip
        results = json.loads(out.read_text())["results"]
        assert {r["status"] for r in results} == {"pass"}
        assert {r["implementation"] for r in results if r["candidate"] == "cpu"} == {
            f"native:cpu-{isa}"
        }
