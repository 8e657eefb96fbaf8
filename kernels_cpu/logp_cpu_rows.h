// logp_cpu_rows.h - the row loops of libkc_logp_cpu, templated on the lanes type, for the two
// translation units that instantiate them: logp_cpu.cpp (AVX2) and logp_cpu_avx512.cpp (the
// same operations on one 16-lane register; built with -mavx512f). Everything here has internal
// linkage, so each unit keeps its own copy, compiled for its own instruction set.
// The determinism contract is in logp_cpu.cpp's header comment.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kc_logp.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "logp_cpu_rows.h must be compiled with -mavx2 -mfma -mf16c"
#endif

namespace kc_cpu {
// Rows [r0, r1) of one call, for any dtype (kc_dtype): what parallel_rows runs on a thread.
using ForwardRowsFn = void (*)(int dtype, const void* logits, const int64_t* target, float* out,
                               int64_t r0, int64_t r1, int64_t vocab, int64_t stride);
using BackwardRowsFn = void (*)(int dtype, const void* logits, const int64_t* target,
                                const float* g, void* grad, int64_t r0, int64_t r1, int64_t vocab,
                                int64_t stride);
struct RowKernels {
  ForwardRowsFn forward;
  BackwardRowsFn backward;
};
// The AVX-512 instantiation (logp_cpu_avx512.cpp; only when the library was built with it).
RowKernels avx512_kernels();
}  // namespace kc_cpu

namespace {

constexpr int64_t kLanes = 16;    // fp32 lanes: column j -> lane j % kLanes
constexpr int64_t kChunk = 2048;  // columns per chunk (multiple of kLanes); 8 KiB scratch
static_assert(kChunk % kLanes == 0, "chunk must be a whole number of lane groups");
// Software prefetch distance in columns (into L2: _MM_HINT_T1). Measured at 512 x 151936 on a
// 2-core AVX2 machine: L2 prefetches 4096 columns ahead beat L1 prefetches one 2048-column chunk
// ahead by ~10%; longer distances were no better. Only timing depends on it, never a value.
constexpr int64_t kPrefetchAhead = 4096;

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
// The instruction set's operations on one register, for exp_poly.
struct Ops256 {
  using R = __m256;
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }
  static R shl23(R t) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)); }
};

// One algorithm and one set of constants for every register width: each lane gets the same
// operations whatever the instruction set (Ops256 here, Ops512 for the AVX-512 build).
template <class O>
inline typename O::R exp_poly(typename O::R x) {
  using R = typename O::R;
  const R magic = O::set1(12582912.0f + 127.0f);  // 1.5 * 2^23 + exponent bias
  // max returns the second operand when one is NaN: keep x second.
  const R xc = O::max(O::set1(-88.0f), x);
  const R t = O::fmadd(xc, O::set1(1.44269504088896341f), magic);
  const R n = O::sub(t, magic);  // round(xc * log2(e)), exact
  R r = O::fnmadd(n, O::set1(0.693359375f), xc);
  r = O::fnmadd(n, O::set1(-2.12194440e-4f), r);
  R p = O::set1(1.3814598788e-3f);
  p = O::fmadd(p, r, O::set1(8.3687175065e-3f));
  p = O::fmadd(p, r, O::set1(4.1668388993e-2f));
  p = O::fmadd(p, r, O::set1(1.6666521132e-1f));
  p = O::fmadd(p, r, O::set1(4.9999994040e-1f));
  p = O::fmadd(p, r, O::set1(1.0f));
  p = O::fmadd(p, r, O::set1(1.0f));
  // 2^n for n in [-127, 0]; n = -127 gives +0 (see above).
  return O::mul(p, O::shl23(t));
}

inline __m256 exp256(__m256 x) { return exp_poly<Ops256>(x); }

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

// ---------------------------------------------------------------------------------------------
// The 16 fp32 lanes as a value type, one per instruction set. Every operation is per lane and
// the same IEEE operation in both (max with the same operand order, so the same NaN and signed
// zero survive; the same fused multiply-adds in exp), so both compute the same bits in every
// lane: only how many lanes one instruction covers differs. lo()/hi() are lanes 0-7 / 8-15,
// which the fixed trees above combine in one order.
// ---------------------------------------------------------------------------------------------
struct LanesAvx2 {  // two 8-lane registers
  __m256 a, b;
  static LanesAvx2 set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static LanesAvx2 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  friend LanesAvx2 max(LanesAvx2 x, LanesAvx2 y) {
    return {_mm256_max_ps(x.a, y.a), _mm256_max_ps(x.b, y.b)};
  }
  friend LanesAvx2 operator+(LanesAvx2 x, LanesAvx2 y) {
    return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)};
  }
  friend LanesAvx2 operator-(LanesAvx2 x, LanesAvx2 y) {
    return {_mm256_sub_ps(x.a, y.a), _mm256_sub_ps(x.b, y.b)};
  }
  friend LanesAvx2 operator*(LanesAvx2 x, LanesAvx2 y) {
    return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)};
  }
  friend LanesAvx2 exp(LanesAvx2 x) { return {exp256(x.a), exp256(x.b)}; }
  __m256 lo() const { return a; }
  __m256 hi() const { return b; }
};

#if defined(__AVX512F__)
struct Ops512 {
  using R = __m512;
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  static R shl23(R t) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23)); }
};

