// metrics_cpu.cpp - kernelcheck's own comparison loops, one pass over memory instead of a dozen.
//
// kernelcheck/checks/metrics.py states every statistic as torch passes over a row chunk (the
// float64 error, its max and sum, the bad count, the ULP steps, their histogram, the column and
// row maxima). At the Qwen3 shape a gradient is 622M elements and those passes cost ~13 s per
// comparison on 2 cores; this file computes the same numbers reading each element once.
// The loop itself is in compare_rows.h (baseline and AVX2 copies, see there);
// kernelcheck/checks/fastpath.py calls it through ctypes and falls back to the torch passes
// whenever it does not apply (no library, a non-CPU tensor, any NaN/Inf in the chunk).
//
// Same numbers, by construction:
//  * err = |double(c) - g|, bad = err > atol + rtol * |g| (or err > atol when rtol is 0), rel =
//    err / max(|g|, 1e-12): the same double operations as the torch passes, built with
//    -ffp-contract=off so no multiply-add is fused.
//  * The gold is rounded to the candidate's dtype as torch rounds a float64 tensor: to float first,
//    then (bf16, fp16) to nearest even from the float.
//  * ULP steps are counted on magnitudes as metrics.step_distance does; 32-bit here (finite
//    magnitudes are below 0x7F800000, so even their sum fits), so no wrap.
//  * Every per-row result comes from one thread, visiting the row's columns in order; per-column
//    maxima and histogram counts are merged after the threads join (max and integer sums do not
//    depend on the order). Only the row sums of |err| differ from torch's (another summation
//    order), and they feed the reported mean error alone, never a verdict.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "compare_rows.h"
#include "kc_cpu_features.h"

#define KC_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kAbiVersion = 1;

// How many threads share rows x cols: up to `threads`, none for less than 64K elements each.
int64_t thread_count(int64_t rows, int64_t cols, int threads) {
  return std::min<int64_t>({std::max<int64_t>(1, threads), std::max<int64_t>(1, rows),
                            std::max<int64_t>(1, rows * cols / 65536)});
}

// Rows [k*rows/nt, (k+1)*rows/nt) to thread k; fn(k, r0, r1) for each, joined before returning
// (also when starting a thread fails: the started ones are joined, then the error goes on).
template <typename Fn>
void over_rows(int64_t rows, int64_t nt, Fn fn) {
  std::vector<std::thread> pool;
  try {
    for (int64_t k = 1; k < nt; ++k) pool.emplace_back(fn, k, k * rows / nt, (k + 1) * rows / nt);
  } catch (...) {
    for (auto& t : pool) t.join();
    throw;
  }
  fn(0, 0, rows / nt);
  for (auto& t : pool) t.join();
}

// Which copy of the loop runs: the AVX2 one where the build has it and the CPU can run it (both
// give the same numbers); kc_metrics_use_avx2(0) pins the baseline (the tests compare the two).
#if defined(KC_METRICS_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && kc_cpu_has_f16c();  // asked of the CPU (cpuid)
}
std::atomic<bool> g_avx2{cpu_has_avx2()};
#else
bool cpu_has_avx2() { return false; }
std::atomic<bool> g_avx2{false};
#endif

kc_metrics::CompareRows compare_for(int dtype) {
#if defined(KC_METRICS_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
  if (g_avx2.load()) return kc_metrics::compare_rows_avx2[dtype];
#endif
  return dtype == kFloat32    ? &compare_rows<kFloat32>
         : dtype == kBFloat16 ? &compare_rows<kBFloat16>
                              : &compare_rows<kFloat16>;
}

kc_metrics::DigestRows digest_for() {
#if defined(KC_METRICS_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
  if (g_avx2.load()) return kc_metrics::digest_rows_avx2;
#endif
  return &digest_rows;
}

}  // namespace

KC_API int kc_metrics_abi_version() { return kAbiVersion; }

