// compare_rows.h - the loops of libkc_metrics_cpu (the comparison, the row digests), included
// once per instruction set.
//
// metrics_cpu.cpp compiles it for the baseline (SSE2 on x86-64, NEON on ARM) and, where the
// compiler can, metrics_cpu_avx2.cpp compiles it again with AVX2 and F16C; metrics_cpu.cpp picks
// the AVX2 copy when the CPU has both. Both copies do the same IEEE operations in the same order
// (no multiply-add is fused: -ffp-contract=off; no sum is reassociated: the four partial sums are
// explicit lanes), so they give the same numbers; tests/checks/test_fastpath.py compares them.
//
// Everything here is in an anonymous namespace on purpose: each file that includes it gets its
// own copy with internal linkage, so the linker can never hand the baseline path a function
// compiled for AVX2 (a shared inline function would be one weak symbol, from either file). For
// the same reason it calls no std:: function template (max_of below instead of std::max).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(KC_METRICS_AVX2)
#include <immintrin.h>
#endif

namespace {

constexpr int kBuckets = 34;  // metrics.ULP_BUCKETS: [0] exact, [k] bit length k of the steps
enum Dtype { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
enum Status { kOk = 0, kNonFinite = 1, kBadArgs = 2 };

template <typename T>
inline T max_of(T a, T b) {
  return a < b ? b : a;  // std::max's choice, NaN included
}

template <typename T>
inline T min_of(T a, T b) {
  return b < a ? b : a;
}

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
    return sign | static_cast<uint16_t>(__builtin_nearbyintf(bits_float(a) * 16777216.0f));
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

// The per-element arithmetic, one element at a time: the loop's tail (a row whose length is not
// a multiple of kLanes) and the reference the vector body below must equal.
template <int D>
inline void compare_one(const Element& e, double g, int64_t j, double atol, double rtol,
                        double* col_max, Histograms& hist, double& max_abs, double& sum,
                        double& max_rel, double& gold_absmax, int64_t& n_bad, int64_t& first_bad,
                        uint64_t& max_steps) {
  constexpr uint32_t kMagnitude = D == kFloat32 ? 0x7FFFFFFFu : 0x7FFFu;
  const double err = __builtin_fabs(static_cast<double>(e.value) - g);
  const double gabs = __builtin_fabs(g);
  // rtol 0: gabs * 0 + atol is atol exactly (gabs is finite), the torch passes' err > atol
  if (err > gabs * rtol + atol) {
    if (first_bad < 0) first_bad = j;
    ++n_bad;
  }
  max_abs = max_of(max_abs, err);
  sum += err;
  gold_absmax = max_of(gold_absmax, gabs);
  // the relative error is divided out only where it may be a new maximum (the margin covers the
  // product's rounding), so the maximum is the exact max of err / |g|
  const double denom = max_of(gabs, 1e-12);
  if (err > max_rel * denom * (1 - 1e-12)) max_rel = max_of(max_rel, err / denom);
  col_max[j] = max_of(col_max[j], err);
  // steps between magnitudes: their difference when the signs agree, else their sum; blended
  // without branches (which way a comparison goes is a coin toss per element)
  const int64_t mc = static_cast<uint32_t>(e.cand_bits) & kMagnitude;
  const int64_t mg = static_cast<uint32_t>(e.gold_bits) & kMagnitude;
  const int64_t diff = mc - mg;
  const int64_t sign = diff >> 63;  // -1 when mg > mc
  const uint64_t differ = static_cast<uint64_t>((e.cand_bits ^ e.gold_bits) >> 31);  // all ones
  const uint64_t steps = (static_cast<uint64_t>(mc + mg) & differ) |
                         (static_cast<uint64_t>((diff ^ sign) - sign) & ~differ);
  // the bit length of steps (0 for none), without a branch: whether an element is exact is a
  // coin toss, and a mispredicted branch per element cost more than the rest
  ++hist[j & 3][static_cast<int>(steps != 0) * (64 - __builtin_clzll(steps | 1))];
  max_steps = max_of(max_steps, steps);
}

// Four lanes of doubles (and of their 32-bit companions): plain GCC/Clang vector extensions, so
// the same source compiles to SSE2 pairs, AVX or NEON. Lane l of element group k is column
// j0 + 4k + l: the lanes are the four interleaved partial sums of |err| (element j into sum
// j % 4), so the summation order is the scalar loop's exactly.
constexpr int kLanes = 4;
typedef double V4d __attribute__((vector_size(32)));
typedef int64_t V4l __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
typedef int32_t V4i __attribute__((vector_size(16)));
typedef uint32_t V4u __attribute__((vector_size(16)));

template <typename V>
inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
inline void store(void* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// a > b ? a : b lane by lane; no NaN gets here (a chunk with one is redone by the torch passes)
inline V4d vmax(V4d a, V4d b) { return a > b ? a : b; }
inline V4d vabs(V4d a) { return (V4d)((V4l)a & 0x7FFFFFFFFFFFFFFFll); }

#if defined(KC_METRICS_AVX2)
// fp16 elements by the F16C conversions, four at a time (n a multiple of 4): vcvtph2ps is exact,
// vcvtpd2ps rounds as static_cast<float> does, and vcvtps2ph with round-to-nearest-even rounds a
// float as f16_from_float does (ties to even, subnormals, 65520 and up to inf).
inline void unpack_f16c(const uint16_t* cand, const double* gold, int64_t n, float* value,
                        int32_t* cand_bits, int32_t* gold_bits) {
  for (int64_t i = 0; i < n; i += 4) {
    const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(cand + i));
    _mm_storeu_ps(value + i, _mm_cvtph_ps(c));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(cand_bits + i), _mm_cvtepi16_epi32(c));
    const __m128 g = _mm256_cvtpd_ps(_mm256_loadu_pd(gold + i));
    const __m128i h = _mm_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(gold_bits + i), _mm_cvtepi16_epi32(h));
  }
}
#endif

