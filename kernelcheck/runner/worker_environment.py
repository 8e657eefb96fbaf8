"""The environment an isolated worker starts with."""

from __future__ import annotations

import os

from kernelcheck.environment import worker_defaults
from kernelcheck.runner.keeper import with_keeper


def worker_environment() -> dict[str, str]:
    """This process's environment, plus the command's own defaults and a short OpenMP spin
    where the user set nothing (``kernelcheck/environment.py``: the worker is kernelcheck's
    process, its importer is not), with the large-block keeper preloaded
    (``runner/keeper.py``)."""
    env = dict(os.environ)
    env.update(worker_defaults(env))
    return with_keeper(env)
