"""The trial store: trials computed once and shared by every candidate of a run.

A trial's inputs, its float64 gold and its fp32 reference depend only on (op, dtype,
shape, seed, distribution), not on the candidate. The first candidate to need them
computes them and stores them as files in a shared-memory folder (``/dev/shm``) that
the run owns; the next candidates, each in its own isolated worker, map those files
instead of drawing and computing again: no copy, no pickle through a pipe. Each group
(one dtype and shape) has a folder of its own in the run's, removed once the group's
last case is done (``runner/schedule.py``, ``cases/run_folder.py``); all of them together
stay within ``budget_bytes``.

A stored part is one raw file per tensor (its bytes, C order) and a small JSON manifest
of the part's structure, written last and atomically: a reader sees the whole part or
none. Readers map each file privately (``torch.from_file(shared=False)``: a write copies
the page, and the copy is counted, see
:func:`kernelcheck.smaps.unwritten`). The inputs are drawn straight
into their files (:meth:`SharedTrials.allocator`): at the Qwen3 shape that saves a
2.4 GB copy and as much fresh memory per dtype.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import torch

from kernelcheck.cases.run_folder import DEFAULT_BUDGET, GROUP_PREFIX


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

    _names = itertools.count()  # data files of this process: never two of the same name

    def __init__(self, folder: str | Path | None, budget_bytes: int = DEFAULT_BUDGET):
        self.folder = Path(folder) if folder else None
        self.budget = budget_bytes
        # storage address -> (its file, the storage: held, so the address is never another's)
        self._drawn: dict[int, tuple[str, torch.UntypedStorage]] = {}

    def _path(self, key: str, part: str) -> Path:
        return self.folder / f"{key}.{part}.json"

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
            return _decode(json.loads(path.read_text()), self.folder)
        except Exception:  # a torn or foreign file: compute it again
            return None

    def get_or_make(self, key: str, part: str, make: Callable[[], object]):
        """The stored ``part``, or ``make()``'s value, stored and read back as every other
        reader reads it: mapped privately from the file. The made copy is let go (its memory
        freed for a GB-sized gradient to reuse); tensors drawn in place through
        :meth:`allocator` are the file's shared mapping, which no one may write."""
        found = self.get(key, part)
        if found is None:
            found = make()
            self.put(key, part, found)
            stored = self.get(key, part)
            found = found if stored is None else stored
        return found

    def allocator(self, key: str, part: str) -> Callable[..., torch.Tensor] | None:
        """``empty(shape, dtype)`` for a part drawn in place: each tensor is a fresh file of
        the store, mapped shared, so :meth:`put` of a value holding it writes no byte again.
        None when nothing would be stored (no folder, read-only, over the budget)."""
        if self.folder is None or not self.budget or not self.folder.is_dir():
            return None

        def empty(shape, dtype: torch.dtype) -> torch.Tensor:
            numel = math.prod(int(n) for n in shape)
            if not numel or self._used() + numel * dtype.itemsize > self.budget:
                return torch.empty(shape, dtype=dtype)
            name = self._data_name(key, part)
            try:
                t = _mapped_file(self.folder / name, numel, dtype)
            except Exception:  # no room in /dev/shm: an ordinary tensor, not shared
                (self.folder / name).unlink(missing_ok=True)
                return torch.empty(shape, dtype=dtype)
            self._drawn[t.untyped_storage().data_ptr()] = (name, t.untyped_storage())
            return t.view(shape)

        return empty

    def put(self, key: str, part: str, value) -> None:
        if self.folder is None or not self.budget or not self.folder.is_dir():
            return
        written: list[str] = []  # files of this part: removed again unless it is stored
        tensors: list[torch.Tensor] = []
        try:
            layout = _encode(value, tensors)
            written += [name for t in tensors if (name := self._drawn_file(t))]
            new = [t for t in tensors if self._drawn_file(t) is None]
            if self._used() + _nbytes(new) > self.budget:
                return
            files = []
            for t in tensors:
                name = self._drawn_file(t)
                if name is None:  # not drawn in place: copied into a file of its own
                    name = self._data_name(key, part)
                    written.append(name)
                    _write(self.folder / name, t)
                files.append(name)
            layout = _with_files(layout, files)
            path = self._path(key, part)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(layout))
            try:  # atomic, and the first writer wins: a reader sees one whole part or none,
                os.link(tmp, path)  # and a part stored by another worker meanwhile keeps its
                written = []  # files while this one's go (they would hold the room till the end)
            finally:
                tmp.unlink(missing_ok=True)
        except Exception:  # a full /dev/shm, a part stored meanwhile, an odd value: not ours
            pass
        finally:  # the drawn tensors are the caller's now, their files the part's or gone
            for name in written:
                (self.folder / name).unlink(missing_ok=True)
            for t in tensors:
                self._drawn.pop(t.untyped_storage().data_ptr(), None)

    def _data_name(self, key: str, part: str) -> str:
        return f"{key}.{part}.{os.getpid()}-{next(self._names)}.bin"

    def _drawn_file(self, t: torch.Tensor) -> str | None:
        """The file of a tensor :meth:`allocator` made (the whole of it, in C order)."""
        name, _ = self._drawn.get(t.untyped_storage().data_ptr(), (None, None))
        whole = t.is_contiguous() and t.storage_offset() == 0
        if name is None or not whole or t.untyped_storage().nbytes() != _nbytes(t):
            return None
        return name

    def _used(self) -> int:
        # the run's total: every group's folder (groups run side by side hold theirs);
        # two workers storing at once may pass it by one part
        root = self.folder.parent if self.folder.name.startswith(GROUP_PREFIX) else self.folder
        return _stored_bytes(root)


