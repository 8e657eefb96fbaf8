"""The run's folder in /dev/shm (kernelcheck/cases/run_folder.py)."""

from __future__ import annotations

import pytest

from kernelcheck.cases import run_folder


def test_a_dead_runs_folder_is_removed_by_the_next_run(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    orphan = run_folder.Path("/dev/shm") / f"kernelcheck-{dead}-test"
    if not run_folder.Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    orphan.mkdir()
    mine = run_folder.make_run_folder()
    try:
        assert not orphan.exists() and mine is not None and mine.is_dir()
    finally:
        run_folder.remove(mine)
