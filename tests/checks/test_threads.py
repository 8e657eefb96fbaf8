"""Blocks at another thread count or in deterministic mode (kernelcheck/checks/threads.py)
leave the process's settings as they found them."""

from __future__ import annotations

import torch

from kernelcheck.checks.threads import deterministic_algorithms, torch_threads


def test_deterministic_mode_is_on_inside_and_restored_after():
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    for setting in ((False, False), (True, False)):
        torch.use_deterministic_algorithms(setting[0], warn_only=setting[1])
        try:
            with deterministic_algorithms():
                assert torch.are_deterministic_algorithms_enabled()
                assert torch.is_deterministic_algorithms_warn_only_enabled()
                assert torch.isnan(torch.empty(4)).all()  # fresh memory poisoned, not zeroed
            assert (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ) == setting
        finally:
            torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_the_thread_count_is_restored_after():
    before = torch.get_num_threads()
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == before


def test_inductors_setting_follows_where_a_candidate_loaded_it():
    import torch._inductor.config as inductor  # as a torch.compile candidate's call does

    before = inductor.deterministic
    with deterministic_algorithms():
        assert inductor.deterministic is True
    assert inductor.deterministic == before
