// metrics_cpu.cpp - kernelcheck's own comparison loops, one pass over memory instead of a dozen.
//
// kernelcheck/checks/metrics.py states every statistic as torch passes over a row chunk (the
// float64 error, its max and sum, the bad count, the ULP steps, their histogram, the column and
// row maxima). At the Qwen3 shape a gradient is 622M elements and those passes cost ~13 s per
// comparison on 2 cores; this file computes the same numbers reading each element once.
// kernelcheck/checks/fastpath.py calls it through ctypes and falls back to the torch passes
// whenever it does not apply (no library, a non-CPU tensor, any NaN/Inf in the chunk).
//
// Same numbers, by construction:
//  * err = |double(c) - g|, bad = err > atol + rtol * |g| (or err > atol when rtol is 0), rel =
//    err / max(|g|, 1e-12): the same double operations as the torch passes, built with
//    -ffp-contract=off so no multiply-add is fused.
//  * The gold is rounded to the candidate's dtype as torch rounds a float64 tensor: to float first,
//    then (bf16, fp16) to nearest even from the float.
//  * ULP steps are counted on magnitudes as metrics.step_distance does; 64-bit here, so no wrap.
//  * Every per-row result comes from one thread, visiting the row's columns in order; per-column
//    maxima and histogram counts are merged after the threads join (max and integer sums do not
//    depend on the order). Only the row sums of |err| differ from torch's (another summation
//    order), and they feed the reported mean error alone, never a verdict.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#define KC_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kAbiVersion = 1;
constexpr int kBuckets = 34;  // metrics.ULP_BUCKETS: [0] exact, [k] bit length k of the steps
enum Dtype { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
enum Status { kOk = 0, kNonFinite = 1, kBadArgs = 2 };

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float -> bfloat16 bits, round to nearest even (c10::BFloat16's rounding).
inline uint16_t bf16_from_float(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// float -> IEEE half bits, round to nearest even, subnormals and overflow to inf included.
inline uint16_t f16_from_float(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00;  // 65520 and up round to inf
  if (a < 0x38800000u) {                       // below 2^-14: a half subnormal (or zero)
    // units of 2^-24, rounded to nearest even; 1024 units is the smallest normal's encoding
    return sign | static_cast<uint16_t>(std::nearbyint(bits_float(a) * 16777216.0f));
  }
  uint32_t h = (a - 0x38000000u) >> 13;  // exponent rebias (127 - 15) and 10 mantissa bits
  uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves the exponent up
  return sign | static_cast<uint16_t>(h);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // exact: man * 2^-24
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7F800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// The candidate element as float, and its bits and the rounded gold's bits as signed ints of
// the candidate dtype's width, sign-extended to 32 bits (as metrics.step_distance views them).
struct Element {
  float value;
  int32_t cand_bits;
  int32_t gold_bits;
};

template <int D>
inline Element element(const void* cand, int64_t j, double gold) {
  float g = static_cast<float>(gold);
  if constexpr (D == kFloat32) {
    float c = static_cast<const float*>(cand)[j];
    return {c, static_cast<int32_t>(float_bits(c)), static_cast<int32_t>(float_bits(g))};
  } else if constexpr (D == kBFloat16) {
    uint16_t c = static_cast<const uint16_t*>(cand)[j];
    return {bits_float(static_cast<uint32_t>(c) << 16), static_cast<int16_t>(c),
            static_cast<int16_t>(bf16_from_float(g))};
  } else {
    uint16_t c = static_cast<const uint16_t*>(cand)[j];
    return {f16_to_float(c), static_cast<int16_t>(c), static_cast<int16_t>(f16_from_float(g))};
  }
}

struct RowStats {
  double max_abs = 0, sum_abs = 0, max_rel = 0, gold_absmax = 0;
  int64_t n_bad = 0, first_bad = -1;
  uint64_t max_steps = 0;
};

// Four histograms, element j counted in copy j % 4: consecutive elements mostly land in the
// same bucket, and four copies keep their increments from waiting on each other.
using Histograms = int64_t[4][kBuckets];

// Columns [j0, j1) of one row into its running statistics. False when an element is NaN/Inf.
template <int D>
bool compare_columns(const void* cand, const double* gold, int64_t j0, int64_t j1, double atol,
                     double rtol, double* col_max, Histograms& hist, RowStats& s) {
  constexpr uint32_t kMagnitude = D == kFloat32 ? 0x7FFFFFFFu : 0x7FFFu;
  // The row's running values in locals: stores to col_max and hist may alias a RowStats field
  // as far as the compiler knows, and it would load and store each of them on every element.
  double max_abs = s.max_abs, max_rel = s.max_rel, gold_absmax = s.gold_absmax;
  int64_t n_bad = s.n_bad, first_bad = s.first_bad;
  uint64_t max_steps = s.max_steps;
  // |err| summed in four interleaved partial sums (element j into sum[j % 4]), added to the
  // row's sum per block: one chain of dependent additions would cost an add latency per
  // element. The order depends on the columns and kBlockColumns alone, never on threads.
  double sum[4] = {0.0, 0.0, 0.0, 0.0};
  for (int64_t j = j0; j < j1; ++j) {
    const double g = gold[j];
    const Element e = element<D>(cand, j, g);
    if (!std::isfinite(e.value) || !std::isfinite(g)) return false;  // redone by torch passes
    const double err = std::fabs(static_cast<double>(e.value) - g);
    const double gabs = std::fabs(g);
    const bool bad = rtol != 0.0 ? err > gabs * rtol + atol : err > atol;
    if (bad) {
      if (first_bad < 0) first_bad = j;
      ++n_bad;
    }
    max_abs = std::max(max_abs, err);
    sum[j & 3] += err;
    gold_absmax = std::max(gold_absmax, gabs);
    // the relative error is divided out only where it may be a new maximum (the margin
    // covers the product's rounding), so the maximum is the exact max of err / |g|
    const double denom = std::max(gabs, 1e-12);
    if (err > max_rel * denom * (1 - 1e-12)) max_rel = std::max(max_rel, err / denom);
    col_max[j] = std::max(col_max[j], err);
    // steps between magnitudes: their difference when the signs agree, else their sum;
    // blended without branches (which way a comparison goes is a coin toss per element)
    const int64_t mc = static_cast<uint32_t>(e.cand_bits) & kMagnitude;
    const int64_t mg = static_cast<uint32_t>(e.gold_bits) & kMagnitude;
    const int64_t diff = mc - mg;
    const int64_t sign = diff >> 63;  // -1 when mg > mc
    const uint64_t differ = static_cast<uint64_t>((e.cand_bits ^ e.gold_bits) >> 31);  // all ones
    const uint64_t steps = (static_cast<uint64_t>(mc + mg) & differ) |
                           (static_cast<uint64_t>((diff ^ sign) - sign) & ~differ);
    // the bit length of steps (0 for none), without a branch: whether an element is exact
    // is a coin toss, and a mispredicted branch per element cost more than the rest
    const int length = static_cast<int>(steps != 0) * (64 - __builtin_clzll(steps | 1));
    ++hist[j & 3][length];
    max_steps = std::max(max_steps, steps);
  }
  s.max_abs = max_abs;
  s.max_rel = max_rel;
  s.gold_absmax = gold_absmax;
  s.sum_abs += (sum[0] + sum[1]) + (sum[2] + sum[3]);
  s.n_bad = n_bad;
  s.first_bad = first_bad;
  s.max_steps = max_steps;
  return true;
}

// Rows [r0, r1), in blocks of kBlockColumns columns across all the rows: the block's slice of
// col_max stays in cache instead of streaming a 1.2 MB array per row.
constexpr int64_t kBlockColumns = 4096;

template <int D>
bool compare_rows(const void* cand, const double* gold, int64_t r0, int64_t r1, int64_t cols,
                  double atol, double rtol, double* row_out, int64_t* row_count, double* col_max,
                  int64_t* hist) {
  const int64_t elem = D == kFloat32 ? 4 : 2;
  std::vector<RowStats> stats(r1 - r0);
  Histograms h = {};
  for (int64_t j0 = 0; j0 < cols; j0 += kBlockColumns) {
    const int64_t j1 = std::min(cols, j0 + kBlockColumns);
    for (int64_t r = r0; r < r1; ++r) {
      const void* crow = static_cast<const char*>(cand) + r * cols * elem;
      if (!compare_columns<D>(crow, gold + r * cols, j0, j1, atol, rtol, col_max, h, stats[r - r0]))
        return false;
    }
  }
  for (int64_t r = r0; r < r1; ++r) {
    const RowStats& s = stats[r - r0];
    double* o = row_out + 4 * r;
    o[0] = s.max_abs;
    o[1] = s.sum_abs;
    o[2] = s.max_rel;
    o[3] = s.gold_absmax;
    int64_t* n = row_count + 3 * r;
    n[0] = s.n_bad;
    n[1] = s.first_bad;
    n[2] = static_cast<int64_t>(s.max_steps);
  }
  for (int b = 0; b < kBuckets; ++b) hist[b] += h[0][b] + h[1][b] + h[2][b] + h[3][b];
  return true;
}

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
  auto* compare = dtype == kFloat32    ? &compare_rows<kFloat32>
                  : dtype == kBFloat16 ? &compare_rows<kBFloat16>
                                       : &compare_rows<kFloat16>;
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
  over_rows(rows, thread_count(rows, words, threads), [&](int64_t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint32_t sum = 0;  // unsigned: wraps mod 2^32 as torch's int32 sum does
      if (elem_bytes == 2) {
        const int16_t* row = static_cast<const int16_t*>(data) + r * cols;
        for (int64_t i = 0; i < words; ++i) sum += static_cast<uint32_t>(row[i]) * w[i];
      } else {
        const uint32_t* row = static_cast<const uint32_t*>(data) + r * words;
        for (int64_t i = 0; i < words; ++i) sum += row[i] * w[i];
      }
      out[r] = static_cast<int32_t>(sum);
    }
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
