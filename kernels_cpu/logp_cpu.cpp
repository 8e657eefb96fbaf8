// logp_cpu.cpp - deterministic fused log-prob (logits[t] - logsumexp(logits)) for x86-64 AVX2.
//
// Determinism contract (bitwise identical output whatever the batch size, the row's position in
// the batch, the thread count or the row's address alignment):
//
//  * Every row is reduced by exactly the same instruction sequence, chosen from V alone.
//  * The row is split into 16 fp32 lanes: column j (counted from the row start, never from the
//    address) always belongs to lane j % 16. Lanes are held in two __m256 registers
//    (lanes 0-7 and 8-15). Loads are unaligned loads (`loadu`), so the address never changes
//    which column lands in which lane and there is no alignment peeling.
//  * Columns are visited in chunks of kChunk columns (a multiple of 16, counted from the row
//    start). Per chunk: pass 1 takes the per-lane max of the chunk's fp32 values (bf16/fp16 and
//    a partial fp32 chunk are first decoded to an L1-resident fp32 scratch buffer; a full fp32
//    chunk is read in place); pass 2 sums exp(x - lane_max) for the chunk's columns into a fresh
//    per-lane chunk sum, in increasing column order; then each lane's running sum is rescaled to
//    the new lane max and the chunk sum is added. Summing per chunk first (128 terms a lane)
//    keeps the rounding error of a Qwen3-vocab row (151936 columns) near that of a pairwise
//    sum: one running sum per lane over ~9500 terms missed the fp32 contract (1e-5) at V=151936,
//    which kernelcheck's forward_accuracy caught. The row is read from memory once.
//  * The last partial group of 16 columns is padded with -inf in the scratch buffer and goes
//    through the same vector code: exp(-inf - m) is exactly +0 and s + 0 == s, so padding is
//    bit-for-bit the same as skipping. There is no separate scalar tail path at all.
//  * The 16 lanes are combined by a fixed pairwise tree: lane i + lane i+8, then i + i+4,
//    i + i+2, i + i+1 (same tree for the max and for the rescaled sums).
//  * The file is built with -ffp-contract=off: the only fused multiply-adds are the explicit
//    _mm256_fmadd_ps calls inside exp256, so the compiler cannot re-associate or contract.
//  * Threads own contiguous, statically partitioned row ranges; a row's arithmetic does not
//    depend on which thread runs it.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "kc_abi_common.h"
#include "kc_logp.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "logp_cpu.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif

namespace {

constexpr int64_t kLanes = 16;    // fp32 lanes: column j -> lane j % kLanes
constexpr int64_t kChunk = 2048;  // columns per chunk (multiple of kLanes); 8 KiB scratch
static_assert(kChunk % kLanes == 0, "chunk must be a whole number of lane groups");
// Software prefetch distance in columns (into L2: _MM_HINT_T1). Measured at 512 x 151936 on a
// 2-core AVX2 machine: L2 prefetches 4096 columns ahead beat L1 prefetches one 2048-column chunk
// ahead by ~10%; longer distances were no better. Only timing depends on it, never a value.
constexpr int64_t kPrefetchAhead = 4096;

int g_num_threads = 0;  // 0 = hardware concurrency

// ---------------------------------------------------------------------------------------------
// exp for fp32 vectors, for x <= 0 (callers pass x - max) or NaN; 13 vector ops. n = round(x *
// log2(e)), r = x - n*ln2 (two-part ln2, fma: n*ln2_hi is exact), exp(r) by a degree-6 polynomial
// in Horner form (p(0) = 1 exactly, so exp256(0) == 1), result = exp(r) * 2^n. The coefficients
// are a near-minimax fit of exp on [-ln2/2, ln2/2] (relative error 4e-9, far below fp32
// rounding); measured over every fp32 x in [-87, 0] the result is within 0.89 ulp of exp(x).
//  * round(): one fma adds 1.5 * 2^23 + 127 to x * log2(e), so the sum is rounded to an integer,
//    and its low mantissa bits are n + 127: shifted into the exponent field they are 2^n, with no
//    float -> int conversion.
//  * x is clamped to -88 first, where n = -127: the shifted bits are then all zero and the result
//    is exactly +0 (this is how x = -inf, and any x below about -87.7, gives 0). Between -87.7
//    and ln(FLT_MIN) = -87.34 the result is subnormal, as exp's is. NaN propagates.
// ---------------------------------------------------------------------------------------------
inline __m256 exp256(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f);  // 1.5 * 2^23 + exponent bias
  // _mm256_max_ps returns the second operand when one is NaN: keep x second.
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-88.0f), x);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 n = _mm256_sub_ps(t, magic);  // round(xc * log2(e)), exact
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3814598788e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3687175065e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1668388993e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666521132e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999994040e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n for n in [-127, 0]; n = -127 gives +0 (see above).
  const __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
  return _mm256_mul_ps(p, e);
}

