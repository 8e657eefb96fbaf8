"""The verdict line says what the exit code says (kernelcheck/commands/verdict.py)."""

from __future__ import annotations

from typer.testing import CliRunner

from kernelcheck.cli import app


def test_a_json_report_lost_mid_run_fails_the_verdict_line_too(monkeypatch, tmp_path):
    """The run keeps going when --json-out cannot be written; stderr says why, the exit
    code is 1, and the last line says FAILED, never PASSED."""
    from kernelcheck.report import json_report

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json_report, "write_atomic", full_disk)
    argv = ["run", "--op", "logp", "--candidate", "torch", "--device", "cpu", "--dtype", "fp32"]
    argv += ["--batch", "2", "--vocab", "33", "--checks", "forward_accuracy", "--no-sweep"]
    argv += ["--no-isolate", "--format", "plain", "--json-out", str(tmp_path / "r.json")]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 1, res.output
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("FAILED: 1 pass") and "JSON report was not written" in last