struct LanesAvx512 {  // one 16-lane register
  __m512 v;
  static LanesAvx512 set1(float x) { return {_mm512_set1_ps(x)}; }
  static LanesAvx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  friend LanesAvx512 max(LanesAvx512 x, LanesAvx512 y) { return {_mm512_max_ps(x.v, y.v)}; }
  friend LanesAvx512 operator+(LanesAvx512 x, LanesAvx512 y) { return {_mm512_add_ps(x.v, y.v)}; }
  friend LanesAvx512 operator-(LanesAvx512 x, LanesAvx512 y) { return {_mm512_sub_ps(x.v, y.v)}; }
  friend LanesAvx512 operator*(LanesAvx512 x, LanesAvx512 y) { return {_mm512_mul_ps(x.v, y.v)}; }
  friend LanesAvx512 exp(LanesAvx512 x) { return {exp_poly<Ops512>(x.v)}; }
  __m256 lo() const { return _mm512_castps512_ps256(v); }
  __m256 hi() const {  // lanes 8-15 moved down (128-bit blocks 2, 3 into 0, 1)
    return _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
  }
};
#endif

struct RowStats {
  float max;  // row max (>= -FLT_MAX)
  float sum;  // sum_j exp(x_j - max)
};

// Online (chunked) max / sum-of-exp over one row. See the header comment for the order.
// `next` is only a prefetch hint: the row that will be read after this one. V: the lanes type.
template <class D, class V>
RowStats row_stats(const typename D::T* row, const typename D::T* next, int64_t vocab, float* buf) {
  const int64_t ahead = std::min(kPrefetchAhead, vocab);  // prefetch distance in columns
  // Lane max starts at -FLT_MAX (not -inf) so that a lane that has only seen -inf entries has
  // m = -FLT_MAX, s = 0 and every exp() argument stays a number (-inf - -inf would be NaN).
  V m = V::set1(-FLT_MAX);
  V s = V::set1(0.0f);
  for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
    const int64_t len = std::min(kChunk, vocab - c0);
    int64_t padded;
    const float* xs = chunk_values<D>(row, c0, len, buf, &padded);
    // Pass 1: lane max over the chunk. max is exact, so its order is irrelevant: even and odd
    // 16-column groups go to separate registers (two independent dependency chains per lane)
    // and are merged at the end. (Only the sign of a zero max or which NaN survives could
    // depend on it; both are still fixed by V, and a NaN anywhere makes the sum NaN.)
    V even = m, odd = m;
    int64_t i = 0;
    for (; i + 2 * kLanes <= padded; i += 2 * kLanes) {
      even = max(even, V::load(xs + i));
      odd = max(odd, V::load(xs + i + kLanes));
    }
    if (i < padded) even = max(even, V::load(xs + i));
    const V n = max(even, odd);
    // Pass 2: each lane sums its columns of this chunk, in increasing column order (one
    // accumulator per lane: this is the reduction order, fixed by V).
    V c = V::set1(0.0f);
    for (i = 0; i < padded; i += kLanes) {
      prefetch_col(row, next, vocab, c0 + i + ahead);
      c = c + exp(V::load(xs + i) - n);
    }
    // Rescale the running sums to the new lane max (exp(0) == 1 exactly when unchanged), then
    // add the chunk's sums: always in this order, so the result depends on V alone.
    s = s * exp(m - n) + c;
    m = n;
  }
  RowStats st;
  st.max = tree_max16(m.lo(), m.hi());
  s = s * exp(m - V::set1(st.max));
  st.sum = tree_sum16(s.lo(), s.hi());
  return st;
}

inline bool target_ok(int64_t t, int64_t vocab) { return t >= 0 && t < vocab; }

template <class D, class V>
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
    const RowStats st = row_stats<D, V>(row, next, vocab, buf);
    const float xt = D::load1(row + t);
    out[n] = (xt - st.max) - std::log(st.sum);
  }
}

template <class D, class V>
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
    const RowStats st = row_stats<D, V>(row, row, vocab, buf);
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

// The row loops for every dtype, with lanes type V, behind one function pointer each.
template <class V>
void forward_any(int dtype, const void* logits, const int64_t* target, float* out, int64_t r0,
                 int64_t r1, int64_t vocab, int64_t stride) {
  switch (dtype) {
    case KC_FLOAT32:
      forward_rows<F32, V>(static_cast<const float*>(logits), target, out, r0, r1, vocab, stride);
      break;
    case KC_BFLOAT16:
      forward_rows<BF16, V>(static_cast<const uint16_t*>(logits), target, out, r0, r1, vocab,
                            stride);
      break;
    default:
      forward_rows<F16, V>(static_cast<const uint16_t*>(logits), target, out, r0, r1, vocab,
                           stride);
      break;
  }
}

template <class V>
void backward_any(int dtype, const void* logits, const int64_t* target, const float* g, void* grad,
                  int64_t r0, int64_t r1, int64_t vocab, int64_t stride) {
  switch (dtype) {
    case KC_FLOAT32:
      backward_rows<F32, V>(static_cast<const float*>(logits), target, g, static_cast<float*>(grad),
                            r0, r1, vocab, stride);
      break;
    case KC_BFLOAT16:
      backward_rows<BF16, V>(static_cast<const uint16_t*>(logits), target, g,
                             static_cast<uint16_t*>(grad), r0, r1, vocab, stride);
      break;
    default:
      backward_rows<F16, V>(static_cast<const uint16_t*>(logits), target, g,
                            static_cast<uint16_t*>(grad), r0, r1, vocab, stride);
      break;
  }
}

}  // namespace
