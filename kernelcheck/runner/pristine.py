"""Pristine processes: a process in the state a case process starts in (torch imported,
no candidate loaded, nothing called), where a check makes the candidate's first call.

A kernel may fix a choice at its process's first call and keep it: an autotuner keyed on
(vocab, dtype) that benchmarks at the first call's row count, a plan cached at the first
batch size. Every later call in that process agrees with the choice, so no repeat and no
batch layout within one process shows it, while a rollout worker whose first call was one
sequence and a trainer whose first call was a batch give the same row other bits. A
check runs ``fn(*args)`` in pristine processes (:meth:`PristineProcesses.run`) with
different first calls and compares their bits.

Under an isolated worker the pristine processes are forked from a *zygote*, which the
worker forks beside each case process (:func:`fork_zygote`): it never loads a candidate,
so each fork starts pristine, in milliseconds. A case run in process (``--no-isolate``,
a test calling ``run_case``) starts a zygote interpreter on first use instead
(:func:`spawned`: ``python -m kernelcheck.runner.pristine``, seconds, once).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from kernelcheck.runner.channel import Channel

CACHES_PREFIX = "kernelcheck-pristine-caches-"  # then the zygote's pid
_GO = b"G"  # to the zygote: fork a pristine process, which reads the request that follows

# Where kernels keep state on disk across processes: compiled kernels, and the choices of
# autotuners that cache their results (Triton's ``autotune(cache_results=True)``,
# Inductor's local autotune cache, on by default). A choice made at the first process's
# first call and kept in such a cache would make every later process agree with it, so
# each pristine process starts with these pointed at an empty directory of its own.
KERNEL_CACHE_VARIABLES = (
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUPY_CACHE_DIR",
    "XDG_CACHE_HOME",
)


class PristineProcesses:
    """A zygote's client: each :meth:`run` is served by a fresh fork of the zygote."""

    def __init__(
        self, requests_fd: int, replies_fd: int, zygote: int, proc: subprocess.Popen | None = None
    ):
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.zygote = zygote  # its pid
        self.proc = proc  # the zygote interpreter, when this process started one
        self.broken = False  # a run was interrupted: a late reply may still come

    def run(self, fn, *args):
        """``fn(*args)`` in a pristine process (``fn`` importable by name, ``args``
        picklable); its ``CandidateFault`` (or a crash: the signal) is raised here as one.
        A run interrupted here (a case's timeout) kills the zygote and its fork: a late
        reply must never answer the next run."""
        if self.broken:
            raise RuntimeError("no pristine process: an earlier run was interrupted")
        try:
            os.write(self.requests_fd, _GO)
            channel = Channel(self.replies_fd, self.requests_fd)
            channel.send((fn, args))
            kind, value = channel.recv()
        except (OSError, EOFError) as exc:
            self.broken = True
            raise RuntimeError(f"no pristine process: the zygote is gone ({exc})") from None
        except BaseException:
            self.broken = True
            self._kill()
            raise
        if kind == "ok":
            return value
        if kind == "error":
            raise RuntimeError(value)
        from kernelcheck.checks.outcome import CandidateFault  # torch: not at worker start

        raise CandidateFault(f"in a pristine process: {value}")

    def _kill(self) -> None:
        """Kill the zygote (its fork dies with it: PR_SET_PDEATHSIG)."""
        try:
            os.kill(self.zygote, signal.SIGKILL)
        except OSError:
            pass

    def close(self) -> None:
        """Let the zygote go (it exits at EOF)."""
        if self.proc is None:
            for fd in (self.requests_fd, self.replies_fd):
                os.close(fd)
            return
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fork_zygote() -> tuple[int, PristineProcesses]:
    """Fork a zygote from this (pristine) process: ``(its pid, its client)``. The client's
    descriptors are for the case process forked next; this process closes them after."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    pid = fork()
    if pid == 0:  # the zygote: it never returns into the worker
        try:
            os.close(requests_write)
            os.close(replies_read)
            _zygote(requests_read, replies_write)
        finally:
            os._exit(0)
    os.close(requests_read)
    os.close(replies_write)
    return pid, PristineProcesses(requests_write, replies_read, pid)


def fork() -> int:
    """``os.fork()``, quietly: Python 3.12+ warns of any thread, and the forking processes
    here (the worker, the zygote) hold only idle ones (OpenBLAS's), which are fork-safe."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def die_with_parent() -> None:
    """Linux: be killed when the parent dies (a case process when its worker does, a
    zygote's fork when the zygote does)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)


def _zygote(requests_fd: int, replies_fd: int) -> None:
    """Fork one pristine process per request until EOF; report one that crashed."""
    die_with_parent()
    sweep_kernel_caches()
    while os.read(requests_fd, 1) == _GO:
        # made and removed here, so a process killed mid-run leaves no directory behind;
        # named by this zygote's pid, so one left by a zygote killed itself is swept
        caches = tempfile.mkdtemp(prefix=f"{CACHES_PREFIX}{os.getpid()}-")
        pid = fork()
        if pid == 0:  # the pristine process: it never returns into this loop
            code = 1
            try:
                die_with_parent()
                _own_root(caches)
                point_kernel_caches(caches)
                _serve_one(Channel(requests_fd, replies_fd, exact=True))
                code = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        shutil.rmtree(caches, ignore_errors=True)
        if status != 0:  # it died before it answered: answer for it
            Channel(-1, replies_fd).send(("crashed", _describe(status)))


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name} (signal {sig})"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


def _serve_one(channel: Channel) -> None:
    """Run one request; answer ``("ok", value)``, ``("fault", text)`` or ``("error", text)``."""
    from kernelcheck.checks.outcome import CandidateFault

    fn, args = channel.recv()
    try:
        answer = ("ok", fn(*args))
    except CandidateFault as exc:
        answer = ("fault", str(exc))
    except Exception as exc:  # noqa: BLE001 - a check's bug, reported as an internal error
        answer = ("error", f"in a pristine process: {type(exc).__name__}: {exc}")
    channel.send(answer)


def sweep_kernel_caches() -> None:
    """Remove the kernel-cache directories of zygotes that are gone (killed with their
    worker mid-run: nothing was left to remove them)."""
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        pid = name.removeprefix(CACHES_PREFIX).split("-", 1)[0]
        if not name.startswith(CACHES_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        except OSError:
            pass  # alive (another user's): its own


def point_kernel_caches(root: str) -> None:
    """This (pristine) process's kernel caches in the empty directory ``root``: its first
    call chooses as a first process's would, whatever earlier ones stored."""
    for name in KERNEL_CACHE_VARIABLES:
        os.environ[name] = os.path.join(root, name.lower())


# this pristine process's own empty directory (None outside one): its kernel caches and
# its private copy of the candidate's module
_private_root: str | None = None
# a candidate package bigger than this is imported from where it is (not copied)
MODULE_COPY_BYTES = 256 << 20


def candidate_module(base_dir: Path, import_path: str) -> Path | None:
    """The file or package in ``base_dir`` that ``import_path``'s top module is imported
    from, as Python's path finder picks it (a package before a module of its name, a
    folder without ``__init__`` only when there is no module); None: not in ``base_dir``."""
    top = base_dir / import_path.partition(":")[0].split(".")[0]
    if (top / "__init__.py").is_file():
        return top
    if top.with_name(f"{top.name}.py").is_file():
        return top.with_name(f"{top.name}.py")
    return top if top.is_dir() else None


def private_module_dir(base_dir: Path, import_path: str) -> Path:
    """In a pristine process, where its candidate's module (``candidate_module``) is
    imported from: a private copy of it, beside links to every other visible entry of
    ``base_dir`` (the modules, libraries and data it reads), hidden ones (dot-files) left
    out. A kernel that keeps a choice in a file beside its module (``.tune.json``) makes
    every later process agree with the first one's; here each pristine process starts
    without it and writes only to its copy. Elsewhere (or for a module not in
    ``base_dir``, or one too big to copy) ``base_dir`` itself. A module that finds its
    files by another path (its folder's parent, a link's target) may not load from the
    copy: the case process then runs again from ``base_dir`` (runner/case.py)."""
    module = candidate_module(base_dir, import_path)
    if _private_root is None or module is None:
        return base_dir
    if module.is_dir() and _tree_bytes(module) > MODULE_COPY_BYTES:
        return base_dir
    home = Path(_private_root) / "candidate"
    home.mkdir(exist_ok=True)
    for entry in base_dir.iterdir():
        if not _visible(entry):
            continue
        if entry == module:  # copied, even where it is a link
            _copy_visible(entry, home / entry.name, follow=True)
        elif not (home / entry.name).exists():
            (home / entry.name).symlink_to(entry)
    return home


def _visible(entry: Path) -> bool:
    """Whether a private copy keeps ``entry``: not hidden (a dot-file, state a kernel
    keeps beside its module) nor bytecode."""
    return not entry.name.startswith(".") and entry.name != "__pycache__"


def _copy_visible(source: Path, target: Path, follow: bool = False) -> None:
    """A copy of ``source`` (a file or a folder) at ``target``, its hidden entries and
    bytecode left out; each link inside it (and ``source`` itself unless ``follow``) a
    link to what the original one reaches (a relative link would reach elsewhere from
    the copy; a linked library is not copied)."""
    if source.is_symlink() and not follow:
        target.symlink_to(source.resolve())
    elif source.is_dir():
        target.mkdir()
        for entry in filter(_visible, source.iterdir()):
            _copy_visible(entry, target / entry.name)
    else:
        shutil.copy2(source, target)


def _own_root(root: str) -> None:
    """This pristine process's directory, set where ``private_module_dir`` reads it: in
    the imported module (a zygote run as ``python -m`` runs this file as ``__main__``)."""
    from kernelcheck.runner import pristine

    pristine._private_root = root


def _tree_bytes(folder: Path) -> int:
    """Bytes in ``folder``'s own files (links not followed: they are not copied)."""
    return sum(f.lstat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


_spawned: PristineProcesses | None = None


def spawned() -> PristineProcesses:
    """This process's zygote interpreter, started on first use (a case run in process)."""
    global _spawned
    if _spawned is None or _spawned.broken or _spawned.proc.poll() is not None:
        from kernelcheck.runner.worker_environment import worker_environment

        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelcheck.runner.pristine"],
            env=worker_environment(),  # as an isolated worker's (the large-block keeper)
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches this process only
        )
        requests, replies = proc.stdin.fileno(), proc.stdout.fileno()
        Channel(replies, requests).send(list(sys.path))  # candidates found through it
        if _spawned is None:
            atexit.register(lambda: _spawned is not None and _spawned.close())
        if _spawned is not None:
            _spawned.close()
        _spawned = PristineProcesses(requests, replies, proc.pid, proc)
    return _spawned


def main() -> None:
    """The zygote interpreter: import what a worker imports, then serve forks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(sys.stdin.fileno(), os.dup(sys.stdout.fileno()), exact=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a candidate's prints go to stderr
    import torch  # noqa: F401

    import kernelcheck.checks  # noqa: F401 - imported once for every fork
    from kernelcheck.runner.malloc_tuning import keep_chunks_in_heap

    keep_chunks_in_heap()
    sys.path[:] = channel.recv()
    _zygote(channel.read_fd, channel.write_fd)


if __name__ == "__main__":
    main()
