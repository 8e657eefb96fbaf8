"""Trials are computed once and shared by every candidate of a run
(kernelcheck/cases/trial_store.py)."""

from __future__ import annotations

import pytest

from kernelcheck import api
from kernelcheck.spec import load_catalog
from tests.conftest import SPECS


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in-process"])
@pytest.mark.slow
def test_two_candidates_share_one_gold_computation(tmp_path, monkeypatch, isolate):
    count = tmp_path / "gold_calls.txt"
    monkeypatch.setenv("KC_GOLD_COUNT_FILE", str(count))
    catalog = load_catalog([SPECS / "counted.toml"])
    report = api.run(
        catalog,
        "counted",
        device="cpu",
        check_names=["forward_accuracy", "forward_precision"],
        isolate=isolate,
    )
    assert {r.candidate for r in report.results} == {"first", "second"}
    assert {r.status for r in report.results} == {"pass"}
    calls = count.read_text().splitlines()
    # 2 seeds x 1 mixed trial (normal+lm), one chunk each: two gold calls for both candidates
    assert len(calls) == 2, calls


def test_shared_trial_parts_round_trip_and_respect_the_budget(tmp_path):
    import torch

    from kernelcheck.cases.trial_store import SharedTrials

    store = SharedTrials(tmp_path, budget_bytes=1000)
    small = {"x": torch.arange(10, dtype=torch.float32)}
    store.put("k", "inputs", small)
    got = store.get("k", "inputs")
    assert torch.equal(got["x"], small["x"])
    store.put("k2", "inputs", {"x": torch.zeros(1000)})  # 4000 bytes: over the budget
    assert store.get("k2", "inputs") is None
    assert SharedTrials(None).get("k", "inputs") is None


def test_without_a_shared_folder_each_candidate_computes_its_own_gold(tmp_path, monkeypatch):
    """The negative control of the count above: the sharing is what saves the calls."""
    from kernelcheck.cases import run_folder

    count = tmp_path / "gold_calls.txt"
    monkeypatch.setenv("KC_GOLD_COUNT_FILE", str(count))
    monkeypatch.setattr(run_folder, "make_run_folder", lambda: None)
    catalog = load_catalog([SPECS / "counted.toml"])
    api.run(catalog, "counted", device="cpu", check_names=["forward_accuracy"], isolate=False)
    assert len(count.read_text().splitlines()) == 4


def test_a_failed_store_only_means_not_shared(tmp_path, monkeypatch):
    import torch

    from kernelcheck.cases import trial_store

    calls = []

    def full(path, t):  # the second tensor's file does not fit: the first one is removed too
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("unable to mmap: No space left on device")
        real(path, t)

    real = trial_store._write
    monkeypatch.setattr(trial_store, "_write", full)
    store = trial_store.SharedTrials(tmp_path)
    store.put("k", "inputs", {"x": torch.zeros(3), "y": torch.ones(2)})  # no exception
    assert len(calls) == 2
    assert store.get("k", "inputs") is None and not list(tmp_path.iterdir())


def test_a_run_with_one_candidate_per_group_shares_nothing(monkeypatch, tmp_path):
    """Storing trials costs a copy: done only when another candidate of the group reads them."""
    from kernelcheck.cases import run_folder

    made = []
    monkeypatch.setattr(run_folder, "make_run_folder", lambda: made.append(1))
    api.run(load_catalog(), "logp", candidate_names=["torch"], device="cpu",
            shape={"batch": 2, "vocab": 33}, check_names=["contract"], isolate=False)  # fmt: skip
    assert not made
    import torch

    from kernelcheck.cases.trial_store import SharedTrials

    reader = SharedTrials(tmp_path, budget_bytes=0)  # the last candidate: reads only
    reader.put("k", "inputs", {"x": torch.zeros(3)})
    assert not list(tmp_path.iterdir())


def test_parts_round_trip_bit_exact_in_their_structure(tmp_path):
    import torch

    from kernelcheck.cases.trial_store import SharedTrials

    value = {
        "logits": torch.randn(4, 257).to(torch.bfloat16),
        "nested": [torch.arange(4), (torch.zeros(0, 3), torch.tensor(True))],
        "scalar": 3,
    }
    store = SharedTrials(tmp_path)
    store.put("k", "inputs", value)
    got = store.get("k", "inputs")
    assert got["logits"].dtype == torch.bfloat16 and got["logits"].shape == (4, 257)
    assert torch.equal(got["logits"].view(torch.int16), value["logits"].view(torch.int16))
    assert torch.equal(got["nested"][0], value["nested"][0])
    assert isinstance(got["nested"][1], tuple) and got["nested"][1][0].shape == (0, 3)
    assert bool(got["nested"][1][1]) and got["scalar"] == 3
    assert not store.has("k", "gold") and store.get("k", "gold") is None
    (tmp_path / "k.gold.json").write_text("{not json")  # torn or foreign: computed again
    assert store.get("k", "gold") is None


