"""``kernelcheck bench``: time an op's candidates side by side against the bandwidth.

One home for the concept: :mod:`~kernelcheck.bench.measure` times the candidates and
finds the peak bandwidth, :mod:`~kernelcheck.bench.render` prints and serialises the
result; the ``bench`` command (:mod:`kernelcheck.commands.bench`) is a thin shell.
"""

from kernelcheck.bench.measure import (
    BASELINES,
    UNSTABLE_SPREAD,
    BenchReport,
    BenchResult,
    bench,
    gpu_peak_from_name,
    measure_cpu_read_bandwidth,
    npu_peak_from_name,
    peak_bandwidth,
)
from kernelcheck.bench.render import (
    RESULT_KEYS,
    TOP_KEYS,
    bench_to_dict,
    bench_to_json,
    render_bench_table,
    spread_warnings,
)

__all__ = [
    "BASELINES",
    "RESULT_KEYS",
    "TOP_KEYS",
    "UNSTABLE_SPREAD",
    "BenchReport",
    "BenchResult",
    "bench",
    "bench_to_dict",
    "bench_to_json",
    "gpu_peak_from_name",
    "measure_cpu_read_bandwidth",
    "npu_peak_from_name",
    "peak_bandwidth",
    "render_bench_table",
    "spread_warnings",
]