def _encode(value, tensors: list) -> dict:
    """The JSON layout of a part: tensors numbered in ``tensors`` (files added later)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach())
        dtype = str(value.dtype).removeprefix("torch.")
        return {"tensor": len(tensors) - 1, "dtype": dtype, "shape": list(value.shape)}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v, tensors) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_encode(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"cannot store a {type(value).__name__}")


def _with_files(layout: dict, files: list[str]) -> dict:
    if "tensor" in layout:
        return {**layout, "tensor": files[layout["tensor"]]}
    if "dict" in layout:
        return {"dict": {k: _with_files(v, files) for k, v in layout["dict"].items()}}
    for kind in ("list", "tuple"):
        if kind in layout:
            return {kind: [_with_files(v, files) for v in layout[kind]]}
    return layout


def _mapped_file(path: Path, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A new file of ``numel`` elements, mapped shared. Its room is reserved first: a write
    through a mapping of a sparse tmpfs file that finds /dev/shm full is a SIGBUS, which
    nothing can catch; ``posix_fallocate`` says ENOSPC instead (OSError)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, numel * dtype.itemsize)
    finally:
        os.close(fd)
    return torch.from_file(str(path), shared=True, size=numel, dtype=dtype)


def _write(path: Path, t: torch.Tensor) -> None:
    """``t``'s bytes (C order) into a new file."""
    t = t.detach().cpu()
    if t.numel():
        _mapped_file(path, t.numel(), t.dtype).view(t.shape).copy_(t)
    else:
        path.write_bytes(b"")


def _map(folder: Path, entry: dict) -> torch.Tensor:
    """A stored tensor, mapped privately from its file (an empty one made afresh)."""
    dtype = getattr(torch, entry["dtype"])
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {entry['dtype']}")
    shape = tuple(int(n) for n in entry["shape"])
    numel = math.prod(shape)
    if not numel:
        return torch.empty(shape, dtype=dtype)
    path = str(folder / entry["tensor"])
    return torch.from_file(path, shared=False, size=numel, dtype=dtype).view(shape)


def _decode(layout: dict, folder: Path):
    if "tensor" in layout:
        return _map(folder, layout)
    if "dict" in layout:
        return {k: _decode(v, folder) for k, v in layout["dict"].items()}
    if "list" in layout:
        return [_decode(v, folder) for v in layout["list"]]
    if "tuple" in layout:
        return tuple(_decode(v, folder) for v in layout["tuple"])
    return layout["value"]


def _stored_bytes(root: Path) -> int:
    """Bytes of every stored part under ``root`` (a part removed meanwhile counts 0, and
    so does a group's folder removed while it is walked: ``os.walk`` skips a folder it
    cannot list, where ``Path.rglob`` raised FileNotFoundError mid-run)."""
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            if "." not in name:
                continue
            try:
                total += os.stat(os.path.join(folder, name)).st_size
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
