"""Reading a JSON report (schema in README "JSON report") and refusing what is none."""

from __future__ import annotations

import json
from pathlib import Path

from kernelcheck.compare.identity import KEY_FIELDS
from kernelcheck.errors import UsageError
from kernelcheck.results import READABLE_SCHEMAS


def validate_report(data: object, name: str = "report") -> dict:
    """``data`` if it is a kernelcheck JSON report this version can read; else UsageError."""
    if not isinstance(data, dict) or "results" not in data or "op" not in data:
        raise UsageError(f"{name}: not a kernelcheck JSON report (no 'op' and 'results')")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMAS:
        readable = ", ".join(map(str, READABLE_SCHEMAS))
        raise UsageError(
            f"{name}: schema_version {version!r} is not supported "
            f"(this kernelcheck reads {readable})"
        )
    if not isinstance(data["results"], list):
        raise UsageError(f"{name}: 'results' is not a list")
    for i, r in enumerate(data["results"]):
        missing = [f for f in (*KEY_FIELDS, "status") if not isinstance(r, dict) or f not in r]
        if missing:
            raise UsageError(f"{name}: results[{i}] lacks {', '.join(missing)}")
    return data


def read_report(path: Path) -> dict:
    """A kernelcheck JSON report from ``path``; :class:`UsageError` saying why not."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a kernelcheck JSON report (invalid JSON: {exc})") from None
    return validate_report(data, str(path))
