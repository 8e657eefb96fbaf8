"""The environment an isolated worker starts with (runner/worker_environment.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelcheck.runner import keeper
from kernelcheck.runner.keeper import NO_KEEP_LARGE_ENV
from kernelcheck.runner.worker_environment import worker_environment


def test_workers_get_the_keeper_preloaded_unless_told_not_to(monkeypatch):
    shim = keeper._keeper_path()
    monkeypatch.setenv("LD_PRELOAD", "/some/other.so")
    monkeypatch.delenv(NO_KEEP_LARGE_ENV, raising=False)
    env = worker_environment()
    if shim is None or not sys.platform.startswith("linux"):
        assert env["LD_PRELOAD"] == "/some/other.so"
    else:
        assert env["LD_PRELOAD"] == f"{shim}:/some/other.so"
    monkeypatch.setenv(NO_KEEP_LARGE_ENV, "1")
    assert worker_environment()["LD_PRELOAD"] == "/some/other.so"


@pytest.mark.parametrize(
    ("env", "want"),
    [({}, "10000"), ({"GOMP_SPINCOUNT": "5"}, "5"), ({"OMP_WAIT_POLICY": "PASSIVE"}, None)],
    ids=["default", "user-spincount", "user-wait-policy"],
)
@pytest.mark.slow
def test_workers_get_a_short_openmp_spin_unless_the_user_set_it(monkeypatch, env, want):
    """torch's OpenMP threads spin for milliseconds after each region and hold the core
    kernelcheck's own native threads need next (kernelcheck/environment.py); a user's
    GOMP_SPINCOUNT or OMP_WAIT_POLICY is left alone, and importing the library sets none."""
    import os

    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert worker_environment().get("GOMP_SPINCOUNT") == want
    assert os.environ.get("GOMP_SPINCOUNT") == env.get("GOMP_SPINCOUNT")
    script = "import os, kernelcheck.api; print(os.environ.get('GOMP_SPINCOUNT', 'unset'))"
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True, text=True)
    assert out.stdout.split()[-1] == "unset", out.stderr
