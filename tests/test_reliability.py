"""A faulty kernel never takes the run down; nothing checked is lost; bad input gets one line.

Faulty candidates live in tests/fixtures/faulty_logp.py. Each run also holds the honest
``torch`` candidate, whose results must be complete whatever the faulty one did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcheck import api
from kernelcheck.checks import CHECKS
from tests.conftest import FIXTURES, SMALL, with_candidate

REPO = Path(__file__).resolve().parents[1]
FAST_CHECKS = ["forward_accuracy", "contract", "determinism"]


def _run(catalog, faulty: str, checks=FAST_CHECKS, isolate=None, honest=True, **kw):
    """Run the faulty candidate (isolated when asked) beside the honest one (in process;
    left out where a short timeout would judge it by the machine's speed)."""
    cat = with_candidate(catalog, "faulty", f"faulty_logp:{faulty}", isolate=isolate)
    report = api.run(
        cat,
        "logp",
        candidate_names=["faulty", "torch"] if honest else ["faulty"],
        device="cpu",
        dtype_names="fp32",
        shape=SMALL,
        check_names=checks,
        seeds=[0],
        distributions="normal",
        **kw,
    )
    faulty_results = {r.check: r for r in report.results if r.candidate == "faulty"}
    others = {r.check: r for r in report.results if r.candidate == "torch"}
    said = [(r.check, r.status, r.message) for r in others.values()]
    if honest:
        assert set(others) == set(checks), said
        assert {r.status for r in others.values()} == {"pass"}, said
    return faulty_results, report


@pytest.mark.slow
def test_raising_candidate_is_an_error_with_type_and_message(catalog):
    res, report = _run(catalog, "raises")
    for r in res.values():
        # raising where the contract asks for a value is a contract fail, not an error
        assert r.status == ("fail" if r.check == "contract" else "error")
        assert "RuntimeError: kernel launch failed" in r.message
    assert report.counts()["error"] == len(FAST_CHECKS) - 1


@pytest.mark.parametrize("faulty", ["out_of_memory", "allocates_too_much"])
@pytest.mark.slow
def test_out_of_memory_is_an_error_and_the_run_goes_on(catalog, faulty):
    res, _ = _run(catalog, faulty)
    assert all(r.status == "error" and "out of memory" in r.message for r in res.values())


# A hang is judged against work that never finishes, never against a fast machine: the
# short timeouts below apply to the hanging candidate alone (an honest case beside it
# could outlast 1 s on a loaded machine), and the hang can only end by the timeout.


@pytest.mark.slow
def test_hang_in_process_times_out(catalog):
    res, _ = _run(catalog, "hangs", timeout_s=1.0, honest=False)
    assert {r.status for r in res.values()} == {"timeout"}
    assert "did not finish within 1 s" in next(iter(res.values())).message


@pytest.mark.slow
def test_hang_isolated_times_out(catalog):
    res, _ = _run(catalog, "hangs", timeout_s=2.0, isolate=True, honest=False)
    assert {r.status for r in res.values()} == {"timeout"}
    assert "worker was killed" in next(iter(res.values())).message


@pytest.mark.parametrize(
    "faulty,fragment",
    [("segfaults", "SIGSEGV"), ("aborts", "SIGABRT"), ("exits", "exited with code 3")],
)
@pytest.mark.slow
def test_process_killers_are_crashes_with_the_signal(catalog, faulty, fragment):
    res, _ = _run(catalog, faulty, isolate=True)
    assert {r.status for r in res.values()} == {"crash"}
    assert all(fragment in r.message for r in res.values())


@pytest.mark.slow
def test_nan_where_gold_is_finite_fails_with_count_and_index(catalog):
    res, _ = _run(catalog, "returns_nan", checks=["forward_accuracy"])
    r = res["forward_accuracy"]
    assert r.status == "fail"
    assert r.metrics["n_nonfinite"] > 0
    assert "NaN/Inf where gold is finite (first at [0, 1])" in r.message


@pytest.mark.parametrize(
    "faulty,fragment",
    [
        ("wrong_shape", "shape (7,) != expected (2, 4)"),
        ("wrong_dtype", "dtype torch.float64 != expected torch.float32"),
        ("wrong_type", "candidate returned (list); expected 1 tensor(s)"),
    ],
)
@pytest.mark.slow
def test_wrong_output_is_a_contract_fail(catalog, faulty, fragment):
    res, _ = _run(catalog, faulty, checks=["contract"])
    assert res["contract"].status == "fail"
    assert fragment in res["contract"].message


@pytest.mark.slow
def test_isolated_results_equal_in_process_results(catalog):
    a, _ = _run(catalog, "returns_nan", checks=["forward_accuracy"], isolate=True)
    b, _ = _run(catalog, "returns_nan", checks=["forward_accuracy"], isolate=False)
    assert a["forward_accuracy"].metrics == b["forward_accuracy"].metrics


# --- interrupting a running `kernelcheck run` ---------------------------------------------


def _addon_spec(tmp_path: Path, callable_: str) -> Path:
    spec = tmp_path / "faulty.toml"
    spec.write_text(
        f'op = "logp"\n[[candidate]]\nname = "faulty"\ncallable = "{callable_}"\n'
        f'devices = ["cpu"]\n'
    )
    return spec


def _start(tmp_path, callable_, out, *extra):
    env = {**os.environ, "PYTHONPATH": f"{FIXTURES}{os.pathsep}{REPO}"}
    env["KC_TEST_REACHED"] = str(tmp_path / "reached")  # swallows_interrupts touches it
    argv = [sys.executable, "-m", "kernelcheck", "run", "--op", "logp", "--device", "cpu"]
    argv += ["--spec", str(_addon_spec(tmp_path, callable_)), "--candidate", "faulty"]
    argv += ["--dtype", "fp32,bf16,fp16", "--seed", "0", "--checks", "forward_accuracy"]
    argv += ["--json-out", str(out), "--format", "plain", *extra]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_results(out: Path, proc, timeout=300.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if out.exists():
            data = json.loads(out.read_text())
            if data["results"]:
                return data
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("no result reached the JSON file")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.slow
def test_interrupt_leaves_a_valid_partial_report(tmp_path, sig, code):
    out = tmp_path / "run.json"
    proc = _start(tmp_path, "faulty_logp:hangs_below_fp32", out)
    first = _wait_for_results(out, proc)
    assert first["summary"]["not_run"], "results must reach the file before the end"
    proc.send_signal(sig)
    # the run left never ends (its bf16 cases hang): only the signal can stop it
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    data = json.loads(out.read_text())
    assert data["summary"]["interrupted"] == signal.Signals(sig).name
    assert data["summary"]["not_run"]
    assert data["results"] and all(r["check"] in CHECKS for r in data["results"])
    assert "interrupted" in err


def test_second_ctrl_c_exits_at_once(tmp_path):
    out = tmp_path / "run.json"
    # in process: isolated, the swallowing candidate never sees the parent's Ctrl-C
    proc = _start(tmp_path, "faulty_logp:swallows_interrupts", out, "--no-isolate")
    reached = tmp_path / "reached"
    while not reached.exists():  # the candidate runs (it never returns): however slowly
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # swallowed by the candidate
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    # the candidate never returns, so only the second Ctrl-C can end the run
    proc.communicate(timeout=120)
    assert proc.returncode == 130


@pytest.mark.slow
def test_isolated_worker_does_not_rerun_the_callers_main_script(tmp_path):
    """The worker is a fresh interpreter: a caller's script without a __main__ guard (or
    code fed on stdin) is not imported again in the child, and nothing recurses."""
    script = (
        "from kernelcheck import api\n"
        "from kernelcheck.spec import load_catalog\n"
        "r = api.run(load_catalog(), 'logp', candidate_names=['torch'], device='cpu',\n"
        "            dtype_names='fp32', shape={'batch': 2, 'vocab': 33}, seeds=[0],\n"
        "            check_names=['forward_accuracy'], isolate=True)\n"
        "print('STATUS', [x.status for x in r.results])\n"
    )
    p = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)  # fmt: skip
    assert "STATUS ['pass']" in p.stdout, p.stderr[-2000:]
