"""Rerun the repro command of every failing result in a kernelcheck JSON report and say
whether each reproduces: the same check fails again, at the same first bad element (the
message's "first ..." part; its counts may differ, as the run covered more trials).
Exit 0 when all do, 1 when one does not (or timed out), 2 on a bad report.

    python3 scripts/check_repros.py REPORT.json [--limit N] [--timeout S] [--expect-failures]

``--expect-failures``: a report without a failing result is an error too (negative
controls must fail). A printed repro must reproduce: this is how a lent GPU checks it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def _first_line(message: str) -> str:
    return message.splitlines()[0] if message else ""


def _first_bad(message: str) -> str:
    """The part of a failure message that names the first bad element or row."""
    line = _first_line(message)
    return line[line.index("first") :] if "first" in line else ""


def rerun(result: dict, timeout: float) -> tuple[str, dict | None, str]:
    """(verdict, the repro's matching result or None, stderr tail) for one failing result."""
    words = shlex.split(result["repro"])
    if not words or words[0] != "kernelcheck":
        return "NOT a kernelcheck command", None, ""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "repro.json"
        cmd = [sys.executable, "-m", "kernelcheck", *words[1:], "--json-out", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"TIMED OUT after {timeout:.0f} s", None, ""
        again = json.loads(out.read_text())["results"] if out.exists() else []
    same = [x for x in again if x["check"] == result["check"] and x["status"] == "fail"]
    if not same:
        return "DOES NOT reproduce", None, proc.stderr[-400:]
    if _first_bad(same[0]["message"]) != _first_bad(result["message"]):
        return "DIFFERS: fails again, at another first element", same[0], ""
    return "reproduces", same[0], ""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--limit", type=int, default=4, help="rerun at most this many (default 4)")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per rerun")
    ap.add_argument("--expect-failures", action="store_true")
    args = ap.parse_args(argv)
    try:
        report = json.loads(Path(args.report).read_text())
    except (OSError, ValueError) as exc:
        print(f"check_repros: cannot read {args.report}: {exc}")
        return 2
    failing = [r for r in report.get("results", []) if r["status"] == "fail"][: args.limit]
    if not failing:
        print("no failing result to reproduce")
        return 1 if args.expect_failures else 0
    bad = 0
    for r in failing:
        verdict, same, stderr = rerun(r, args.timeout)
        bad += verdict != "reproduces"
        print(f"{verdict}: {r['case_id']} {r['check']}: {r['repro']}", flush=True)
        print(f"  first run: {_first_line(r['message'])[:200]}")
        if same is not None:
            print(f"  repro run: {_first_line(same['message'])[:200]}")
        if stderr:
            print(f"  repro stderr: {stderr}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