// Compare a candidate chunk [rows, cols] (dtype: 0 fp32, 1 bf16, 2 fp16; contiguous) with its
// float64 gold [rows, cols] (contiguous). Per row r: row_out[4r..4r+3] = max |err|, sum |err|,
// max relative error, max |gold|; row_count[3r..3r+2] = bad elements, first bad column (-1:
// none), max ULP steps. col_max[cols] is max-merged with each column's max |err| and hist[34]
// gains the log2 ULP-step counts. Returns 1 (outputs incomplete) when any element of either is
// NaN/Inf, 2 on bad arguments, else 0.
static int compare_rows_impl(int dtype, const void* cand, const double* gold, int64_t rows,
                             int64_t cols, double atol, double rtol, int threads, double* row_out,
                             int64_t* row_count, double* col_max, int64_t* hist) {
  if (!cand || !gold || !row_out || !row_count || !col_max || !hist) return kBadArgs;
  if (rows < 0 || cols < 0 || dtype < kFloat32 || dtype > kFloat16) return kBadArgs;
  if (rows == 0 || cols == 0) return kOk;
  const int64_t nt = thread_count(rows, cols, threads);
  // the other threads' column maxima and counts, merged below; allocated here, in the
  // calling thread, whose heap keeps them between calls (a new thread's would fault them in)
  std::vector<double> cols_of((nt - 1) * cols, 0.0);
  std::vector<int64_t> hist_of((nt - 1) * kBuckets, 0);
  std::vector<char> ok(nt, 1);
  const kc_metrics::CompareRows compare = compare_for(dtype);
  over_rows(rows, nt, [&](int64_t k, int64_t r0, int64_t r1) {
    double* cm = k ? cols_of.data() + (k - 1) * cols : col_max;
    int64_t* h = k ? hist_of.data() + (k - 1) * kBuckets : hist;
    try {  // nothing may leave a thread: it would end the process
      ok[k] = compare(cand, gold, r0, r1, cols, atol, rtol, row_out, row_count, cm, h);
    } catch (...) {
      ok[k] = 0;  // reported as incomplete: the caller takes the torch passes
    }
  });
  for (int64_t k = 1; k < nt; ++k) {
    if (!ok[k]) return kNonFinite;
    const double* cm = cols_of.data() + (k - 1) * cols;
    for (int64_t j = 0; j < cols; ++j) col_max[j] = std::max(col_max[j], cm[j]);
    for (int b = 0; b < kBuckets; ++b) hist[b] += hist_of[(k - 1) * kBuckets + b];
  }
  return ok[0] ? kOk : kNonFinite;
}

// One 32-bit digest per row of [rows, cols] elements of elem_bytes (2, 4 or 8; contiguous):
// sum(word[i] * weights[i]) mod 2^32 over the row's 32-bit words, as metrics.row_digests
// takes them (a 2-byte element is one word, sign-extended; an 8-byte one two, low word first).
static int row_digests_impl(const void* data, int elem_bytes, int64_t rows, int64_t cols,
                            const int32_t* weights, int threads, int32_t* out) {
  if (!data || !weights || !out || rows < 0 || cols < 0) return kBadArgs;
  if (elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8) return kBadArgs;
  const int64_t words = elem_bytes == 8 ? 2 * cols : cols;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(weights);
  const kc_metrics::DigestRows digest = digest_for();
  over_rows(rows, thread_count(rows, words, threads), [&](int64_t, int64_t r0, int64_t r1) {
    digest(data, elem_bytes, r0, r1, cols, w, out);
  });
  return kOk;
}

// The entry points: an exception (a thread or a vector that cannot be had) must never cross
// the C ABI; it becomes kBadArgs and the caller takes the torch passes.
KC_API int kc_compare_rows(int dtype, const void* cand, const double* gold, int64_t rows,
                           int64_t cols, double atol, double rtol, int threads, double* row_out,
                           int64_t* row_count, double* col_max, int64_t* hist) {
  try {
    return compare_rows_impl(dtype, cand, gold, rows, cols, atol, rtol, threads, row_out, row_count,
                             col_max, hist);
  } catch (...) {
    return kBadArgs;
  }
}

KC_API int kc_row_digests(const void* data, int elem_bytes, int64_t rows, int64_t cols,
                          const int32_t* weights, int threads, int32_t* out) {
  try {
    return row_digests_impl(data, elem_bytes, rows, cols, weights, threads, out);
  } catch (...) {
    return kBadArgs;
  }
}

// Use the AVX2 copy of the comparison loop (on: 1) or the baseline one (0), when the build and
// the CPU have AVX2; returns whether the AVX2 copy is in use now. A negative value only asks.
KC_API int kc_metrics_use_avx2(int on) {
  if (on >= 0) g_avx2.store(on != 0 && cpu_has_avx2());
  return g_avx2.load() ? 1 : 0;
}
