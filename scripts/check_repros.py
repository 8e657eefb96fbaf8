"""Rerun the repro command of every failing result in a kernelcheck JSON report and say
whether each reproduces (the same check fails again). Exit 1 if any does not.

    python3 scripts/check_repros.py REPORT.json [--limit N]

A printed repro must reproduce: this is how a lent GPU checks that on real kernels.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[0]).read_text())
    limit = int(argv[argv.index("--limit") + 1]) if "--limit" in argv else 4
    failing = [r for r in report["results"] if r["status"] == "fail"][:limit]
    if not failing:
        print("no failing result to reproduce")
        return 0
    bad = 0
    for r in failing:
        words = shlex.split(r["repro"])
        assert words[0] == "kernelcheck", r["repro"]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "repro.json"
            cmd = [sys.executable, "-m", "kernelcheck", *words[1:], "--json-out", str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            again = json.loads(out.read_text())["results"] if out.exists() else []
        same = [x for x in again if x["check"] == r["check"] and x["status"] == "fail"]
        verdict = "reproduces" if same else "DOES NOT reproduce"
        bad += not same
        print(f"{verdict}: {r['case_id']} {r['check']} (exit {proc.returncode}): {r['repro']}")
        if same:
            print(f"  first run: {r['message'][:160]}")
            print(f"  repro run: {same[0]['message'][:160]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
