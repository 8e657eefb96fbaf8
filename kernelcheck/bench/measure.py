"""Time an op's candidates side by side and relate their speed to the memory bandwidth.

This is the library behind ``kernelcheck bench``; nothing here prints.

Method (after Triton's ``do_bench``, adapted to also serve the CPU and the NPU):

- forward only, under ``torch.no_grad()``;
- a few warm-up calls per candidate (first-call costs: imports, library loading,
  allocator growth, kernel caches);
- then the candidates are timed *interleaved*, one call of each in turn with the order
  rotated every round, so a slow drift of the machine (frequency, other load) falls on
  all of them alike: that is what "side by side in one run" means here;
- each timed call reads an input set that the previous call did not touch: a small pool
  of distinct seeded sets is generated up front and rotated, and, where a set is small
  enough to sit in a cache, the cache is flushed by writing a large buffer before the
  call (outside the timed region). On CUDA the L2 is flushed before every call;
- on the CPU a call is timed with ``time.perf_counter_ns``; on CUDA with a pair of
  ``torch.cuda.Event(enable_timing=True)`` around it, read after a synchronize; on the
  NPU with a synchronize before and after and ``perf_counter_ns``;
- each candidate gets at least ``reps`` timed calls and at least ``min_time_s`` of timed
  calls (estimated from the warm-up), at most ``max_reps``;
- the report gives the median, p10, p90 and min of the timed calls.

Bandwidth counts the bytes the op must move at the least: each input read once plus
each output written once (for ``logp``: logits ``numel * element_size``, targets
``numel * 8``, output ``numel * 4``), divided by the median time. The peak it is
compared with is measured on the CPU (a streaming read of a large buffer) and taken
from a table by device name on a GPU or NPU.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import torch

from kernelcheck import candidates, dtypes
from kernelcheck.candidates import devices
from kernelcheck.cases.inputs import make_inputs
from kernelcheck.errors import UsageError
from kernelcheck.memory import available_memory_bytes
from kernelcheck.runner.case import with_attributes
from kernelcheck.spec.load import Catalog
from kernelcheck.spec.model import OpSpec

DEFAULT_REPS = 20
DEFAULT_WARMUP = 3
DEFAULT_MIN_TIME_S = 1.0
DEFAULT_MAX_REPS = 1000
POOL_MAX = 3  # distinct input sets rotated between timed calls
# ratios are against plain eager PyTorch (log_softmax + gather) when it ran, which is what
# a fused kernel replaces; else the fixed-order torch candidate; else the fastest
BASELINES = ("eager", "torch")
UNSTABLE_SPREAD = 2.0  # p90/p10 above this: the timing is noisy, say so

MIB = 1024 * 1024
GPU_FLUSH_BYTES = 256 * MIB  # well above the L2 of any current GPU (H100/H200: 50 MiB)

# Peak memory bandwidth in bytes/s by device name, first match wins (case-insensitive
# substring), so a name that contains another (GH200 > H200 > H20, A100 > A10, L40 > L4)
# comes first. Vendor data-sheet figures.
GPU_PEAK_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    ("GB200", 8.0e12, "NVIDIA GB200 (HBM3e), 8.0 TB/s"),
    ("B200", 8.0e12, "NVIDIA B200 (HBM3e), 8.0 TB/s"),
    ("B100", 8.0e12, "NVIDIA B100 (HBM3e), 8.0 TB/s"),
    ("GH200 144G", 4.9e12, "NVIDIA GH200 144GB HBM3e, 4.9 TB/s"),
    ("GH200", 4.0e12, "NVIDIA GH200 96GB HBM3, 4.0 TB/s"),
    ("H200", 4.8e12, "NVIDIA H200 (HBM3e), 4.8 TB/s"),
    ("H20", 4.0e12, "NVIDIA H20 (HBM3), 4.0 TB/s"),
    ("H100 NVL", 3.9e12, "NVIDIA H100 NVL, 3.9 TB/s"),
    ("H100 PCIe", 2.0e12, "NVIDIA H100 PCIe, 2.0 TB/s"),
    ("H100 SXM", 3.35e12, "NVIDIA H100 SXM, 3.35 TB/s"),
    ("H100 80GB HBM3", 3.35e12, "NVIDIA H100 SXM (80GB HBM3), 3.35 TB/s"),
    ("H800", 3.35e12, "NVIDIA H800 SXM, 3.35 TB/s"),
    ("A100-SXM4-80GB", 2.039e12, "NVIDIA A100 SXM 80GB, 2.039 TB/s"),
    ("A100 80GB PCIe", 1.935e12, "NVIDIA A100 PCIe 80GB, 1.935 TB/s"),
    ("A100-PCIE-80GB", 1.935e12, "NVIDIA A100 PCIe 80GB, 1.935 TB/s"),
    ("A100", 1.555e12, "NVIDIA A100 40GB, 1.555 TB/s"),
    ("A800", 2.039e12, "NVIDIA A800 80GB, 2.039 TB/s"),
    ("A10G", 0.6e12, "NVIDIA A10G, 600 GB/s"),
    ("A10", 0.6e12, "NVIDIA A10, 600 GB/s"),
    ("L40S", 0.864e12, "NVIDIA L40S, 864 GB/s"),
    ("L40", 0.864e12, "NVIDIA L40, 864 GB/s"),
    ("L4", 0.3e12, "NVIDIA L4, 300 GB/s"),
    ("RTX 4090", 1.008e12, "NVIDIA GeForce RTX 4090, 1.008 TB/s"),
    ("V100", 0.9e12, "NVIDIA V100 (HBM2), 900 GB/s"),
    ("T4", 0.32e12, "NVIDIA T4, 320 GB/s"),
    ("MI300X", 5.3e12, "AMD Instinct MI300X, 5.3 TB/s"),
    ("MI250X", 3.2e12, "AMD Instinct MI250X, 3.2 TB/s"),
)
NPU_PEAK_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    ("910B", 1.6e12, "Ascend 910B (HBM2e), ~1.6 TB/s"),
    ("910", 1.2e12, "Ascend 910 (HBM2), ~1.2 TB/s"),
)


@dataclass
class BenchResult:
    """One candidate x dtype x shape. Times are seconds; ``None`` when the candidate erred."""

    op: str
    candidate: str
    implementation: str
    device: str
    dtype: str
    shape: dict
    median_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    min_s: float | None = None
    reps: int = 0
    bytes: int = 0
    gbps: float | None = None
    fraction_of_peak: float | None = None
    baseline: str | None = None  # the candidate the ratio is against (torch, else fastest)
    speedup_vs_baseline: float | None = None  # baseline median / this median (> 1: faster)
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchReport:
    op: str
    device: str
    device_name: str
    peak_bandwidth_bytes_per_s: float | None
    peak_source: str
    results: list[BenchResult] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    @property
    def errored(self) -> bool:
        return any(r.error for r in self.results)


# ---------------------------------------------------------------------------- peak bandwidth


def _peak_from_table(name: str, table, kind: str) -> tuple[float | None, str]:
    """The data-sheet bandwidth of a device by (a substring of) its name, else None and why."""
    low = name.lower()
    for key, bw, what in table:
        if key.lower() in low:
            return bw, f"table: {what} (device {name!r})"
    return None, f"no bandwidth table entry for {kind} {name!r}"


def gpu_peak_from_name(name: str) -> tuple[float | None, str]:
    return _peak_from_table(name, GPU_PEAK_BANDWIDTH, "GPU")


def npu_peak_from_name(name: str) -> tuple[float | None, str]:
    return _peak_from_table(name, NPU_PEAK_BANDWIDTH, "NPU")


def peak_bandwidth(device: str) -> tuple[float | None, str]:
    """Peak memory bandwidth of ``device`` in bytes/s and where the figure came from.

    cpu: measured here once per process (a streaming read, :func:`measure_cpu_read_bandwidth`);
    cuda / npu: the table by device name; None with the reason when it is not known.
    """
    if device == "cpu":
        return _cpu_peak()
    tables = {"cuda": (GPU_PEAK_BANDWIDTH, "GPU"), "npu": (NPU_PEAK_BANDWIDTH, "NPU")}
    if device in tables:
        table, kind = tables[device]
        try:
            name = getattr(torch, device).get_device_name(0)  # torch.npu: from torch_npu
        except Exception as exc:
            return None, f"{kind} name not readable: {exc}"
        return _peak_from_table(name, table, kind)
    return None, f"no bandwidth figure for device {device!r}"


@lru_cache(maxsize=1)
def _cpu_peak() -> tuple[float | None, str]:
    """Measured once per run; the source says the spread of its runs."""
    avail = available_memory_bytes()
    nbytes = 512 * MIB if avail is None else min(512 * MIB, max(64 * MIB, avail // 16))
    try:
        rates = sorted(measure_cpu_read_rates(nbytes))
    except (RuntimeError, MemoryError) as exc:
        return None, f"streaming read failed: {exc}"
    best, worst, mid = rates[-1], rates[0], rates[len(rates) // 2]
    return best, (
        f"measured once: streaming read of {nbytes // MIB} MiB fp32, best of {len(rates)} "
        f"sum/amax runs on {torch.get_num_threads()} threads; runs spread "
        f"{worst / 1e9:.1f}-{best / 1e9:.1f} GB/s, median {mid / 1e9:.1f}"
    )


def measure_cpu_read_bandwidth(
    nbytes: int | None = None, runs: int = 5, min_bytes: int = 64 * MIB
) -> tuple[float, int]:
    """Bytes/s of a read-only reduction over a large buffer: (best rate, buffer size).

    512 MiB (or a sixteenth of the available memory, if less): far beyond any last-level
    cache, so the rate is the memory's. Full reductions (``sum``, ``amax``) read every
    element once and write nothing, on torch's intra-op threads, like a row-wise kernel.
    The best of ``runs`` of each is kept: interference only ever slows a run down.
    """
    if nbytes is None:
        avail = available_memory_bytes()
        nbytes = 512 * MIB if avail is None else min(512 * MIB, max(min_bytes, avail // 16))
    rates = measure_cpu_read_rates(nbytes, runs)
    return max(rates), _LAST_BYTES[0]


_LAST_BYTES = [0]


def measure_cpu_read_rates(nbytes: int, runs: int = 5) -> list[float]:
    """Every run's bytes/s of :func:`measure_cpu_read_bandwidth` (its spread is reported)."""
    numel = max(1, nbytes // 4)
    _LAST_BYTES[0] = numel * 4
    buf = torch.ones(numel, dtype=torch.float32)  # written once: every page is mapped
    rates = []
    with torch.no_grad():
        for reduce in (torch.sum, torch.amax):
            reduce(buf)  # warm-up
            for _ in range(runs):
                t0 = time.perf_counter_ns()
                reduce(buf)
                rates.append(numel * 4 / max(1e-9, (time.perf_counter_ns() - t0) * 1e-9))
    del buf
    return rates


def _cpu_last_level_cache() -> int:
    """Bytes of the largest CPU cache (sysfs), 64 MiB when it cannot be read."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as fh:
                    text = fh.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best or 64 * MIB


def device_name(device: str) -> str:
    try:
        if device == "cuda":
            return torch.cuda.get_device_name(0)
        if device == "npu":
            return torch.npu.get_device_name(0)
    except Exception as exc:
        return f"unknown ({exc})"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------------------- timing


def model_bytes(op: OpSpec, inputs: dict[str, torch.Tensor], sizes: dict[str, int]) -> int:
    """Each input read once plus each output written once, in the spec's dtypes."""
    total = sum(t.numel() * t.element_size() for t in inputs.values())
    for out in op.outputs:
        numel = math.prod(sizes[d] for d in out.shape if d in sizes)
        if out.dtype.startswith("like:"):
            itemsize = inputs[out.dtype.removeprefix("like:")].element_size()
        else:
            itemsize = torch.empty((), dtype=dtypes.FIXED_DTYPES[out.dtype]).element_size()
        total += numel * itemsize
    return total


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class _Timer:
    """Times one call on a device; ``flush`` runs before the call, outside the timed region."""

    def __init__(self, device: str, flush_bytes: int):
        self.device = device
        tdev = devices.torch_device(device)
        self._flush_buf = (
            torch.empty(flush_bytes // 4, dtype=torch.int32, device=tdev) if flush_bytes else None
        )
        self._pending: list[tuple[object, object]] = []  # cuda: (start, end) events

    def flush(self) -> None:
        if self._flush_buf is not None:
            self._flush_buf.zero_()

    def time_call(self, fn: Callable[[], object]) -> float | None:
        """Seconds of one call; None on CUDA, where :meth:`collect` reads the events later."""
        if self.device == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            self._pending.append((start, end))
            return None
        if self.device == "npu":
            devices.synchronize("npu")
            t0 = time.perf_counter_ns()
            fn()
            devices.synchronize("npu")
            return (time.perf_counter_ns() - t0) * 1e-9
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) * 1e-9

    def discard(self) -> None:
        self._pending.clear()

    def collect(self) -> list[float]:
        """CUDA: synchronize, then the elapsed seconds of the calls timed since last collect."""
        devices.synchronize(self.device)
        out = [s.elapsed_time(e) * 1e-3 for s, e in self._pending]
        self._pending.clear()
        return out


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _pool_size(set_bytes: int, device: str, pool_max: int) -> int:
    """How many distinct input sets fit: a quarter of the free (host or device) memory."""
    if device == "cuda":
        try:
            free = torch.cuda.mem_get_info()[0]
        except Exception:
            free = None
    else:
        free = available_memory_bytes()
    if free is None or set_bytes <= 0:
        return pool_max
    return max(1, min(pool_max, int(free // 4 // set_bytes)))


def _make_pool(op: OpSpec, sizes: dict, dtype: str, device: str, n: int, first: dict) -> list[dict]:
    """``n`` input sets on the device: ``first`` (seed 0), then seeds 1 .. n-1."""
    tdev = devices.torch_device(device)
    pool = [{k: v.to(tdev) for k, v in first.items()}]
    for seed in range(1, n):
        cpu_inputs = make_inputs(op, sizes, dtype, seed, "normal")
        pool.append({k: v.to(tdev) for k, v in cpu_inputs.items()})
        del cpu_inputs
    return pool


def bench(
    catalog: Catalog,
    op: str,
    candidate_names: Iterable[str] | None = None,
    device: str = "auto",
    dtype_names: Iterable[str] | str | None = None,
    shape: dict[str, int] | None = None,
    warmup: int = DEFAULT_WARMUP,
    reps: int = DEFAULT_REPS,
    min_time_s: float = DEFAULT_MIN_TIME_S,
    max_reps: int = DEFAULT_MAX_REPS,
    pool_max: int = POOL_MAX,
    on_progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Time every runnable candidate (or the named ones) at each dtype x shape.

    Names, devices, dtypes and shapes are validated exactly as ``kernelcheck run`` does
    (:func:`kernelcheck.api.plan`; raises :class:`UsageError`). A candidate that cannot be
    imported or raises is reported with ``error`` set; it never stops the others.
    """
    from kernelcheck import api
    from kernelcheck.results import environment

    if warmup < 0:
        raise UsageError(f"--warmup: expected an integer >= 0, got {warmup}")
    if reps < 1:
        raise UsageError(f"--reps: expected an integer >= 1, got {reps}")
    plan = api.plan(
        catalog,
        op,
        candidate_names=candidate_names,
        device=device,
        dtype_names=dtype_names,
        shape=shape,
        check_names=None,
        check_grad=False,
        include_bench_only=True,
    )
    dev = plan.device
    if not plan.cases:
        why = "; ".join(f"{k}: {v}" for k, v in plan.unavailable.items()) or "none declared"
        raise UsageError(f"no candidate of {op} can run on {dev} ({why})")
    peak, source = peak_bandwidth(dev)
    env = environment()
    env.update(device_name=device_name(dev), torch_threads=torch.get_num_threads())
    report = BenchReport(
        plan.op.name,
        dev,
        env["device_name"],
        peak,
        source,
        environment=env,
        settings={
            "warmup": warmup,
            "reps": reps,
            "min_time_s": min_time_s,
            "max_reps": max_reps,
            "baseline": f"{' when it ran, else '.join(BASELINES)}, else the fastest",
            "unavailable": dict(plan.unavailable),
        },
    )

    # Group the plan's cases by (dtype, shape), keeping the plan's order.
    groups: dict[tuple, list] = {}
    for case in plan.cases:
        groups.setdefault((case.dtype, case.shape), []).append(case.candidate)
    for (dtype, shape_items), names in groups.items():
        sizes = dict(shape_items)
        if on_progress:
            on_progress(f"{dtype} {'x'.join(str(v) for v in sizes.values())}: {', '.join(names)}")
        op = plan.op
        for name in names:  # one kernel promised in-range ids (in_range): all get them
            op = op.for_candidate(name)
        results = _bench_group(
            op, names, dev, dtype, sizes, warmup, reps, min_time_s, max_reps, pool_max, peak
        )
        _set_ratios(results)
        report.results.extend(results)
    return report


def _bench_group(
    op: OpSpec,
    names: list[str],
    dev: str,
    dtype: str,
    sizes: dict,
    warmup: int,
    reps: int,
    min_time_s: float,
    max_reps: int,
    pool_max: int,
    peak: float | None,
) -> list[BenchResult]:
    results = {
        n: BenchResult(op.name, n, op.candidates[n].callable, dev, dtype, dict(sizes))
        for n in names
    }
    fns = _load_candidates(op, names, results)
    first = make_inputs(op, sizes, dtype, 0, "normal")
    set_bytes = sum(t.numel() * t.element_size() for t in first.values())
    nbytes = model_bytes(op, first, sizes)
    for r in results.values():
        r.bytes = nbytes
    # Distinct input sets, rotated so no timed call reads the set the previous call just
    # read. At N=512, V=151936 one fp32 set is 311 MB, several times any CPU's last-level
    # cache, so a set is evicted long before it comes round again; small sets could sit in
    # a cache, so then a flush buffer (twice the cache) is written before every call.
    # When only one set fits in memory it is necessarily far larger than any cache.
    pool_n = _pool_size(set_bytes, dev, pool_max)
    pool = _make_pool(op, sizes, dtype, dev, pool_n, first)
    del first
    flush_bytes = _flush_bytes(dev, set_bytes)
    caller = _Rotation(fns, pool, _Timer(dev, flush_bytes))
    flush_s = caller.flush_seconds(dev) if flush_bytes else 0.0
    with torch.no_grad():
        targets = _warm_up(caller, results, warmup, flush_s, reps, min_time_s, max_reps)
        samples = _timed_rounds(caller, names, targets, results)
    pool.clear()  # free the input sets before the next dtype x shape
    return [_summary(results[n], samples.get(n, []), peak) for n in names]


def _load_candidates(
    op: OpSpec, names: list[str], results: dict[str, BenchResult]
) -> dict[str, Callable]:
    """The candidates that load, at the op's default attributes (a failure is recorded)."""
    fns: dict[str, Callable] = {}
    for n in names:
        try:
            loaded = candidates.load(op.candidates[n])
        except Exception as exc:
            results[n].error = f"import failed: {_error_text(exc)}"
            continue
        results[n].implementation = loaded.implementation
        # the op's attributes at their first (default) values; switches stay off
        defaults = {k: v[0] for k, v in op.attributes.items() if k not in op.switches}
        fns[n] = with_attributes(loaded.fn, defaults)
    return fns


def _flush_bytes(dev: str, set_bytes: int) -> int:
    """The cache flush written before each call: none when a set cannot stay cached."""
    if dev == "cuda":
        return GPU_FLUSH_BYTES
    if dev == "cpu":
        llc = _cpu_last_level_cache()
        return min(256 * MIB, 2 * llc) if set_bytes < 2 * llc else 0
    return 0  # npu: no portable flush; the rotating pool still applies


class _Rotation:
    """Calls the candidates on the input pool's sets in turn, the cache flushed first."""

    def __init__(self, fns: dict[str, Callable], pool: list, timer: _Timer):
        self.fns, self.pool, self.timer, self.calls = fns, pool, timer, 0

    def call(self, n: str, timed: bool) -> float | None:
        inputs = self.pool[self.calls % len(self.pool)]
        self.calls += 1
        self.timer.flush()
        fn = self.fns[n]
        if timed:
            return self.timer.time_call(lambda: fn(**inputs))
        fn(**inputs)
        return None

    def flush_seconds(self, dev: str) -> float:
        """One flush's time (it bounds the timed loop with the calls)."""
        self.timer.flush()
        devices.synchronize(dev)
        t0 = time.perf_counter_ns()
        self.timer.flush()
        devices.synchronize(dev)
        return (time.perf_counter_ns() - t0) * 1e-9


def _warm_up(
    caller: _Rotation,
    results: dict[str, BenchResult],
    warmup: int,
    flush_s: float,
    reps: int,
    min_time_s: float,
    max_reps: int,
) -> dict[str, int]:
    """Warm-up, and each candidate's number of timed calls from an estimate of one call's
    time (the last warm-up calls). A candidate that raises is dropped with its error."""
    targets: dict[str, int] = {}
    for n in list(caller.fns):
        try:
            for _ in range(warmup):
                caller.call(n, timed=False)
            est = []
            for _ in range(2):
                t = caller.call(n, timed=True)
                est.extend([t] if t is not None else caller.timer.collect())
        except Exception as exc:
            results[n].error = _error_text(exc)
            caller.timer.discard()
            del caller.fns[n]
            continue
        # min_time_s bounds the loop's wall time, flushes included: a tiny call
        # after a 100 MiB flush must not run max_reps times for 1 ms of timing.
        per_rep = max(min(est), 1e-7) + flush_s
        targets[n] = min(max_reps, max(reps, math.ceil(min_time_s / per_rep)))
    return targets


def _timed_rounds(
    caller: _Rotation, names: list[str], targets: dict[str, int], results: dict
) -> dict[str, list[float]]:
    """Interleaved timed calls, the candidates' order rotated every round."""
    fns = caller.fns
    samples: dict[str, list[float]] = {n: [] for n in fns}
    order = [n for n in names if n in fns]
    rounds = max(targets.values(), default=0)
    for i in range(rounds):
        k = i % len(order) if order else 0
        for n in order[k:] + order[:k]:
            if n not in fns or len(samples[n]) >= targets[n]:
                continue
            try:
                t = caller.call(n, timed=True)
                if t is None:
                    t = caller.timer.collect()[0]
            except Exception as exc:
                results[n].error = _error_text(exc)
                del fns[n]
                continue
            samples[n].append(t)
    return samples


def _summary(r: BenchResult, samples: list[float], peak: float | None) -> BenchResult:
    """``r`` with its timing statistics (or why there are none)."""
    ts = sorted(samples)
    if r.error is None and ts:
        r.reps = len(ts)
        r.median_s = quantile(ts, 0.5)
        r.p10_s = quantile(ts, 0.1)
        r.p90_s = quantile(ts, 0.9)
        r.min_s = ts[0]
        if r.median_s > 0:
            r.gbps = r.bytes / r.median_s / 1e9
            if peak:
                r.fraction_of_peak = r.bytes / r.median_s / peak
    elif r.error is None:
        r.error = "no timed calls"
    return r


def _set_ratios(results: list[BenchResult]) -> None:
    """``speedup_vs_baseline`` = baseline median / median: eager, else torch, else fastest."""
    ok = [r for r in results if r.error is None and r.median_s]
    if not ok:
        return
    base = next((r for name in BASELINES for r in ok if r.candidate == name), None)
    if base is None:
        base = min(ok, key=lambda r: r.median_s)
    for r in ok:
        r.baseline = base.candidate
        r.speedup_vs_baseline = base.median_s / r.median_s


__all__ = [
    "BenchReport",
    "BenchResult",
    "bench",
    "gpu_peak_from_name",
    "measure_cpu_read_bandwidth",
    "npu_peak_from_name",
    "peak_bandwidth",
]
