"""JSON reports, written atomically so a reader never sees half a file."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from kernelcheck.results import Report

# A flat array of numbers (no string, array or object inside), as json.dumps(indent=2)
# spreads it over lines. Its "[" ends a line: a JSON string never holds a raw newline.
_FLAT_ARRAY = re.compile(r'\[\n\s+([^\[\]{}"]*?)\n\s*\]')


def dumps_report(data: dict) -> str:
    """A report as indented JSON with each flat array of numbers on one line: the plot data
    (64 column buckets, a ULP histogram) would otherwise take a line per number."""
    text = json.dumps(data, indent=2, default=str)
    return _FLAT_ARRAY.sub(lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)


_RESULTS = "\u0000results\u0000"  # where a report's results go, in their own text


def to_json(report: Report, result_texts: list[str] | None = None) -> str:
    """The report's JSON; ``result_texts`` (:func:`result_json` of each result, in order)
    spares serializing results again: the same text, made in time linear in the run."""
    if result_texts is None:
        return dumps_report(report.to_dict())
    data = report.to_dict(results=False)
    data["results"] = _RESULTS
    items = ",\n".join(result_texts)
    listed = f"[\n{items}\n  ]" if result_texts else "[]"
    return dumps_report(data).replace(json.dumps(_RESULTS), listed, 1)


def result_json(result) -> str:
    """One result as it stands in a report's ``results`` list (indented two levels)."""
    return dumps_report(result.to_dict()).replace("\n", "\n    ").join(["    ", ""])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644 & ~_umask())  # a report is for reading: not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: Path) -> str | None:
    """None when ``path`` can be written; else why not (checked before a run starts)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return f"{path} is a directory"
    if not parent.is_dir():
        try:  # --json-out out/r.json makes out/
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot make folder {parent}: {exc.strerror or exc}"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    try:  # the real test: reports are written as a temporary file beside the target
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write in {parent}: {exc.strerror or exc}"
    return None


class JsonReportWriter:
    """Rewrites the report file after every result, so a killed run leaves what it did."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.error: str | None = None  # a failed write never stops the run; the CLI says so
        self._texts: list[tuple[object, str]] = []  # (result, its JSON): results never change

    def __call__(self, _result, report: Report) -> None:
        self.write(report)

    def _result_texts(self, report: Report) -> list[str]:
        known = self._texts
        n = 0
        while n < min(len(known), len(report.results)) and known[n][0] is report.results[n]:
            n += 1
        del known[n:]  # a result replaced (a shrunk one): from there on, made again
        known += [(r, result_json(r)) for r in report.results[n:]]
        return [text for _, text in known]

    def write(self, report: Report) -> None:
        try:
            write_atomic(self.path, to_json(report, self._result_texts(report)))
            self.error = None
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
