"""Stage 2c: trials computed once and shared by every candidate of a run.

A trial's inputs, its float64 gold and its fp32 reference depend only on (op, dtype,
shape, seed, distribution), not on the candidate. The first candidate to need them
computes them and stores them as files in a shared-memory folder (``/dev/shm``) that
the run owns; the next candidates, each in its own isolated worker, map those files
(``torch.load(mmap=True)``: no copy, no pickle through a pipe) instead of drawing and
computing again. Each group (one dtype and shape) has a folder of its own in the run's,
removed once the group's last case is done (``runner/schedule.py``); all of them
together stay within ``budget_bytes``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

try:  # torch >= 2.6: serialization settings (the zip records' CRC)
    import torch.utils.serialization
except ImportError:  # pragma: no cover - older torch
    pass

DEFAULT_BUDGET = 12 * 2**30  # at most this much of shared memory, and at most half its room


def make_run_folder() -> Path | None:
    """A private folder in ``/dev/shm`` for this run's shared trials (None: no sharing)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        return None
    _remove_orphans(shm)
    return Path(tempfile.mkdtemp(prefix=f"kernelcheck-{os.getpid()}-", dir=shm))


def _remove_orphans(shm: Path) -> None:
    """Folders of runs that died without cleaning up (a second Ctrl-C exits at once)."""
    for folder in shm.glob("kernelcheck-*-*"):
        try:
            pid = int(folder.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


GROUP_PREFIX = "group-"


def group_folder(run_folder: Path, index: int) -> Path:
    """Where one group's trials are stored, removed once its last case is done."""
    return run_folder / f"{GROUP_PREFIX}{index}"


def budget_for(folder: Path) -> int:
    free = shutil.disk_usage(folder).free
    return min(DEFAULT_BUDGET, free // 2)


def trial_key(
    op: str, version: str, dtype: str, shape: tuple, seed: int, dist: str, attrs: tuple = ()
) -> str:
    text = f"{op}-v{version}-{dtype}-{'x'.join(str(v) for _, v in shape)}-s{seed}-{dist}"
    text += "".join(f"-{k}={v}" for k, v in attrs)  # the gold depends on them
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


class SharedTrials:
    """Get or put one part ("inputs", "gold", "reference") of a trial by key.

    ``budget_bytes`` 0 makes it read-only: the last candidate of a group only reads.
    """

    def __init__(self, folder: str | Path | None, budget_bytes: int = DEFAULT_BUDGET):
        self.folder = Path(folder) if folder else None
        self.budget = budget_bytes

    def _path(self, key: str, part: str) -> Path:
        return self.folder / f"{key}.{part}.pt"

    def has(self, key: str, part: str) -> bool:
        """Whether ``part`` of trial ``key`` is stored (a :meth:`get` maps it, no recompute)."""
        return self.folder is not None and self._path(key, part).is_file()

    def get(self, key: str, part: str):
        if self.folder is None:
            return None
        path = self._path(key, part)
        if not path.is_file():
            return None
        try:
            return torch.load(path, mmap=True, weights_only=True)
        except Exception:  # a torn or foreign file: compute it again
            return None

    def put(self, key: str, part: str, value) -> None:
        if self.folder is None or not self.budget or not self.folder.is_dir():
            return
        size = _nbytes(value)
        # the run's total: every group's folder (groups run side by side hold theirs);
        # two workers storing at once may pass it by one part
        root = self.folder.parent if self.folder.name.startswith(GROUP_PREFIX) else self.folder
        used = _stored_bytes(root)
        if used + size > self.budget:
            return
        path = self._path(key, part)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            _save_without_crc(value, tmp)
            tmp.replace(path)  # atomic: a reader sees the whole file or none
        except Exception:  # a full /dev/shm (torch says RuntimeError): just do not share
            tmp.unlink(missing_ok=True)


def _save_without_crc(value, path: Path) -> None:
    """``torch.save`` without the zip records' CRC-32: 3x faster (0.55 -> 0.19 s for
    0.6 GB here), and a file in a private tmpfs folder, written atomically, needs none."""
    config = getattr(getattr(torch.utils, "serialization", None), "config", None)
    config = getattr(config, "save", None)
    if config is None:  # a torch before the setting (2.6): with the CRC, as ever
        torch.save(value, path)
        return
    crc = config.compute_crc32
    config.compute_crc32 = False
    try:
        torch.save(value, path)
    finally:
        config.compute_crc32 = crc


def remove(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _stored_bytes(root: Path) -> int:
    """Bytes of every stored part under ``root`` (a part removed meanwhile counts 0)."""
    total = 0
    for path in root.rglob("*.pt"):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def _nbytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def unwritten(tensors) -> bool:
    """True when every tensor lies in a private file mapping (a shared part, as
    :meth:`SharedTrials.get` maps it) of which no page was ever written.

    A write to a private file mapping first copies the page, and the kernel counts the
    copies as the mapping's ``Anonymous`` memory (``Swap`` once swapped out;
    ``/proc/self/smaps``): zero in both means every byte is still the file's. False when
    that cannot be told (a tensor not mapped from a file, no ``/proc``): callers then
    compare digests. A write through the file itself (another mapping of it, ``pwrite``)
    is not a copy and is not seen: the run's folder is private, and no kernel under test
    is given its path.
    """
    spans = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors]
    if not spans:
        return False
    try:
        with open("/proc/self/smaps") as f:
            text = f.read()
    except OSError:
        return False
    found = dict.fromkeys(range(len(spans)), False)
    inside = []  # span indices in the mapping being read
    for line in text.splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and head[0][0] in "0123456789abcdef":
            lo, hi = (int(v, 16) for v in head[0].split("-"))
            private_file = len(head) == 6 and head[1].endswith("p") and head[5].startswith("/")
            inside = [i for i, (p, n) in enumerate(spans) if lo <= p and p + n <= hi]
            inside = inside if private_file else []
            for i in inside:
                found[i] = None  # mapped from a file; clean until Anonymous says otherwise
        elif inside and head[0] == "Anonymous:":
            for i in inside:
                found[i] = head[1] == "0"
        elif inside and head[0] == "Swap:":  # a copied page swapped out counts here
            for i in inside:
                found[i] = found[i] is True and head[1] == "0"
            inside = []
    return all(v is True for v in found.values())
