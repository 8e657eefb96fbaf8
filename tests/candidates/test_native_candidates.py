"""The native kernels as kernelcheck candidates: the CPU kernel passes every logp check."""

from __future__ import annotations

import pytest

from kernelcheck import api
from kernelcheck.candidates import probe
from kernelcheck.checks import CHECKS


@pytest.fixture(scope="module")
def cpu_ready(catalog):
    reason = probe(catalog.op("logp").candidates["cpu"], "cpu")
    if reason:
        pytest.skip(f"cpu candidate cannot run: {reason}")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_cpu_kernel_passes_every_check(catalog, cpu_ready, dtype):
    report = api.run(catalog, "logp", candidate_names=["cpu"], device="cpu", dtype_names=dtype,
                     shape={"batch": 3, "seq": 5, "vocab": 4099}, seeds=[0])  # fmt: skip
    results = {r.check: r for r in report.results}
    assert set(results) == set(CHECKS)
    assert {k: r.message for k, r in results.items() if r.status != "pass"} == {}
    from kernelcheck.candidates.native import cpu

    impl = f"native:cpu-{cpu.isa()}"  # the build that ran: avx2, or avx512 where the CPU has it
    assert impl in ("native:cpu-avx2", "native:cpu-avx512")
    assert all(r.implementation == impl for r in results.values())


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
