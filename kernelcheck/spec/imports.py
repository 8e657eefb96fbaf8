"""Resolve ``module:attr`` import paths named in specs, only when they are about to run.

The spec's own folder is searched first, so a user's ``my_kernels.toml`` can name
``my_kernels:logp`` that sits beside it. Nothing from a spec is ever eval'ed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


class ImportPathError(Exception):
    """The module or the attribute of an import path could not be resolved."""


def resolve(import_path: str, base_dir: Path | None = None):
    module_name, _, attr_path = import_path.partition(":")
    added = False
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))
        added = True
    try:
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                where = f" (searched {base_dir} and sys.path)" if base_dir else ""
                raise ImportPathError(f"module {module_name!r} not found{where}") from None
            raise ImportPathError(
                f"module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
            ) from None
        except Exception as exc:  # a broken candidate module is a result, not a crash
            raise ImportPathError(
                f"module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
            ) from None
    finally:
        if added:
            sys.path.remove(str(base_dir))
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ImportPathError(f"module {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    return obj
