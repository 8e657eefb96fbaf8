"""The run's folder in ``/dev/shm`` for its shared trials: made, one sub-folder per
group, removed; and the folders of runs that died without removing theirs.

Each group (one dtype and shape) stores its trials in a folder of its own
(``cases/trial_store.py``), removed once the group's last case is done
(``runner/schedule.py``); the whole run's parts stay within ``budget_for`` its room.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_BUDGET = 12 * 2**30  # at most this much of shared memory, and at most half its room
GROUP_PREFIX = "group-"


def make_run_folder() -> Path | None:
    """A private folder in ``/dev/shm`` for this run's shared trials (None: no sharing)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        return None
    _remove_orphans(shm)
    return Path(tempfile.mkdtemp(prefix=f"kernelcheck-{os.getpid()}-", dir=shm))


def _remove_orphans(shm: Path) -> None:
    """Folders of runs that died without cleaning up (a second Ctrl-C exits at once)."""
    for folder in shm.glob("kernelcheck-*-*"):
        try:
            pid = int(folder.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def group_folder(run_folder: Path, index: int) -> Path:
    """Where one group's trials are stored, removed once its last case is done."""
    return run_folder / f"{GROUP_PREFIX}{index}"


def budget_for(folder: Path) -> int:
    free = shutil.disk_usage(folder).free
    return min(DEFAULT_BUDGET, free // 2)


def remove(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
