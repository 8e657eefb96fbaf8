"""Importing kernelcheck changes nothing in the importer's process; the command and its
workers start with their own defaults, a user's setting winning."""

from __future__ import annotations

import os
import subprocess
import sys

from kernelcheck.environment import command_defaults, worker_defaults
from kernelcheck.runner.worker_environment import worker_environment
from tests.conftest import HANG_S

SET_BY_US = ("TORCH_DEVICE_BACKEND_AUTOLOAD", "THP_MEM_ALLOC_ENABLE", "GOMP_SPINCOUNT")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SET_BY_US}


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_S
    )


def test_importing_the_library_and_its_plugin_sets_nothing():
    """The issue's own one-liner, with the API and torch's settings read back too."""
    code = (
        "import os, torch; e = dict(os.environ); t = torch.get_num_threads()\n"
        "import kernelcheck, kernelcheck.api, kernelcheck.pytest_plugin\n"
        "assert dict(os.environ) == e, set(os.environ.items()) ^ set(e.items())\n"
        "assert torch.get_num_threads() == t\n"
        "print('same')\n"
    )
    p = _python(code, _clean_env())
    assert p.returncode == 0 and p.stdout.strip() == "same", p.stderr


def test_the_command_sets_its_defaults_in_its_own_process():
    code = (
        "import os, sys; sys.argv = ['kernelcheck', '--help']\n"
        "from kernelcheck.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print({k: os.environ.get(k) for k in "
        "('TORCH_DEVICE_BACKEND_AUTOLOAD', 'THP_MEM_ALLOC_ENABLE')})\n"
    )
    p = _python(code, {**_clean_env(), "THP_MEM_ALLOC_ENABLE": "0"})
    assert p.returncode == 0, p.stderr
    # its own default where nothing was set; the user's value where it was
    last = p.stdout.strip().splitlines()[-1]
    assert last == "{'TORCH_DEVICE_BACKEND_AUTOLOAD': '0', 'THP_MEM_ALLOC_ENABLE': '0'}"


def test_workers_get_the_defaults_the_user_did_not_set():
    assert worker_defaults({}) == {**command_defaults(), "GOMP_SPINCOUNT": "10000"}
    mine = {"THP_MEM_ALLOC_ENABLE": "0", "OMP_WAIT_POLICY": "PASSIVE"}
    assert worker_defaults(mine) == {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    env = worker_environment()
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == os.environ.get(
        "TORCH_DEVICE_BACKEND_AUTOLOAD", "0"
    )
