"""Pristine processes (kernelcheck/runner/pristine.py): each run is a fresh fork of a
zygote that never ran the program, and what goes wrong there comes back as a fault."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from kernelcheck.checks.outcome import CandidateFault
from kernelcheck.runner.pristine import (
    CACHES_PREFIX,
    KERNEL_CACHE_VARIABLES,
    fork_zygote,
    spawned,
    sweep_kernel_caches,
)

_calls = 0


def count_calls() -> tuple[int, int]:
    """(this process's pid, calls of this function in it so far, this one included)."""
    global _calls
    _calls += 1
    return os.getpid(), _calls


def kernel_caches() -> dict[str, str]:
    """This process's kernel cache variables, each directory made and a file left in it."""
    for name in KERNEL_CACHE_VARIABLES:
        os.makedirs(os.environ[name], exist_ok=True)
        with open(os.path.join(os.environ[name], "choice"), "w") as f:
            f.write("4")
    return {name: os.environ[name] for name in KERNEL_CACHE_VARIABLES}


def fill_caches_and_crash(record: str):
    """Fill the kernel caches, note where they are in ``record``, then die by a signal."""
    with open(record, "w") as f:
        json.dump(kernel_caches(), f)
    crash()


def raise_fault():
    raise CandidateFault("candidate raised ValueError: bad")


def raise_bug():
    raise ValueError("a check's bug")


def crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def hang():
    signal.pause()


class _Interrupted(Exception):
    pass


def test_each_run_is_a_fresh_process_that_never_ran_the_program():
    count_calls()  # here: the pristine processes must not see it
    first, second = spawned().run(count_calls), spawned().run(count_calls)
    assert first[1] == second[1] == 1
    assert len({first[0], second[0], os.getpid()}) == 3


def test_each_run_starts_with_empty_kernel_caches_of_its_own(tmp_path, monkeypatch):
    for name in KERNEL_CACHE_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / name))
    first, second = spawned().run(kernel_caches), spawned().run(kernel_caches)
    for name in KERNEL_CACHE_VARIABLES:
        assert first[name] != second[name] and str(tmp_path) not in first[name]
        assert not os.path.exists(first[name])  # removed when the run ended
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "TRITON_CACHE_DIR")  # here: kept


def test_a_run_killed_mid_call_leaves_no_cache_directory_behind(tmp_path):
    record = tmp_path / "caches"
    with pytest.raises(CandidateFault, match="killed by SIGSEGV"):
        spawned().run(fill_caches_and_crash, str(record))
    caches = json.loads(record.read_text())
    assert caches and not any(os.path.exists(path) for path in caches.values())


def test_a_dead_zygotes_cache_directory_is_swept_and_a_live_ones_kept():
    """A zygote killed with its worker mid-run leaves its fork's directory: the next
    zygote to start removes it, by the dead pid in its name."""
    child = subprocess.Popen(["true"])
    child.wait()  # its pid is free now
    dead = tempfile.mkdtemp(prefix=f"{CACHES_PREFIX}{child.pid}-")
    live = tempfile.mkdtemp(prefix=f"{CACHES_PREFIX}{os.getpid()}-")
    try:
        sweep_kernel_caches()
        assert not os.path.exists(dead) and os.path.isdir(live)
    finally:
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(dead, ignore_errors=True)


def test_a_fault_a_crash_and_a_bug_come_back_as_what_they_are():
    with pytest.raises(CandidateFault, match="in a pristine process: candidate raised"):
        spawned().run(raise_fault)
    with pytest.raises(CandidateFault, match="killed by SIGSEGV"):
        spawned().run(crash)
    with pytest.raises(RuntimeError, match="ValueError: a check's bug"):
        spawned().run(raise_bug)
    assert spawned().run(count_calls)[1] == 1  # the zygote serves on after each


def test_a_forked_zygote_serves_its_client_and_ends_when_the_client_lets_go():
    pid, client = fork_zygote()
    try:
        child, calls = client.run(count_calls)
        assert child not in (pid, os.getpid())
    finally:
        client.close()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_an_interrupted_run_never_answers_the_next():
    """A case's timeout interrupts a run in process: the hung fork and its zygote are
    killed, and the next run gets a fresh zygote and its own answer."""
    zygote = spawned()

    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(_Interrupted):
            zygote.run(hang)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert zygote.broken and zygote.proc.wait(10) is not None
    assert spawned() is not zygote and spawned().run(count_calls)[1] == 1


def test_the_candidates_module_is_found_as_pythons_path_finder_finds_it(tmp_path):
    """A package before a module of its name, a module before a folder without
    ``__init__`` (a namespace portion), none where the folder has neither."""
    from kernelcheck.runner.pristine import candidate_module

    assert candidate_module(tmp_path, "kern:logp") is None
    (tmp_path / "kern").mkdir()
    assert candidate_module(tmp_path, "kern.sub:logp") == tmp_path / "kern"
    (tmp_path / "kern.py").write_text("")
    assert candidate_module(tmp_path, "kern:logp") == tmp_path / "kern.py"
    (tmp_path / "kern" / "__init__.py").write_text("")
    assert candidate_module(tmp_path, "kern:logp") == tmp_path / "kern"


def test_a_private_copy_keeps_links_as_links_to_what_they_reach(tmp_path, monkeypatch):
    """The package is copied without its hidden files; a link inside it (a relative one
    to a library beside the package) reaches from the copy what it reached before."""
    from kernelcheck.runner import pristine

    base = tmp_path / "specs"
    (base / "kern").mkdir(parents=True)
    (base / "kern" / "__init__.py").write_text("X = 1\n")
    (base / "kern" / ".tune.json").write_text("{}")
    (base / "libk.so").write_bytes(b"\0" * 8)
    (base / "kern" / "lib.so").symlink_to("../libk.so")
    monkeypatch.setattr(pristine, "_private_root", str(tmp_path / "own"))
    (tmp_path / "own").mkdir()
    home = pristine.private_module_dir(base, "kern:logp")
    assert home == tmp_path / "own" / "candidate"
    assert (home / "kern" / "__init__.py").read_text() == "X = 1\n"
    assert not (home / "kern" / "__init__.py").is_symlink()
    assert not (home / "kern" / ".tune.json").exists()
    assert (home / "kern" / "lib.so").read_bytes() == b"\0" * 8
    assert (home / "libk.so").resolve() == base / "libk.so"