// Elements per batch: their candidate values and both bit patterns are unpacked into buffers
// that stay in L1, then compared four at a time.
constexpr int64_t kBatch = 512;
static_assert(kBatch % kLanes == 0,
              "a batch is whole lane groups: lane l holds columns j % 4 == l");

#if !defined(KC_METRICS_AVX2)
// Columns [j0, j1) of one row into its running statistics, one element at a time (the baseline
// copy: without AVX, GCC splits the four-lane vectors below through the stack, 3x slower than
// this). False when an element is NaN/Inf.
template <int D>
bool compare_columns(const void* cand, const double* gold, int64_t j0, int64_t j1, double atol,
                     double rtol, double* col_max, Histograms& hist, RowStats& s) {
  // the row's running values in locals: stores to col_max and hist may alias a RowStats field
  // as far as the compiler knows, and it would load and store each of them on every element
  double max_abs = s.max_abs, max_rel = s.max_rel, gold_absmax = s.gold_absmax;
  int64_t n_bad = s.n_bad, first_bad = s.first_bad;
  uint64_t max_steps = s.max_steps;
  double sum[4] = {0.0, 0.0, 0.0, 0.0};  // |err| of column j into sum[j % 4], as the lanes below
  for (int64_t j = j0; j < j1; ++j) {
    const double g = gold[j];
    const Element e = element<D>(cand, j, g);
    if (!__builtin_isfinite(e.value) || !__builtin_isfinite(g)) return false;  // torch redoes it
    compare_one<D>(e, g, j, atol, rtol, col_max, hist, max_abs, sum[j & 3], max_rel, gold_absmax,
                   n_bad, first_bad, max_steps);
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
#else
// Columns [j0, j1) of one row into its running statistics, four lanes at a time (the AVX2 copy).
// False when an element is NaN/Inf. j0 is a multiple of kLanes (a block start), so lane l
// always holds the columns j % 4 == l, and each lane's sum adds its columns in order: the
// numbers of the baseline copy above, operation for operation (tests/checks/test_fastpath.py).
template <int D>
bool compare_columns(const void* cand, const double* gold, int64_t j0, int64_t j1, double atol,
                     double rtol, double* col_max, Histograms& hist, RowStats& s) {
  constexpr uint32_t kMagnitude = D == kFloat32 ? 0x7FFFFFFFu : 0x7FFFu;
  alignas(32) float value[kBatch];
  alignas(32) int32_t cand_bits[kBatch], gold_bits[kBatch];
  alignas(32) uint32_t steps_of[kBatch];
  // the row's running values, lane by lane, merged into s at the end
  V4d max_abs = {}, sum = {}, max_rel = {}, gold_absmax = {};
  V4l bad = {}, gold_nonfinite = {};
  V4i cand_nonfinite = {};
  V4u max_steps = {};
  int64_t first_bad = s.first_bad;
  const int64_t whole = j1 - (j1 - j0) % kLanes;  // [whole, j1): the last few, one at a time
  for (int64_t b0 = j0; b0 < whole; b0 += kBatch) {
    const int64_t n = min_of(whole, b0 + kBatch) - b0;
#if defined(KC_METRICS_AVX2)
    if constexpr (D == kFloat16) {
      unpack_f16c(static_cast<const uint16_t*>(cand) + b0, gold + b0, n, value, cand_bits,
                  gold_bits);
    } else
#endif
    {
      for (int64_t i = 0; i < n; ++i) {  // unpack (the compiler vectorizes fp32 and bf16)
        const Element e = element<D>(cand, b0 + i, gold[b0 + i]);
        value[i] = e.value;
        cand_bits[i] = e.cand_bits;
        gold_bits[i] = e.gold_bits;
      }
    }
    const V4l bad_before = bad;
    for (int64_t i = 0; i < n; i += kLanes) {
      const int64_t j = b0 + i;
      const V4d g = load<V4d>(gold + j);
      const V4f cf = load<V4f>(value + i);
      // NaN/Inf: an all-ones exponent, in the candidate's float or in the gold's double
      cand_nonfinite |= ((V4u)cf & 0x7F800000u) == 0x7F800000u;
      gold_nonfinite |= (g - g) != 0.0;  // inf - inf and NaN - NaN are NaN, unequal to 0
      const V4d err = vabs(__builtin_convertvector(cf, V4d) - g);
      const V4d gabs = vabs(g);
      bad -= err > gabs * rtol + atol;  // a true comparison is -1: the bound of compare_one
      max_abs = vmax(err, max_abs);
      sum += err;
      gold_absmax = vmax(gabs, gold_absmax);
      max_rel = vmax(err / vmax(gabs, V4d{} + 1e-12), max_rel);
      store(col_max + j, vmax(err, load<V4d>(col_max + j)));
      const V4i cb = load<V4i>(cand_bits + i), gb = load<V4i>(gold_bits + i);
      const V4u mc = (V4u)cb & kMagnitude, mg = (V4u)gb & kMagnitude;
      const V4i diff = (V4i)(mc - mg);
      const V4i neg = diff >> 31;
      const V4u differ = (V4u)((cb ^ gb) >> 31);  // all ones where the signs differ
      const V4u steps = ((mc + mg) & differ) | ((V4u)((diff ^ neg) - neg) & ~differ);
      max_steps = steps > max_steps ? steps : max_steps;
      store(steps_of + i, steps);
    }
    for (int l = 0; l < kLanes; ++l)
      if (cand_nonfinite[l] | gold_nonfinite[l]) return false;  // the torch passes redo the chunk
    for (int64_t i = 0; i < n; ++i) {  // b0 % 4 == 0: i & 3 is j & 3; the bit length, 0 for none
      const uint32_t st = steps_of[i];
      ++hist[i & 3][static_cast<int>(st != 0) * (32 - __builtin_clz(st | 1))];
    }
    const V4l found = bad - bad_before;
    if (first_bad < 0 && (found[0] | found[1] | found[2] | found[3])) {
      for (int64_t i = 0; i < n; ++i) {  // this batch's first bad element, by the same bound
        const double g = gold[b0 + i];
        if (__builtin_fabs(static_cast<double>(value[i]) - g) > __builtin_fabs(g) * rtol + atol) {
          first_bad = b0 + i;
          break;
        }
      }
    }
  }
  double lane_sum[kLanes];
  int64_t n_bad = s.n_bad;
  uint64_t max_steps_all = s.max_steps;
  for (int l = 0; l < kLanes; ++l) {
    lane_sum[l] = sum[l];
    s.max_abs = max_of(s.max_abs, max_abs[l]);
    s.max_rel = max_of(s.max_rel, max_rel[l]);
    s.gold_absmax = max_of(s.gold_absmax, gold_absmax[l]);
    max_steps_all = max_of<uint64_t>(max_steps_all, max_steps[l]);
    n_bad += bad[l];
  }
  for (int64_t j = whole; j < j1; ++j) {  // after every whole group: each lane's sum in order
    const Element e = element<D>(cand, j, gold[j]);
    if (!__builtin_isfinite(e.value) || !__builtin_isfinite(gold[j])) return false;
    compare_one<D>(e, gold[j], j, atol, rtol, col_max, hist, s.max_abs, lane_sum[j & 3], s.max_rel,
                   s.gold_absmax, n_bad, first_bad, max_steps_all);
  }
  s.sum_abs += (lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]);
  s.n_bad = n_bad;
  s.first_bad = first_bad;
  s.max_steps = max_steps_all;
  return true;
}
#endif  // KC_METRICS_AVX2

// Rows [r0, r1), in blocks of kBlockColumns columns across all the rows: the block's slice of
// col_max stays in cache instead of streaming a 1.2 MB array per row.
constexpr int64_t kBlockColumns = 4096;
static_assert(kBlockColumns % kLanes == 0, "a block starts a lane group (j0 % 4 == 0)");

template <int D>
bool compare_rows(const void* cand, const double* gold, int64_t r0, int64_t r1, int64_t cols,
                  double atol, double rtol, double* row_out, int64_t* row_count, double* col_max,
                  int64_t* hist) {
  const int64_t elem = D == kFloat32 ? 4 : 2;
  std::vector<RowStats> stats(r1 - r0);
  Histograms h = {};
  for (int64_t j0 = 0; j0 < cols; j0 += kBlockColumns) {
    const int64_t j1 = min_of(cols, j0 + kBlockColumns);
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

// One 32-bit digest per row of [rows, cols] elements of elem_bytes (2, 4 or 8; contiguous), rows
// [r0, r1): sum(word[i] * weights[i]) mod 2^32 over the row's 32-bit words, as
// metrics.row_digests takes them (a 2-byte element is one word, sign-extended; an 8-byte one two,
// low word first). Sums mod 2^32 do not depend on their order: the AVX2 copy's are the same.
void digest_rows(const void* data, int elem_bytes, int64_t r0, int64_t r1, int64_t cols,
                 const uint32_t* w, int32_t* out) {
  const int64_t words = elem_bytes == 8 ? 2 * cols : cols;
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
}

}  // namespace

namespace kc_metrics {
// compare_rows<kFloat32>, <kBFloat16>, <kFloat16> compiled with AVX2 and F16C
// (metrics_cpu_avx2.cpp), when the build has that file (KC_METRICS_HAVE_AVX2).
using CompareRows = bool (*)(const void*, const double*, int64_t, int64_t, int64_t, double, double,
                             double*, int64_t*, double*, int64_t*);
extern const CompareRows compare_rows_avx2[3] __attribute__((visibility("hidden")));
// digest_rows compiled with AVX2 (the same digests)
using DigestRows = void (*)(const void*, int, int64_t, int64_t, int64_t, const uint32_t*, int32_t*);
extern const DigestRows digest_rows_avx2 __attribute__((visibility("hidden")));
}  // namespace kc_metrics
