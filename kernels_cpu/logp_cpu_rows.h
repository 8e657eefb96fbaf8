// logp_cpu_rows.h - the row loops of libkc_logp_cpu, written once, templated on the lanes type V
// (16 fp32 lanes as a value) and instantiated by one file per build:
//   logp_cpu_portable.cpp  LanesPortable (below): plain C++, no ISA flags, any CPU;
//   logp_cpu_avx2.cpp      LanesAvx2 (logp_cpu_x86.h): two 8-lane AVX2 registers;
//   logp_cpu_avx512.cpp    LanesAvx512 (logp_cpu_x86.h): one 16-lane AVX-512 register.
// Everything here has internal linkage, so each file keeps its own copy, compiled for its own
// instruction set (a shared inline function would be one weak symbol, taken from either file).
// The determinism contract is in logp_cpu.cpp's header comment; what makes the three builds
// give the same bits is said where it is decided, below.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kc_logp.h"
#include "logp_cpu_kernels.h"

namespace {

constexpr int64_t kLanes = 16;    // fp32 lanes: column j -> lane j % kLanes, in every build
constexpr int64_t kChunk = 2048;  // columns per chunk (multiple of kLanes); 8 KiB scratch
static_assert(kChunk % kLanes == 0, "chunk must be a whole number of lane groups");
// Software prefetch distance in columns (into L2). Measured at 512 x 151936 on a 2-core AVX2
// machine: L2 prefetches 4096 columns ahead beat L1 prefetches one 2048-column chunk ahead by
// ~10%; longer distances were no better. Only timing depends on it, never a value.
constexpr int64_t kPrefetchAhead = 4096;

// ---------------------------------------------------------------------------------------------
// exp for fp32, for x <= 0 (callers pass x - max) or NaN; 13 operations. n = round(x * log2(e)),
// r = x - n*ln2 (two-part ln2, fma: n*ln2_hi is exact), exp(r) by a degree-6 polynomial in
// Horner form (p(0) = 1 exactly, so exp(0) == 1), result = exp(r) * 2^n. The coefficients are a
// near-minimax fit of exp on [-ln2/2, ln2/2] (relative error 4e-9, far below fp32 rounding);
// measured over every fp32 x in [-87, 0] the result is within 0.89 ulp of exp(x).
//  * round(): one fma adds 1.5 * 2^23 + 127 to x * log2(e), so the sum is rounded to an integer,
//    and its low mantissa bits are n + 127: shifted into the exponent field they are 2^n, with no
//    float -> int conversion.
//  * x is clamped to -88 first, where n = -127: the shifted bits are then all zero and the result
//    is exactly +0 (this is how x = -inf, and any x below about -87.7, gives 0). Between -87.7
//    and ln(FLT_MIN) = -87.34 the result is subnormal, as exp's is. NaN propagates.
// O is the instruction set's operations on one register (OpsScalar here; Ops256, Ops512 in
// logp_cpu_x86.h). One algorithm and one set of constants for every width: every lane gets the
// same IEEE operations (each fmadd one rounding: std::fma is the vector FMA of one lane).
// ---------------------------------------------------------------------------------------------
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

// max with the x86 MAXPS rule: a > b ? a : b, so the second operand comes out when either is
// NaN or both are zeros (of either sign). Every build uses this rule, the portable one too.
inline float max_sse(float a, float b) { return a > b ? a : b; }

// One fp32 lane: the scalar form of each vector operation.
struct OpsScalar {
  using R = float;
  static R set1(float v) { return v; }
  static R max(R a, R b) { return max_sse(a, b); }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R fmadd(R a, R b, R c) { return std::fma(a, b, c); }  // a*b + c, one rounding
  // -(a*b) + c, one rounding. b is negated, not a: b is always a constant here, and a NaN in a
  // must come out as FNMADD returns it, sign unchanged (-a would flip a NaN's sign bit).
  static R fnmadd(R a, R b, R c) { return std::fma(a, -b, c); }
  static R shl23(R t) {
    uint32_t u;
    std::memcpy(&u, &t, 4);
    u <<= 23;
    std::memcpy(&t, &u, 4);
    return t;
  }
};

// ---------------------------------------------------------------------------------------------
// dtype decode/encode, one element (the x86 builds convert 8 at a time with the same results,
// logp_cpu_x86.h). 16-bit decode is exact; encode is round-to-nearest-even, in integer
// arithmetic: no rounding mode, no flush-to-zero setting and no FPU can change it.
// ---------------------------------------------------------------------------------------------
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every NaN result (an output, a gradient element) is written as this one quiet NaN: +, payload
// 0 (bf16 0x7fc0, fp16 0x7e00 once converted). Which NaN an operation returns when both operands
// are NaN depends on the operand order the compiler picks for a commutative + or *, and a NaN an
// operation makes (inf - inf) is -NaN on x86 and +NaN on ARM: none of that may show in the bits.
// Whether a result is NaN depends on the values alone, so this makes every output bit the same in
// every build, on every CPU.
inline float canonical_nan(float v) { return v != v ? bits_float(0x7fc00000u) : v; }

struct F32 {
  using T = float;
  static inline float load1(const T* p) { return *p; }
  static inline void store1(T* p, float v) { *p = v; }
};

struct BF16 {
  using T = uint16_t;
  static inline float load1(const T* p) { return bits_float(static_cast<uint32_t>(*p) << 16); }
  // RNE: bits + 0x7fff + lsb, >> 16; NaN -> quiet NaN with the sign and top payload kept.
  // (The AVX2 store8 computes the same integers lane by lane.)
  static inline void store1(T* p, float v) {
    const uint32_t b = float_bits(v);
    const uint32_t r = v != v ? (b >> 16) | 0x0040u : (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    *p = static_cast<T>(r);
  }
};

struct F16 {
  using T = uint16_t;
  // IEEE half -> float, exact, as F16C's VCVTPH2PS: subnormals normalised, NaN payload kept
  // (quieted).
  static inline float load1(const T* p) {
    const uint32_t h = *p;
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return bits_float(sign);
    int e = 113;  // subnormal: man * 2^-24; shift the leading one up to the implicit bit
    while (!(man & 0x400u)) {
      man <<= 1;
      --e;
    }
    return bits_float(sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ffu) << 13));
  }
  // float -> IEEE half, round to nearest even, as F16C's VCVTPS2PH with _MM_FROUND_TO_NEAREST_INT
  // (overflow to inf, subnormal results rounded, NaN quieted with its top payload kept).
  static inline void store1(T* p, float v) {
    const uint32_t b = float_bits(v);
    const uint32_t sign = (b >> 16) & 0x8000u;
    const uint32_t a = b & 0x7fffffffu;
    uint32_t h;
    if (a > 0x7f800000u) {
      h = 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN
    } else if (a >= 0x477ff000u) {
      h = 0x7c00u;                  // >= 65520 (halfway above 65504, the largest half) and inf: inf
    } else if (a >= 0x38800000u) {  // a normal half: rebias the exponent, round 13 bits away
      const uint32_t r = a - 0x38000000u;
      h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    } else if (a > 0x33000000u) {  // subnormal half (2^-25 itself is a tie: to even, 0)
      const uint32_t man = (a & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - (a >> 23);  // man * 2^(e-150) in units of 2^-24
      const uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
      h = q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
    } else {
      h = 0;
    }
    *p = static_cast<T>(sign | h);
  }
};

// ---------------------------------------------------------------------------------------------
// The 16 lanes in plain C++: an array, each operation a loop over the lanes (the compiler may
// turn a loop into vector instructions of the baseline ISA, SSE2 or NEON; they do the same IEEE
// operation per lane, and -ffp-contract=off keeps any a*b + c unfused). The interface of the
// lanes types, shared by LanesAvx2 and LanesAvx512:
//   set1, load (16 fp32 values), store (16 fp32 values to an array), max (MAXPS rule), + - * /,
//   exp (exp_poly), canonical_nan, decode<D> (how many leading elements of a chunk it converts with
//   vector loads; decode_chunk does the rest one by one) and encode<D> (16 lanes to the dtype).
// ---------------------------------------------------------------------------------------------
struct LanesPortable {
  float v[kLanes];
  template <class F>
  static LanesPortable map(F f) {
    LanesPortable r;
    for (int k = 0; k < kLanes; ++k) r.v[k] = f(k);
    return r;
  }
  static LanesPortable set1(float x) {
    return map([x](int) { return x; });
  }
  static LanesPortable load(const float* p) {
    return map([p](int k) { return p[k]; });
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
  friend LanesPortable max(const LanesPortable& x, const LanesPortable& y) {
    return map([&](int k) { return max_sse(x.v[k], y.v[k]); });
  }
  friend LanesPortable operator+(const LanesPortable& x, const LanesPortable& y) {
    return map([&](int k) { return x.v[k] + y.v[k]; });
  }
  friend LanesPortable operator-(const LanesPortable& x, const LanesPortable& y) {
    return map([&](int k) { return x.v[k] - y.v[k]; });
  }
  friend LanesPortable operator*(const LanesPortable& x, const LanesPortable& y) {
    return map([&](int k) { return x.v[k] * y.v[k]; });
  }
  friend LanesPortable operator/(const LanesPortable& x, const LanesPortable& y) {
    return map([&](int k) { return x.v[k] / y.v[k]; });
  }
  friend LanesPortable exp(const LanesPortable& x) {
    return map([&](int k) { return exp_poly<OpsScalar>(x.v[k]); });
  }
  friend LanesPortable canonical_nan(const LanesPortable& x) {
    return map([&](int k) { return canonical_nan(x.v[k]); });
  }
  template <class D>
  static int64_t decode(const typename D::T*, int64_t, float*) {
    return 0;  // all one by one
  }
  template <class D>
  void encode(typename D::T* p) const {
    for (int k = 0; k < kLanes; ++k) D::store1(p + k, v[k]);
  }
};

// Decode columns [c0, c0 + len) of `row` into buf[0, padded) where padded = len rounded up to
// kLanes; the padding is -inf. Returns padded. V's vector loads take what they can, scalar loads
// the rest: decoding is exact, so both give the same fp32 values.
template <class D, class V>
inline int64_t decode_chunk(const typename D::T* row, int64_t c0, int64_t len, float* buf) {
  int64_t i = V::template decode<D>(row + c0, len, buf);
  for (; i < len; ++i) buf[i] = D::load1(row + c0 + i);
  const int64_t padded = (len + kLanes - 1) / kLanes * kLanes;
  for (; i < padded; ++i) buf[i] = -INFINITY;
  return padded;
}

// The chunk's columns [c0, c0 + len) as fp32 values: an fp32 chunk of whole lane groups is read
// in place (no copy, no padding needed); anything else is decoded into buf by decode_chunk.
// Either way the passes below see the same values at the same column indices.
template <class D, class V>
inline const float* chunk_values(const typename D::T* row, int64_t c0, int64_t len, float* buf,
                                 int64_t* padded) {
  if (std::is_same<D, F32>::value && len % kLanes == 0) {
    *padded = len;
    return reinterpret_cast<const float*>(row + c0);
  }
  *padded = decode_chunk<D, V>(row, c0, len, buf);
  return buf;
}

// Software prefetch, kPrefetchAhead columns ahead of the columns being computed on, so that the
// memory reads overlap the exp arithmetic instead of alternating with it. Column q of `row`, or
// once q runs past the row end, column q - vocab of `next` (the row processed next). Callers keep
// q < vocab + min(kPrefetchAhead, vocab), so the address stays inside one of the two rows.
// Prefetching only moves cache lines; it never changes a value. (Into L2: locality 2 is x86's
// prefetcht1; other CPUs take the hint as they can.)
template <class T>
inline void prefetch_col(const T* row, const T* next, int64_t vocab, int64_t q) {
  const T* p = q < vocab ? row + q : next + (q - vocab);
  __builtin_prefetch(p, 0, 2);
}

// The fixed pairwise tree over the 16 lanes, the same code in every build (the lanes are stored
// to an array first): lane i with lane i+8, then i with i+4, i with i+2, i with i+1, the lower
// lane always the first operand, so that max's NaN/zero rule and addition's NaN rule pick the
// same lane in every build. (The AVX2 build used to do this tree on its registers, in this very
// order: movehl/shuffle steps; one scalar copy keeps the three builds from drifting apart.)
template <class Op>
inline float tree16(const float* lanes, Op op) {
  float x[8];
  for (int i = 0; i < 8; ++i) x[i] = op(lanes[i], lanes[i + 8]);
  for (int i = 0; i < 4; ++i) x[i] = op(x[i], x[i + 4]);
  for (int i = 0; i < 2; ++i) x[i] = op(x[i], x[i + 2]);
  return op(x[0], x[1]);
}
template <class V>
inline float tree_max16(const V& m) {
  alignas(64) float lanes[kLanes];
  m.store(lanes);
  return tree16(lanes, max_sse);
}
template <class V>
inline float tree_sum16(const V& s) {
  alignas(64) float lanes[kLanes];
  s.store(lanes);
  return tree16(lanes, [](float a, float b) { return a + b; });
}

// ln(s) of a row's sum of exps (s >= 1 when the row max is finite; 0 for an all -inf row; inf or
// NaN pass through), the same bits on every machine: no libm call (logf differs between C
// libraries, and within glibc between its FMA and SSE2 variants). s = m * 2^k, m in
// [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(t), t = (m - 1)/(m + 1), |t| < 0.172, summed in double to
// t^23 (next term < 1e-18 of the sum) by Horner; ln(s) = k ln2 + ln(m) in double, rounded once to
// float. Every step is a basic IEEE double operation (no fused ones: -ffp-contract=off), so the
// result is deterministic; it is the correctly rounded ln(s) unless ln(s) lies within ~1e-16 of
// halfway between two floats.
inline float log_row_sum(float s) {
  if (s == 0.0f) return -INFINITY;
  if (!(s > 0.0f) || s == INFINITY) return s + s;  // NaN stays NaN; +inf stays +inf
  int k = 0;
  if (s < FLT_MIN) {  // subnormal (not reached by a row sum; kept total): make it normal
    s *= 8388608.0f;  // 2^23, exact
    k = -23;
  }
  const uint32_t b = float_bits(s);
  k += static_cast<int>(b >> 23) - 127;
  double m = bits_float((b & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.4142135623730951) {
    m *= 0.5;  // exact
    ++k;
  }
  const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
  double p = 1.0 / 23.0;
  for (int d = 21; d >= 1; d -= 2) p = p * t2 + 1.0 / d;
  const double ln_m = 2.0 * t * p;
  return static_cast<float>(static_cast<double>(k) * 0.6931471805599453 + ln_m);
}

struct RowStats {
  float max;  // row max (>= -FLT_MAX)
  float sum;  // sum_j exp(x_j - max)
};

// Online (chunked) max / sum-of-exp over one row. See the header comment of logp_cpu.cpp for
// the order. `next` is only a prefetch hint: the row that will be read after this one.
template <class D, class V>
RowStats row_stats(const typename D::T* row, const typename D::T* next, int64_t vocab, float* buf) {
  const int64_t ahead = std::min(kPrefetchAhead, vocab);  // prefetch distance in columns
  // Lane max starts at -FLT_MAX (not -inf) so that a lane that has only seen -inf entries has
  // m = -FLT_MAX, s = 0 and every exp() argument stays a number (-inf - -inf would be NaN).
  V m = V::set1(-FLT_MAX);
  V s = V::set1(0.0f);
  V e = V::set1(0.0f);  // the rounding error s carries (Kahan): the lane's sum is s - e
  for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
    const int64_t len = std::min(kChunk, vocab - c0);
    int64_t padded;
    const float* xs = chunk_values<D, V>(row, c0, len, buf, &padded);
    // Pass 1: lane max over the chunk. max is exact, so its order changes no number: even and
    // odd 16-column groups go to separate accumulators (two independent dependency chains per
    // lane) and are merged at the end. (Only the sign of a zero max or which NaN survives could
    // depend on it; both are fixed here, the same in every build, and a NaN anywhere makes the
    // sum NaN.)
    V even = m, odd = m;
    int64_t i = 0;
    for (; i + 2 * kLanes <= padded; i += 2 * kLanes) {
      even = max(even, V::load(xs + i));
      odd = max(odd, V::load(xs + i + kLanes));
    }
    if (i < padded) even = max(even, V::load(xs + i));
    const V n = max(even, odd);
    // Rescale the running sum and its error to the new lane max (exp(0) == 1 exactly when
    // unchanged), then pass 2: each lane adds its columns of this chunk, in increasing column
    // order, by compensated (Kahan) addition (why: the header comment of logp_cpu.cpp). This
    // is the reduction order, the same in every build: a wider register only does more lanes
    // per instruction, never regroups a lane's terms.
    const V f = exp(m - n);
    s = s * f;
    e = e * f;
    for (i = 0; i < padded; i += kLanes) {
      prefetch_col(row, next, vocab, c0 + i + ahead);
      const V y = exp(V::load(xs + i) - n) - e;
      const V t = s + y;
      e = (t - s) - y;
      s = t;
    }
    m = n;
  }
  RowStats st;
  st.max = tree_max16(m);
  st.sum = tree_sum16((s - e) * exp(m - V::set1(st.max)));
  return st;
}

inline bool target_ok(int64_t t, int64_t vocab) { return t >= 0 && t < vocab; }

template <class D, class V>
void forward_rows(const typename D::T* logits, const int64_t* target, float* out, int64_t r0,
                  int64_t r1, int64_t vocab, int64_t stride) {
  alignas(64) float buf[kChunk];
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
    out[n] = canonical_nan((xt - st.max) - log_row_sum(st.sum));
  }
}

template <class D, class V>
void backward_rows(const typename D::T* logits, const int64_t* target, const float* g,
                   typename D::T* grad, int64_t r0, int64_t r1, int64_t vocab, int64_t stride) {
  using T = typename D::T;
  alignas(64) float buf[kChunk];
  alignas(64) T tmp[kLanes];
  for (int64_t n = r0; n < r1; ++n) {
    T* grow = grad + n * vocab;
    const int64_t t = target[n];
    if (!target_ok(t, vocab)) {
      std::memset(grow, 0, sizeof(T) * static_cast<size_t>(vocab));
      continue;
    }
    const T* row = logits + n * stride;
    // The gradient pass below re-reads this row, so the stats pass prefetches its start.
    const RowStats st = row_stats<D, V>(row, row, vocab, buf);
    const T* next = n + 1 < r1 ? row + stride : row;
    const int64_t ahead = std::min(kPrefetchAhead, vocab);
    // grad_j = g * (onehot_j - p_j), p_j = exp(x_j - max) / sum; element-wise, so the number of
    // lanes per instruction cannot change any result.
    const V M = V::set1(st.max), S = V::set1(st.sum), G = V::set1(g[n]), zero = V::set1(0.0f);
    for (int64_t c0 = 0; c0 < vocab; c0 += kChunk) {
      const int64_t len = std::min(kChunk, vocab - c0);
      int64_t padded;
      const float* xs = chunk_values<D, V>(row, c0, len, buf, &padded);
      for (int64_t i = 0; i < len; i += kLanes) {
        prefetch_col(row, next, vocab, c0 + i + ahead);
        const V p = exp(V::load(xs + i) - M) / S;
        // The target's lane is 1.0 in these 16 columns, if it is one of them.
        const int64_t rel = t - (c0 + i);
        V onehot = zero;
        if (rel >= 0 && rel < kLanes) {
          alignas(64) float hot[kLanes] = {};
          hot[rel] = 1.0f;
          onehot = V::load(hot);
        }
        const V gv = canonical_nan(G * (onehot - p));
        if (i + kLanes <= len) {
          gv.template encode<D>(grow + c0 + i);
        } else {
          gv.template encode<D>(tmp);
          std::memcpy(grow + c0 + i, tmp, sizeof(T) * static_cast<size_t>(len - i));
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

template <class V>
kc_cpu::RowKernels row_kernels_for() {
  return {forward_any<V>, backward_any<V>};
}

}  // namespace
