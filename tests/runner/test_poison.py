"""Fresh memory is poisoned, never zeroed (kernelcheck/fresh_memory.py, runner/poison.py,
allocator_cpu/).

A candidate that leaves output elements unwritten, or reads a workspace it freed, must fail
in every way a case can run: isolated with the large-block keeper, isolated without it, and
in process. The candidates are in tests/fixtures/memory_bugs.py; the honest ``torch``
candidate runs beside them and passes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

from kernelcheck import api, fresh_memory
from kernelcheck.runner import poison
from kernelcheck.runner.keeper import NO_KEEP_LARGE_ENV, keeper_status
from tests.conftest import with_candidate
from tests.fixtures.memory_bugs import WORKSPACE_C, WORKSPACE_LIB_ENV

SHAPE = {"batch": 2, "seq": 16, "vocab": 257}  # 5% ignore-index targets: some rows unwritten
CHECKS = ["forward_accuracy", "forward_precision", "contract"]
needs_flag = pytest.mark.skipif(
    not fresh_memory.cpu_poison_available(), reason="this torch's libc10 has no junk-fill flag"
)


def _run(catalog, name: str, callable_: str, isolate: bool, checks=CHECKS, backward=True):
    """{candidate: {check: result}} of one fp32 run of the fixture beside ``torch``."""
    cat = with_candidate(catalog, name, callable_, backward=backward, isolate=isolate)
    report = api.run(
        cat,
        "logp",
        candidate_names=[name, "torch"],
        device="cpu",
        dtype_names="fp32",
        shape=SHAPE,
        check_names=checks,
        attributes={"with_mask": False},  # the default case only: no attribute sweeps
        isolate=isolate,
    )
    out: dict[str, dict] = {}
    for r in report.results:
        out.setdefault(r.candidate, {})[r.check] = r
    return out


@needs_flag
def test_poisoning_is_scoped_to_candidate_code_and_restores_the_previous_setting():
    """Importing kernelcheck changes nothing; the junk fill is on while candidate code runs
    and puts back whatever was set before."""
    script = (
        "import kernelcheck.api, kernelcheck.runner.execute, kernelcheck.fresh_memory as m;"
        "print(m._junk_flag().value)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.split()[-1] == "False", out.stderr
    for before in (False, True):
        fresh_memory.set_cpu_poison(before)
        try:
            with fresh_memory.poisoned_allocations():
                assert bool(torch.empty(1000).isnan().all())
                half = torch.empty(1000, dtype=torch.bfloat16)  # every other element NaN
                assert bool(half[1::2].isnan().all())
            assert fresh_memory._junk_flag().value is before
        finally:
            fresh_memory.set_cpu_poison(False)


@needs_flag
def test_the_candidates_own_allocations_read_nan_at_import_and_in_each_call(catalog):
    """A candidate's allocations at import and in each call are filled; between calls
    (where kernelcheck places inputs and computes the gold) the fill is off."""
    fresh_memory.set_cpu_poison(False)
    sys.modules.pop("fresh_memory_probe", None)  # imported afresh by the candidate loader
    res = _run(catalog, "peek", "fresh_memory_probe:reports_fresh_memory", False, ["contract"])
    assert res["peek"]["contract"].status == "pass"
    probe = sys.modules["fresh_memory_probe"]
    assert probe.SEEN and all(probe.SEEN), "every call's fresh tensor read NaN"
    assert probe.AT_IMPORT_NAN, "the import's fresh tensor read NaN"
    assert not fresh_memory._junk_flag().value  # off again after the case


@needs_flag
@pytest.mark.parametrize(
    ("isolate", "keeper"),
    [(True, True), (True, False), (False, False)],
    ids=["isolated", "isolated-no-keeper", "in-process"],
)
@pytest.mark.slow
def test_unwritten_output_rows_read_nan_and_fail(catalog, monkeypatch, isolate, keeper):
    """The rows of ignore-index targets are left as torch.empty gave them. Unpoisoned, the
    freed output of the previous call often sat there with the right 0.0s, and
    forward_accuracy and forward_precision passed; poisoned, they read NaN."""
    if not keeper:
        monkeypatch.setenv(NO_KEEP_LARGE_ENV, "1")
    else:
        monkeypatch.delenv(NO_KEEP_LARGE_ENV, raising=False)
    res = _run(catalog, "unwritten", "memory_bugs:unwritten_ignored_rows", isolate)
    bad, honest = res["unwritten"], res["torch"]
    assert {c: r.status for c, r in honest.items()} == dict.fromkeys(CHECKS, "pass")
    assert {c: r.status for c, r in bad.items()} == dict.fromkeys(CHECKS, "fail")
    assert "NaN/Inf where gold is finite" in bad["forward_accuracy"].message
    assert bad["forward_accuracy"].metrics["n_nonfinite"] > 0


def _workspace_lib(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux and a C compiler")
    src, lib = tmp_path / "workspace.c", tmp_path / "libworkspace.so"
    src.write_text(WORKSPACE_C)
    subprocess.run([cc, "-O0", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "no-keeper"])
@pytest.mark.slow
def test_a_freed_large_workspace_read_back_crashes_the_case(catalog, tmp_path, monkeypatch, keeper):
    """The candidate frees its 64 MB native workspace, then copies its result out of it. The
    keeper used to keep that block mapped with the values in it, so the candidate passed;
    a kept block is unreadable now, and the read faults as it does without the keeper
    (glibc unmaps such a block)."""
    if keeper and keeper_status()["status"] == "missing":
        pytest.skip("libkc_keep_large.so is not built (pip install -e . builds it)")
    monkeypatch.setenv(WORKSPACE_LIB_ENV, str(_workspace_lib(tmp_path)))
    if keeper:
        monkeypatch.delenv(NO_KEEP_LARGE_ENV, raising=False)
    else:
        monkeypatch.setenv(NO_KEEP_LARGE_ENV, "1")
    res = _run(
        catalog,
        "freed",
        "memory_bugs:freed_workspace",
        True,
        checks=["forward_accuracy"],
        backward=False,
    )
    assert res["torch"]["forward_accuracy"].status == "pass"
    got = res["freed"]["forward_accuracy"]
    assert got.status == "crash" and "SIGSEGV" in got.message, got.message


def test_keeper_status_says_whether_fresh_memory_is_poisoned():
    """``kernelcheck doctor`` prints the keeper's reason: it says what poisons memory."""
    reason = keeper_status()["reason"]
    if fresh_memory.cpu_poison_available():
        assert "torch CPU allocations read NaN" in reason
    else:
        assert "not poisoned" in reason


def test_device_cache_poisoning_is_a_no_op_without_the_device():
    assert poison.poison_cached_device_memory("cpu") == 0
    if not torch.cuda.is_available():
        assert poison.poison_cached_device_memory("cuda") == 0
        assert poison.poison_cached_device_memory("cuda:0") == 0
    assert poison.poison_cached_device_memory("npu") == 0 or hasattr(torch, "npu")
