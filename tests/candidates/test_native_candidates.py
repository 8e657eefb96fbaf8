"""The native kernels as kernelcheck candidates: the CPU kernel passes every logp check."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelcheck import api
from kernelcheck.candidates import probe
from kernelcheck.checks import CHECKS

# the implementation names of the CPU library's builds (native:cpu-ISA)
CPU_BUILDS = ("native:cpu-portable", "native:cpu-avx2", "native:cpu-avx512")


@pytest.fixture(scope="module")
def cpu_ready(catalog):
    reason = probe(catalog.op("logp").candidates["cpu"], "cpu")
    if reason:
        pytest.skip(f"cpu candidate cannot run: {reason}")


@pytest.fixture
def cpu_isa(request, cpu_ready, monkeypatch):
    """The build that runs (``request.param``): the fastest this CPU has, or the portable one
    (ARM's), chosen through KERNELCHECK_CPU_ISA as a user does (isolated workers inherit it)."""
    from kernelcheck.candidates.native import cpu

    if request.param == "portable":
        monkeypatch.setenv(cpu.ISA_ENV, "portable")
    else:
        monkeypatch.delenv(cpu.ISA_ENV, raising=False)
    monkeypatch.setattr(cpu, "_env_applied", False)
    cpu.set_isa(None)  # then the environment, at the first call
    monkeypatch.setattr(cpu, "_env_applied", False)
    yield cpu.isa()
    monkeypatch.undo()
    cpu.set_isa(None)


@pytest.mark.parametrize(
    ("cpu_isa", "dtype"),
    # the portable build runs 20x slower; that its bits are every build's, in every dtype, is
    # tests/native/test_cpu_kernel.py's: here it is shown to run through the pipeline
    [("native", "fp32"), ("native", "bf16"), ("native", "fp16"), ("portable", "fp32")],
    indirect=["cpu_isa"],
)
@pytest.mark.slow
def test_cpu_kernel_passes_every_check(catalog, cpu_isa, dtype):
    report = api.run(catalog, "logp", candidate_names=["cpu"], device="cpu", dtype_names=dtype,
                     shape={"batch": 3, "seq": 5, "vocab": 4099}, seeds=[0])  # fmt: skip
    results = {r.check: r for r in report.results}
    assert set(results) == set(CHECKS)
    assert {k: r.message for k, r in results.items() if r.status != "pass"} == {}
    impl = f"native:cpu-{cpu_isa}"  # the build that ran: portable, avx2 or avx512
    assert impl in CPU_BUILDS
    assert all(r.implementation == impl for r in results.values())


@pytest.mark.slow
def test_cpu_kernel_passes_the_default_grid(cpu_ready, tmp_path):
    """``kernelcheck run --op logp --candidate cpu``: the shipped grid, Qwen3 vocab included,
    with this CPU's fastest build (the portable build's bits are the same: test_cpu_kernel)."""
    from kernelcheck.candidates.native import cpu

    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != cpu.ISA_ENV}
    command = [sys.executable, "-m", "kernelcheck", "run", "--op", "logp", "--candidate", "cpu",
               "--device", "cpu", "--format", "plain", "--json-out", str(out)]  # fmt: skip
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    (impl,) = {r["implementation"] for r in results}  # one build ran it all: the fastest
    assert impl in CPU_BUILDS
    assert {r["status"] for r in results if r["status"] != "pass"} <= {"skip"}
    assert {r["shape"]["vocab"] for r in results if r["status"] == "pass"} >= {151936}


def test_cpu_kernel_is_bitwise_the_same_for_any_thread_count(catalog, cpu_ready):
    import torch

    from kernelcheck.candidates.native import cpu
    from kernelcheck.cases.inputs import make_inputs

    x = make_inputs(catalog.op("logp"), {"batch": 37, "vocab": 10000}, "bf16", 0, "heavy")
    outs = []
    for threads in (1, 2, 5):
        cpu.set_num_threads(threads)
        outs.append(cpu.logp(x["logits"], x["target"]).view(torch.int32))
    cpu.set_num_threads(0)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_cuda_candidate_says_why_it_cannot_run_here(catalog):
    reason = probe(catalog.op("logp").candidates["cuda"], "cuda")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert reason and "cuda" in reason.lower()
