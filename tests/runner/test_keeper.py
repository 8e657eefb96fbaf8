"""The large-block keeper shim (runner/keeper.py, allocator_cpu/keep_large.c)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The large-block keeper (allocator_cpu/keep_large.c), preloaded in a fresh interpreter: a
# freed GB-sized block serves the next request of about its size, every block handed out
# reads 0xFF bytes (NaN) until written, values written are the caller's, and realloc /
# malloc_usable_size of its blocks behave as the C library's. (torch's own junk fill is off
# here: only the keeper poisons.)
_KEEP_SCRIPT = """
import ctypes, torch
libc = ctypes.CDLL(None)
def poisoned(t):  # every byte 0xFF, seen 1 MB at a time (no large temporary of its own)
    return all(bool(part.eq(255).all()) for part in t.view(torch.uint8).split(1 << 20))
a = torch.empty(40 << 20, dtype=torch.uint8)  # above the keeper's 32 MB: fresh pages,
first = a.data_ptr()  # poisoned, never zero
assert poisoned(a)
a.fill_(7)
assert libc.malloc_usable_size(ctypes.c_void_p(first)) >= a.numel()
del a
b = torch.empty(40 << 20, dtype=torch.uint8)  # the same size: the kept block, poisoned
assert b.data_ptr() == first and poisoned(b)  # (no stale 7s)
assert bool(torch.empty(10 << 20)[:: 1 << 10].isnan().all())  # fp32 (any float dtype): NaN
del b
big = torch.full((300 << 20,), 7, dtype=torch.uint8)  # poisoned by a thread per CPU (of 2+)
kept = big.data_ptr()
del big
big = torch.empty(300 << 20, dtype=torch.uint8)
assert big.data_ptr() == kept and poisoned(big)
del big
c = torch.full((10 << 20,), 3, dtype=torch.int32)  # another size: a block of its own
assert int(c.sum()) == 3 * (10 << 20)
p = ctypes.c_void_p()
assert libc.posix_memalign(ctypes.byref(p), 64, 64 << 20) == 0
ctypes.memset(p, 5, 64 << 20)
libc.realloc.restype = ctypes.c_void_p
assert libc.posix_memalign(ctypes.byref(ctypes.c_void_p()), 24, 64 << 20) == 22  # EINVAL
q = libc.realloc(p, 80 << 20)
assert q and ctypes.string_at(q + (64 << 20) - 4, 4) == bytes([5] * 4)
libc.free(ctypes.c_void_p(q))
small = torch.ones(1000)  # below the threshold: the C library's own
assert float(small.sum()) == 1000.0
grad = torch.full((400 << 20,), 9, dtype=torch.uint8)  # larger than the kept block: unmaps it
at = grad.data_ptr()
del grad  # kept now
pool = torch.empty(40 << 20, dtype=torch.uint8)  # smaller: carved from the kept block's front,
assert pool.data_ptr() == at and poisoned(pool)  # poisoned; the rest stays kept
half = torch.empty(200 << 20, dtype=torch.uint8)  # the next dtype's gradient: from the rest
assert half.data_ptr() == at + (40 << 20) and poisoned(half)
assert libc.malloc_usable_size(ctypes.c_void_p(half.data_ptr())) == 200 << 20
del pool, half  # the larger freed block is kept, the other unmapped
again = torch.empty(200 << 20, dtype=torch.uint8)
assert again.data_ptr() == at + (40 << 20)
thp = ctypes.c_void_p()  # torch's request with THP_MEM_ALLOC_ENABLE: 2 MB aligned, kept too
assert libc.posix_memalign(ctypes.byref(thp), 2 << 20, 100 << 20) == 0
assert thp.value % (2 << 20) == 0 and libc.malloc_usable_size(thp) == 100 << 20
libc.free(thp)
held = torch.empty(64 << 20, dtype=torch.uint8)  # a block kept again, then a request whose
del held  # rounded size would wrap around: refused, never the kept block (or unmapped memory)
huge = ctypes.c_void_p()
assert libc.posix_memalign(ctypes.byref(huge), 64, ctypes.c_size_t(-4096).value) == 12  # ENOMEM
print("ok", first == c.data_ptr())
"""


def _keeper():
    from kernelcheck.native_files import find_named
    from kernelcheck.runner.keeper import KEEP_LARGE

    return find_named(KEEP_LARGE)[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="an LD_PRELOAD shim: Linux only")
@pytest.mark.slow
def test_the_large_block_keeper_reuses_a_freed_block_and_keeps_values():
    shim = _keeper()
    if shim is None:
        pytest.skip("libkc_keep_large.so is not built (pip install -e . builds it)")
    env = {**__import__("os").environ, "LD_PRELOAD": str(shim)}
    out = subprocess.run(
        [sys.executable, "-c", _KEEP_SCRIPT], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "ok"


# A use after free of a large block: 64 MB from posix_memalign (as torch and native kernels
# allocate), written, freed, then read.
_UAF_SCRIPT = """
import ctypes
libc = ctypes.CDLL(None)
p = ctypes.c_void_p()
assert libc.posix_memalign(ctypes.byref(p), 4096, 64 << 20) == 0
ctypes.memset(p, 7, 64 << 20)
libc.free(p)
print("read", ctypes.string_at(p.value + (1 << 20), 4), flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="an LD_PRELOAD shim: Linux only")
@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "glibc"])
def test_reading_a_freed_large_block_faults_with_or_without_the_keeper(keeper):
    """glibc unmaps a freed block this large, so the read faults; the keeper keeps it mapped
    for reuse, and used to hand the freed values back (a use-after-free passed). It makes
    the kept block unreadable, so the read faults as it does without it."""
    import os
    import signal

    env = dict(os.environ)
    if keeper:
        shim = _keeper()
        if shim is None:
            pytest.skip("libkc_keep_large.so is not built (pip install -e . builds it)")
        env["LD_PRELOAD"] = str(shim)
    out = subprocess.run([sys.executable, "-c", _UAF_SCRIPT], capture_output=True, env=env)
    assert out.returncode == -signal.SIGSEGV, (out.returncode, out.stdout)


_EARLY_LIB = r"""
#include <stdlib.h>
/* a library whose constructor allocates, as GLib's does: it runs before the shim's own */
__attribute__((constructor)) static void early(void) {
  void* p = 0;
  if (posix_memalign(&p, 1024, 1008) != 0) abort();
  free(p);
}
int early_ok(void) { return 1; }
"""

_EARLY_MAIN = r"""
int early_ok(void);
int main(void) { return early_ok() ? 0 : 1; }
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="an LD_PRELOAD shim: Linux only")
def test_the_keeper_serves_allocations_made_before_its_constructor(tmp_path):
    """A library initialized ahead of the shim may allocate in its constructor; the shim
    must pass that on, not fail it (perf, through GLib, aborted under the shim before)."""
    import os
    import shutil

    shim, cc = _keeper(), shutil.which("cc") or shutil.which("gcc")
    if shim is None or cc is None:
        pytest.skip("needs libkc_keep_large.so (pip install -e .) and a C compiler")
    (tmp_path / "early.c").write_text(_EARLY_LIB)
    (tmp_path / "main.c").write_text(_EARLY_MAIN)
    lib, exe = tmp_path / "libearly.so", tmp_path / "main"
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, tmp_path / "early.c"], check=True)
    subprocess.run([cc, "-o", exe, tmp_path / "main.c", f"-L{tmp_path}", "-learly"], check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "LD_PRELOAD": str(shim)}
    out = subprocess.run([exe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