// ---------------------------------------------------------------------------------------------
// dtype decode/encode (16-bit decode is exact; encode is round-to-nearest-even).
// ---------------------------------------------------------------------------------------------
struct F32 {
  using T = float;
  static inline __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
  static inline float load1(const T* p) { return *p; }
  static inline void store8(T* p, __m256 v) { _mm256_storeu_ps(p, v); }
};

struct BF16 {
  using T = uint16_t;
  static inline __m256 load8(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static inline float load1(const T* p) {
    const uint32_t b = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  static inline void store8(T* p, __m256 v) {
    // RNE: bits + 0x7fff + lsb, >> 16; NaN -> quiet NaN with the sign kept.
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_srli_epi32(r, 16);
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x0040));
    const __m256 isnan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan), isnan));
    // Pack 8 x u32 (each < 65536) to 8 x u16.
    const __m128i lo = _mm256_castsi256_si128(r);
    const __m128i hi = _mm256_extracti128_si256(r, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(lo, hi));
  }
};

struct F16 {
  using T = uint16_t;
  static inline __m256 load8(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static inline float load1(const T* p) { return _cvtsh_ss(*p); }
  static inline void store8(T* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// Decode columns [c0, c0 + len) of `row` into buf[0, padded) where padded = len rounded up to
// kLanes; the padding is -inf. Returns padded. Full groups use vector loads, the last partial
// group scalar loads - decoding is exact, so both give the same fp32 values.
template <class D>
inline int64_t decode_chunk(const typename D::T* row, int64_t c0, int64_t len, float* buf) {
  const int64_t full = len - len % 8;
  int64_t i = 0;
  for (; i < full; i += 8) _mm256_storeu_ps(buf + i, D::load8(row + c0 + i));
  for (; i < len; ++i) buf[i] = D::load1(row + c0 + i);
  const int64_t padded = (len + kLanes - 1) / kLanes * kLanes;
  for (; i < padded; ++i) buf[i] = -INFINITY;
  return padded;
}

// The chunk's columns [c0, c0 + len) as fp32 values: an fp32 chunk of whole lane groups is read
// in place (no copy, no padding needed); anything else is decoded into buf by decode_chunk.
// Either way the passes below see the same values at the same column indices.
template <class D>
inline const float* chunk_values(const typename D::T* row, int64_t c0, int64_t len, float* buf,
                                 int64_t* padded) {
  if (std::is_same<D, F32>::value && len % kLanes == 0) {
    *padded = len;
    return reinterpret_cast<const float*>(row + c0);
  }
  *padded = decode_chunk<D>(row, c0, len, buf);
  return buf;
}

// Software prefetch, kPrefetchAhead columns ahead of the columns being computed on, so that the
// memory reads overlap the exp arithmetic instead of alternating with it. Column q of `row`, or
// once q runs past the row end, column q - vocab of `next` (the row processed next). Callers keep
// q < vocab + min(kPrefetchAhead, vocab), so the address stays inside one of the two rows.
// Prefetching only moves cache lines; it never changes a value.
template <class T>
inline void prefetch_col(const T* row, const T* next, int64_t vocab, int64_t q) {
  const T* p = q < vocab ? row + q : next + (q - vocab);
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}

// Fixed pairwise tree over 16 lanes held as (a = lanes 0-7, b = lanes 8-15):
// (i, i+8) -> (i, i+4) -> (i, i+2) -> (i, i+1).
inline float tree_max16(__m256 a, __m256 b) {
  __m256 v = _mm256_max_ps(a, b);
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}
inline float tree_sum16(__m256 a, __m256 b) {
  __m256 v = _mm256_add_ps(a, b);
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

struct RowStats {
  float max;  // row max (>= -FLT_MAX)
  float sum;  // sum_j exp(x_j - max)
};

// Online (chunked) max / sum-of-exp over one row. See the header comment for the order.
// `next` is only a prefetch hint: the row that will be read after this one.
template <class D>
RowStats row_stats(const typename D::T* row, const typename D::T* next, int64_t vocab, float* buf) {
  const int64_t ahead = std::min(kPrefetchAhead, vocab);  // prefetch distance in columns
  // Lane max starts at -FLT_MAX (not -inf) so that a lane that has only seen -inf entries has
  // m = -FLT_MAX, s = 0 and every exp() argument stays a number (-inf - -inf would be NaN).
  __m256 m0 = _mm256_set1_ps(-FLT_MAX), m1 = m0;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
    const int64_t len = std::min(kChunk, vocab - c0);
    int64_t padded;
    const float* xs = chunk_values<D>(row, c0, len, buf, &padded);
    // Pass 1: lane max over the chunk. max is exact, so its order is irrelevant: even and odd
    // 16-column groups go to separate registers (two independent dependency chains per lane)
    // and are merged at the end. (Only the sign of a zero max or which NaN survives could
    // depend on it; both are still fixed by V, and a NaN anywhere makes the sum NaN.)
    __m256 n0 = m0, n1 = m1, n2 = m0, n3 = m1;
    int64_t i = 0;
    for (; i + 2 * kLanes <= padded; i += 2 * kLanes) {
      n0 = _mm256_max_ps(n0, _mm256_loadu_ps(xs + i));
      n1 = _mm256_max_ps(n1, _mm256_loadu_ps(xs + i + 8));
      n2 = _mm256_max_ps(n2, _mm256_loadu_ps(xs + i + 16));
      n3 = _mm256_max_ps(n3, _mm256_loadu_ps(xs + i + 24));
    }
    if (i < padded) {
      n0 = _mm256_max_ps(n0, _mm256_loadu_ps(xs + i));
      n1 = _mm256_max_ps(n1, _mm256_loadu_ps(xs + i + 8));
    }
    n0 = _mm256_max_ps(n0, n2);
    n1 = _mm256_max_ps(n1, n3);
    // Pass 2: each lane sums its columns of this chunk, in increasing column order (one
    // accumulator per lane: this is the reduction order, fixed by V).
    __m256 c0s = _mm256_setzero_ps(), c1s = c0s;
    for (i = 0; i < padded; i += kLanes) {
      prefetch_col(row, next, vocab, c0 + i + ahead);
      c0s = _mm256_add_ps(c0s, exp256(_mm256_sub_ps(_mm256_loadu_ps(xs + i), n0)));
      c1s = _mm256_add_ps(c1s, exp256(_mm256_sub_ps(_mm256_loadu_ps(xs + i + 8), n1)));
    }
    // Rescale the running sums to the new lane max (exp(0) == 1 exactly when unchanged), then
    // add the chunk's sums: always in this order, so the result depends on V alone.
    s0 = _mm256_add_ps(_mm256_mul_ps(s0, exp256(_mm256_sub_ps(m0, n0))), c0s);
    s1 = _mm256_add_ps(_mm256_mul_ps(s1, exp256(_mm256_sub_ps(m1, n1))), c1s);
    m0 = n0;
    m1 = n1;
  }
  RowStats st;
  st.max = tree_max16(m0, m1);
  const __m256 M = _mm256_set1_ps(st.max);
  s0 = _mm256_mul_ps(s0, exp256(_mm256_sub_ps(m0, M)));
  s1 = _mm256_mul_ps(s1, exp256(_mm256_sub_ps(m1, M)));
  st.sum = tree_sum16(s0, s1);
  return st;
}

inline bool target_ok(int64_t t, int64_t vocab) { return t >= 0 && t < vocab; }

template <class D>
void forward_rows(const typename D::T* logits, const int64_t* target, float* out, int64_t r0,
                  int64_t r1, int64_t vocab, int64_t stride) {
  alignas(32) float buf[kChunk];
  for (int64_t n = r0; n < r1; ++n) {
    const int64_t t = target[n];
    if (!target_ok(t, vocab)) {
      out[n] = 0.0f;
      continue;
    }
    const typename D::T* row = logits + n * stride;
    const typename D::T* next = n + 1 < r1 ? row + stride : row;
    const RowStats st = row_stats<D>(row, next, vocab, buf);
    const float xt = D::load1(row + t);
    out[n] = (xt - st.max) - std::log(st.sum);
  }
}

template <class D>
void backward_rows(const typename D::T* logits, const int64_t* target, const float* g,
                   typename D::T* grad, int64_t r0, int64_t r1, int64_t vocab, int64_t stride) {
  alignas(32) float buf[kChunk];
  alignas(32) typename D::T tmp[8];
  for (int64_t n = r0; n < r1; ++n) {
    typename D::T* grow = grad + n * vocab;
    const int64_t t = target[n];
    if (!target_ok(t, vocab)) {
      std::memset(grow, 0, sizeof(typename D::T) * static_cast<size_t>(vocab));
      continue;
    }
    const typename D::T* row = logits + n * stride;
    // The gradient pass below re-reads this row, so the stats pass prefetches its start.
    const RowStats st = row_stats<D>(row, row, vocab, buf);
    const typename D::T* next = n + 1 < r1 ? row + stride : row;
    const int64_t ahead = std::min(kPrefetchAhead, vocab);
    // grad_j = g * (onehot_j - p_j), p_j = exp(x_j - max) / sum; element-wise, so the vector
    // width used here cannot change any result.
    const __m256 M = _mm256_set1_ps(st.max);
    const __m256 S = _mm256_set1_ps(st.sum);
    const __m256 G = _mm256_set1_ps(g[n]);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
      const int64_t len = std::min(kChunk, vocab - c0);
      int64_t padded;
      const float* xs = chunk_values<D>(row, c0, len, buf, &padded);
      for (int64_t i = 0; i < len; i += 8) {
        if (i % kLanes == 0) prefetch_col(row, next, vocab, c0 + i + ahead);
        const __m256 p = _mm256_div_ps(exp256(_mm256_sub_ps(_mm256_loadu_ps(xs + i), M)), S);
        // Columns c0+i .. c0+i+7 relative to the target (small ints, exact in int32).
        const int64_t rel = t - (c0 + i);
        __m256 onehot = _mm256_setzero_ps();
        if (rel >= 0 && rel < 8) {
          const __m256i hit = _mm256_cmpeq_epi32(step, _mm256_set1_epi32(static_cast<int>(rel)));
          onehot = _mm256_and_ps(_mm256_castsi256_ps(hit), one);
        }
        const __m256 gv = _mm256_mul_ps(G, _mm256_sub_ps(onehot, p));
        if (i + 8 <= len) {
          D::store8(grow + c0 + i, gv);
        } else {
          D::store8(tmp, gv);
          std::memcpy(grow + c0 + i, tmp, sizeof(typename D::T) * static_cast<size_t>(len - i));
        }
      }
    }
  }
}

// Static row partition over threads: thread k gets rows [k*rows/T, (k+1)*rows/T).
template <class F>
void parallel_rows(int64_t rows, int64_t vocab, F&& fn) {
  int64_t nt =
      g_num_threads > 0 ? g_num_threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  if (nt < 1) nt = 1;
  // Tiny problems are not worth a thread start (~1 us/row-chunk of 64K elements).
  const int64_t work_threads = std::max<int64_t>(1, rows * vocab / 65536);
  nt = std::min({nt, rows, work_threads});
  if (nt <= 1) {
    fn(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(nt - 1));
  for (int64_t k = 1; k < nt; ++k) {
    pool.emplace_back([&, k] { fn(k * rows / nt, (k + 1) * rows / nt); });
  }
  fn(0, rows / nt);
  for (auto& th : pool) th.join();
}

}  // namespace

extern "C" {

KC_API int kc_abi_version(void) { return KC_ABI_VERSION; }

KC_API const char* kc_backend_name(void) { return "cpu"; }

KC_API const char* kc_status_string(int status) {
  return kc_status_text(status, "kernel launch failed", "device error");
}

KC_API int kc_set_num_threads(int n) {
  if (n < 0) return KC_ERR_SHAPE;
  g_num_threads = n;
  return KC_OK;
}

KC_API int kc_logp_forward(int dtype, const void* logits, const int64_t* target, float* out,
                           int64_t rows, int64_t vocab, int64_t row_stride, void* stream) {
  (void)stream;
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;
  if (!logits || !target || !out) return KC_ERR_NULL;
  switch (dtype) {
    case KC_FLOAT32:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        forward_rows<F32>(static_cast<const float*>(logits), target, out, a, b, vocab, row_stride);
      });
      break;
    case KC_BFLOAT16:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        forward_rows<BF16>(static_cast<const uint16_t*>(logits), target, out, a, b, vocab,
                           row_stride);
      });
      break;
    default:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        forward_rows<F16>(static_cast<const uint16_t*>(logits), target, out, a, b, vocab,
                          row_stride);
      });
      break;
  }
  return KC_OK;
}

KC_API int kc_logp_backward(int dtype, const void* logits, const int64_t* target,
                            const float* grad_out, void* grad_logits, int64_t rows, int64_t vocab,
                            int64_t row_stride, void* stream) {
  (void)stream;
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;
  if (!logits || !target || !grad_out || !grad_logits) return KC_ERR_NULL;
  switch (dtype) {
    case KC_FLOAT32:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        backward_rows<F32>(static_cast<const float*>(logits), target, grad_out,
                           static_cast<float*>(grad_logits), a, b, vocab, row_stride);
      });
      break;
    case KC_BFLOAT16:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        backward_rows<BF16>(static_cast<const uint16_t*>(logits), target, grad_out,
                            static_cast<uint16_t*>(grad_logits), a, b, vocab, row_stride);
      });
      break;
    default:
      parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
        backward_rows<F16>(static_cast<const uint16_t*>(logits), target, grad_out,
                           static_cast<uint16_t*>(grad_logits), a, b, vocab, row_stride);
      });
      break;
  }
  return KC_OK;
}

}  // extern "C"
