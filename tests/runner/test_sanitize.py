"""``--sanitize TOOL``: the isolated workers' command, the usage errors, and the
memory_safety result a case gets from the sanitizer's log (a stand-in sanitizer here: the
real one needs a GPU, see tests/native/test_cuda_bugs.py)."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys

import pytest

from kernelcheck import api
from kernelcheck.errors import UsageError
from kernelcheck.runner import sanitize
from tests.checks.test_memory_safety import MEMCHECK
from tests.conftest import SMALL

# stands for compute-sanitizer: logs a memcheck report to --log-file (%p: its pid), then
# runs the worker it wraps
FAKE = """#!/bin/sh
while [ "${1#--}" != "$1" ]; do
  if [ "$1" = "--log-file" ]; then log="$2"; fi
  shift 2
done
log=$(printf '%s' "$log" | sed "s/%p/$$/")
cat "$REPORT" > "$log"
exec "$@"
"""


def test_the_worker_command_runs_under_the_tool(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/opt/cuda/bin/compute-sanitizer")
    worker = [sys.executable, "-m", "kernelcheck.runner.worker"]
    assert sanitize.worker_command(None, None) == worker
    cmd = sanitize.worker_command("racecheck", str(tmp_path))
    assert cmd[:3] == ["/opt/cuda/bin/compute-sanitizer", "--tool", "racecheck"]
    assert cmd[cmd.index("--log-file") + 1] == str(tmp_path / "sanitizer.%p.log")
    assert cmd[cmd.index("--target-processes") + 1] == "all"
    assert cmd[-3:] == worker
    assert sanitize.worker_env(None) == {}
    assert sanitize.worker_env("memcheck") == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


def test_the_sanitizer_is_found_in_the_cuda_toolkit(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    exe = tmp_path / "bin" / sanitize.EXECUTABLE
    if not os.path.exists("/usr/local/cuda/bin/compute-sanitizer"):
        assert sanitize.find_sanitizer() is None
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    assert sanitize.find_sanitizer() == str(exe)


def test_what_keeps_the_sanitizer_from_running(monkeypatch):
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    assert "unknown tool 'leakcheck'" in sanitize.problem("leakcheck", "cuda", None, True)
    assert "needs a CUDA GPU" in sanitize.problem("memcheck", "cpu", None, False)
    assert "needs a CUDA GPU" in sanitize.problem("memcheck", "cuda", None, False)
    assert "--no-isolate" in sanitize.problem("memcheck", "cuda", False, True)
    assert "not found" in sanitize.problem("memcheck", "cuda", None, True)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/x/compute-sanitizer")
    assert sanitize.problem("synccheck", "cuda", None, True) is None


def test_without_a_gpu_sanitize_is_a_usage_error(catalog):
    with pytest.raises(UsageError, match="needs a CUDA GPU"):
        api.plan(catalog, "logp", device="cpu", sanitize="memcheck")


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="this machine has a GPU: no usage error"
)
def test_the_command_line_says_so_in_one_line_and_exits_2():
    out = subprocess.run(
        [sys.executable, "-m", "kernelcheck", "run", "--op", "logp", "--sanitize", "memcheck"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "kernelcheck: error: --sanitize needs a CUDA GPU (device 'cpu', no GPU here)"
    ]


def test_the_log_reader_gives_each_case_its_own_text(tmp_path):
    reader = sanitize.LogReader(str(tmp_path))
    (tmp_path / "sanitizer.11.log").write_text("a\n")
    assert reader.read() == "a\n"
    with (tmp_path / "sanitizer.11.log").open("a") as f:
        f.write("b\n")
    (tmp_path / "sanitizer.12.log").write_text("c\n")
    assert reader.read() == "b\nc\n"
    assert reader.read() == ""
    reader.remove()
    assert not tmp_path.exists()


@pytest.mark.parametrize("report,status", [(MEMCHECK, "fail"), ("", "pass")])
def test_a_sanitized_worker_gives_each_case_a_memory_safety_result(
    catalog, tmp_path, monkeypatch, report, status
):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    (tmp_path / "report.txt").write_text(report)
    monkeypatch.setenv("REPORT", str(tmp_path / "report.txt"))
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: str(fake))
    plan = api.plan(
        catalog, "logp", candidate_names=["torch"], device="cpu", dtype_names="fp32",
        shape=SMALL, check_names=["forward_accuracy"], seeds=[0], distributions="normal",
        isolate=True,
    )  # fmt: skip
    plan = dataclasses.replace(plan, options=dataclasses.replace(plan.options, sanitize="memcheck"))
    report_ = api.execute(plan)
    by_check = {r.check: r for r in report_.results}
    assert by_check["forward_accuracy"].status == "pass"
    found = by_check["memory_safety"]
    assert found.status == status
    if status == "fail":
        assert "Invalid __global__ read of size 4 bytes in logp_forward_kernel" in found.message
        assert "thread (31,0,0) block (0,0,0)" in found.message
        assert "--checks forward_accuracy --sanitize memcheck" in found.repro
