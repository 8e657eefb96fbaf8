// logp_cpu_x86.h - the x86 lanes types for logp_cpu_rows.h: LanesAvx2 (two 8-lane registers)
// and, in a file built with -mavx512f, LanesAvx512 (one 16-lane register), with the dtype
// conversions 8 at a time (AVX2 + F16C). Included only by logp_cpu_avx2.cpp and
// logp_cpu_avx512.cpp, which CMake builds on x86 alone, with these flags.
//
// Every operation is per lane and the same IEEE operation as LanesPortable's (max with the same
// operand order, so the same NaN and signed zero survive; the same fused multiply-adds in exp;
// conversions with the same rounding), so every build computes the same bits in every lane:
// only how many lanes one instruction covers differs.
#pragma once

#include <immintrin.h>

#include "logp_cpu_rows.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "logp_cpu_x86.h must be compiled with -mavx2 -mfma -mf16c"
#endif

namespace {

// The instruction set's operations on one register, for exp_poly.
struct Ops256 {
  using R = __m256;
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }  // MAXPS: a > b ? a : b per lane
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }
  static R shl23(R t) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)); }
};

// 8 elements of dtype D to/from one __m256: the same values as D::load1 / D::store1.
template <class D>
struct Vec8;

template <>
struct Vec8<F32> {
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
};

template <>
struct Vec8<BF16> {
  static __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void store(uint16_t* p, __m256 v) {
    // RNE: bits + 0x7fff + lsb, >> 16; NaN -> quiet NaN with the sign kept (BF16::store1).
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

template <>
struct Vec8<F16> {
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// The whole groups of 8 of a chunk's `len` elements, decoded with vector loads; returns how
// many (decode_chunk converts the rest one by one).
template <class D>
inline int64_t decode8(const typename D::T* p, int64_t len, float* buf) {
  const int64_t full = len - len % 8;
  for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(buf + i, Vec8<D>::load(p + i));
  return full;
}

// Each NaN lane replaced by the canonical NaN (canonical_nan in logp_cpu_rows.h).
inline __m256 canonical_nan8(__m256 v) {
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  return _mm256_blendv_ps(v, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

struct LanesAvx2 {  // two 8-lane registers: lanes 0-7 and 8-15
  __m256 a, b;
  static LanesAvx2 set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static LanesAvx2 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  void store(float* p) const {
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
  }
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
  friend LanesAvx2 operator/(LanesAvx2 x, LanesAvx2 y) {
    return {_mm256_div_ps(x.a, y.a), _mm256_div_ps(x.b, y.b)};
  }
  friend LanesAvx2 exp(LanesAvx2 x) { return {exp_poly<Ops256>(x.a), exp_poly<Ops256>(x.b)}; }
  friend LanesAvx2 canonical_nan(LanesAvx2 x) { return {canonical_nan8(x.a), canonical_nan8(x.b)}; }
  template <class D>
  static int64_t decode(const typename D::T* p, int64_t len, float* buf) {
    return decode8<D>(p, len, buf);
  }
  template <class D>
  void encode(typename D::T* p) const {
    Vec8<D>::store(p, a);
    Vec8<D>::store(p + 8, b);
  }
};

#if defined(__AVX512F__)
struct Ops512 {
  using R = __m512;
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }  // MAXPS rule, as Ops256
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
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  friend LanesAvx512 max(LanesAvx512 x, LanesAvx512 y) { return {_mm512_max_ps(x.v, y.v)}; }
  friend LanesAvx512 operator+(LanesAvx512 x, LanesAvx512 y) { return {_mm512_add_ps(x.v, y.v)}; }
  friend LanesAvx512 operator-(LanesAvx512 x, LanesAvx512 y) { return {_mm512_sub_ps(x.v, y.v)}; }
  friend LanesAvx512 operator*(LanesAvx512 x, LanesAvx512 y) { return {_mm512_mul_ps(x.v, y.v)}; }
  friend LanesAvx512 operator/(LanesAvx512 x, LanesAvx512 y) { return {_mm512_div_ps(x.v, y.v)}; }
  friend LanesAvx512 exp(LanesAvx512 x) { return {exp_poly<Ops512>(x.v)}; }
  friend LanesAvx512 canonical_nan(LanesAvx512 x) {
    const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q), x.v, nan)};
  }
  template <class D>
  static int64_t decode(const typename D::T* p, int64_t len, float* buf) {
    return decode8<D>(p, len, buf);
  }
  template <class D>
  void encode(typename D::T* p) const {
    // lanes 0-7, then lanes 8-15 (128-bit blocks 2, 3 moved down), through the AVX2 stores
    Vec8<D>::store(p, _mm512_castps512_ps256(v));
    Vec8<D>::store(p + 8,
                   _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2))));
  }
};
#endif

}  // namespace
