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
//    start). Per chunk: pass 1 decodes the chunk to an fp32 scratch buffer (L1 resident) and
//    takes the per-lane max; pass 2 sums exp(x - lane_max) for the chunk's columns into a fresh
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

int g_num_threads = 0;  // 0 = hardware concurrency

// ---------------------------------------------------------------------------------------------
// exp for fp32 vectors. Cephes-style: n = round(x*log2(e)), r = x - n*ln2 (two-part ln2, fma),
// exp(r) = 1 + r + r^2 * P(r) (degree-5 minimax), result = exp(r) * 2^n. Max error about 1 ulp
// for normal results. x < -87.33 (result would underflow) and x == -inf give exactly +0; NaN
// propagates. Callers only pass x <= 0 (x - max), so there is no overflow branch beyond the
// clamp. exp256(0) is exactly 1.
// ---------------------------------------------------------------------------------------------
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.5f);
  const __m256 zero_below = _mm256_set1_ps(-87.33654475f);  // ln(FLT_MIN)
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  // _mm256_max_ps/_mm256_min_ps return the second operand when one is NaN: keep x second.
  __m256 xc = _mm256_max_ps(lo, x);
  xc = _mm256_min_ps(hi, xc);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n for n in [-126, 127] (n >= -126 whenever the result is not forced to zero).
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  const __m256 underflow = _mm256_cmp_ps(x, zero_below, _CMP_LT_OQ);  // false for NaN
  return _mm256_andnot_ps(underflow, y);
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
template <class D>
RowStats row_stats(const typename D::T* row, int64_t vocab, float* buf) {
  // Lane max starts at -FLT_MAX (not -inf) so that a lane that has only seen -inf entries has
  // m = -FLT_MAX, s = 0 and every exp() argument stays a number (-inf - -inf would be NaN).
  __m256 m0 = _mm256_set1_ps(-FLT_MAX), m1 = m0;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
    const int64_t len = std::min(kChunk, vocab - c0);
    const int64_t padded = decode_chunk<D>(row, c0, len, buf);
    // Pass 1: lane max over the chunk (max is exact, its order is irrelevant).
    __m256 n0 = m0, n1 = m1;
    for (int64_t i = 0; i < padded; i += kLanes) {
      n0 = _mm256_max_ps(n0, _mm256_loadu_ps(buf + i));
      n1 = _mm256_max_ps(n1, _mm256_loadu_ps(buf + i + 8));
    }
    // Pass 2: each lane sums its columns of this chunk, in increasing column order.
    __m256 c0s = _mm256_setzero_ps(), c1s = c0s;
    for (int64_t i = 0; i < padded; i += kLanes) {
      c0s = _mm256_add_ps(c0s, exp256(_mm256_sub_ps(_mm256_loadu_ps(buf + i), n0)));
      c1s = _mm256_add_ps(c1s, exp256(_mm256_sub_ps(_mm256_loadu_ps(buf + i + 8), n1)));
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
    const RowStats st = row_stats<D>(row, vocab, buf);
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
    const RowStats st = row_stats<D>(row, vocab, buf);
    // grad_j = g * (onehot_j - p_j), p_j = exp(x_j - max) / sum; element-wise, so the vector
    // width used here cannot change any result.
    const __m256 M = _mm256_set1_ps(st.max);
    const __m256 S = _mm256_set1_ps(st.sum);
    const __m256 G = _mm256_set1_ps(g[n]);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
      const int64_t len = std::min(kChunk, vocab - c0);
      decode_chunk<D>(row, c0, len, buf);
      for (int64_t i = 0; i < len; i += 8) {
        const __m256 p = _mm256_div_ps(exp256(_mm256_sub_ps(_mm256_loadu_ps(buf + i), M)), S);
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
