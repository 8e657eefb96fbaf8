"""compute-sanitizer's reports become the memory_safety outcome: its first finding in the
message (kind, kernel, address, thread), every finding counted."""

from __future__ import annotations

import pytest

from kernelcheck.checks import memory_safety
from tests.conftest import FIXTURES


def _sample(name: str) -> str:
    """A compute-sanitizer log (tests/fixtures/sanitizer/), in the formats its versions print."""
    return (FIXTURES / "sanitizer" / name).read_text()


MEMCHECK = _sample("memcheck.log")

MEMCHECK_OLD = _sample("memcheck_old.log")

RACECHECK = _sample("racecheck.log")

RACECHECK_OLD = _sample("racecheck_old.log")

INITCHECK = _sample("initcheck.log")

CLEAN = _sample("clean.log")


def test_memcheck_names_the_kernel_the_address_and_the_thread():
    found = memory_safety.parse(MEMCHECK)
    assert len(found) == 2
    first = found[0]
    assert first.kind == "Invalid __global__ read of size 4 bytes"
    assert first.kernel == "logp_forward_kernel(const float *, const long *, float *, int, int)"
    assert first.thread == "thread (31,0,0) block (0,0,0)"
    assert first.address == "0x7f3a5c000400 (out of bounds)"
    assert memory_safety.reported_errors(MEMCHECK) == 2
    out = memory_safety.outcome(MEMCHECK, "memcheck")
    assert out.status == "fail"
    assert out.message == (
        "compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes in "
        "logp_forward_kernel(const float *, const long *, float *, int, int) at "
        "0x7f3a5c000400 (out of bounds), thread (31,0,0) block (0,0,0) (and 1 more)"
    )
    assert out.metrics == {"tool": "memcheck", "findings": 2}


@pytest.mark.parametrize(
    "text,kind,kernel,thread,address",
    [
        (  # the older format: the lines after the first not indented
            MEMCHECK_OLD,
            "Invalid __global__ read of size 8",
            "void vector_projection<double>(double*, int)",
            "thread (9,0,0) block (0,0,0)",
            "0x000370e8 (out of bounds)",
        ),
        (  # initcheck: an address without a bound
            INITCHECK,
            "Uninitialized __global__ memory read of size 4 bytes",
            "sum_kernel(const float *, float *)",
            "thread (0,0,0) block (0,0,0)",
            "0x7f0000000000",
        ),
    ],
)
def test_one_finding_is_located(text, kind, kernel, thread, address):
    (found,) = memory_safety.parse(text)
    assert (found.kind, found.kernel, found.thread, found.address) == (
        kind,
        kernel,
        thread,
        address,
    )


def test_racecheck_names_the_racing_kernel():
    (race,) = memory_safety.parse(RACECHECK)
    assert race.kind.startswith("Race reported between Write access")
    assert race.kernel == "shared_race_kernel(const float *, float *, int)"
    assert memory_safety.reported_errors(RACECHECK) == 1
    (old,) = memory_safety.parse(RACECHECK_OLD)
    assert old.kernel == "shared_race_kernel(float*)"
    assert memory_safety.outcome(RACECHECK, "racecheck").status == "fail"


def test_a_clean_log_passes_and_other_output_is_ignored():
    assert memory_safety.parse(CLEAN) == []
    assert memory_safety.reported_errors(CLEAN) == 0
    assert memory_safety.reported_errors("") is None
    out = memory_safety.outcome("some program output\n" + CLEAN, "racecheck")
    assert (out.status, out.metrics["findings"]) == ("pass", 0)