def test_inputs_drawn_in_place_are_stored_without_a_copy(tmp_path):
    """The allocator's tensors are the store's files: put() writes their manifest only, and
    a reader maps them privately (a candidate writing its input spoils no other's)."""
    import torch

    from kernelcheck.cases.trial_store import SharedTrials
    from kernelcheck.smaps import unwritten

    store = SharedTrials(tmp_path, budget_bytes=1 << 30)
    empty = store.allocator("k", "inputs")
    x = empty((64, 1000), torch.float32)
    x.copy_(torch.randn(64, 1000))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 1 and files[0].endswith(".bin")
    store.put("k", "inputs", {"x": x.reshape(8, 8, 1000), "t": torch.arange(64)})
    assert len(list(tmp_path.glob("*.bin"))) == 2  # x's own file, and one for t
    got = store.get("k", "inputs")
    assert torch.equal(got["x"].reshape(64, 1000), x) and unwritten(got.values())
    got["x"][0, 0, 0] = 7.0
    assert float(store.get("k", "inputs")["x"][0, 0, 0]) == float(x[0, 0])
    part = store.allocator("k", "inputs")((3,), torch.float32)[1:]  # a part of its file:
    store.put("k2", "inputs", {"p": part})  # copied into a file of its own
    assert torch.equal(store.get("k2", "inputs")["p"], part)
    assert SharedTrials(tmp_path, budget_bytes=0).allocator("k", "inputs") is None
    tight = SharedTrials(tmp_path, budget_bytes=1)  # over the budget: an ordinary tensor
    assert tight.allocator("k3", "inputs")((2, 2), torch.float32).shape == (2, 2)
    assert not list(tmp_path.glob("k3.*"))
    room = SharedTrials(tmp_path, budget_bytes=store._used() + 400)
    drawn = room.allocator("k4", "inputs")((100,), torch.float32)  # fits; the rest does not:
    room.put("k4", "inputs", {"x": drawn, "y": torch.zeros(1000)})  # the drawn file goes too
    assert room.get("k4", "inputs") is None and not list(tmp_path.glob("k4.*"))


def test_two_workers_storing_one_part_keep_the_first_and_no_stray_files(tmp_path):
    """The first writer wins; the second's files go at once (they would hold their room in
    /dev/shm until the group ends), and both read the one stored part."""
    import torch

    from kernelcheck.cases.trial_store import SharedTrials

    a, b = SharedTrials(tmp_path), SharedTrials(tmp_path)
    x = a.allocator("k", "inputs")((4, 100), torch.float32)
    x.fill_(1.0)
    y = b.allocator("k", "inputs")((4, 100), torch.float32)
    y.fill_(1.0)
    assert len(list(tmp_path.glob("*.bin"))) == 2
    a.put("k", "inputs", {"x": x})
    b.put("k", "inputs", {"x": y})
    assert len(list(tmp_path.glob("*.bin"))) == 1 and len(list(tmp_path.glob("*.json"))) == 1
    assert torch.equal(b.get("k", "inputs")["x"], y) and float(y.sum()) == 400.0


def test_no_room_in_shared_memory_means_not_shared_never_a_crash(tmp_path, monkeypatch):
    """A file's room is reserved before it is mapped: a full /dev/shm is an error to catch
    (ENOSPC), not a SIGBUS on the first write through the mapping."""
    import errno
    import os

    import torch

    from kernelcheck.cases import trial_store

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(trial_store.os, "posix_fallocate", full)
    store = trial_store.SharedTrials(tmp_path)
    t = store.allocator("k", "inputs")((8, 8), torch.float32)
    assert not list(tmp_path.iterdir())  # an ordinary tensor, no file behind it
    t.fill_(2.0)
    store.put("k", "inputs", {"x": t, "y": torch.ones(3)})
    assert store.get("k", "inputs") is None and not list(tmp_path.iterdir())


def test_the_stored_size_walk_survives_a_group_folder_removed_meanwhile(tmp_path, monkeypatch):
    """Groups side by side: one group's last case removes its folder while another case
    sums the run's stored bytes. A folder gone mid-walk counts 0, never raises (it did:
    FileNotFoundError in the invariance check that was storing its pool)."""
    import os

    from kernelcheck.cases import trial_store

    for group, size in (("group-0", 3), ("group-1", 5)):
        (tmp_path / group).mkdir()
        (tmp_path / group / "k.part.bin").write_bytes(b"x" * size)
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("group-1"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert trial_store._stored_bytes(tmp_path) == 3
