"""Whether tensors mapped from files were ever written, from ``/proc/self/smaps``.

The trial store maps its parts privately (``cases/trial_store.py``); a check that lets a
candidate run on such tensors asks here afterwards whether it wrote them.
"""

from __future__ import annotations


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
