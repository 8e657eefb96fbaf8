// logp_cuda.cu - deterministic fused log-prob (logits[t] - logsumexp(logits)) for CUDA.
//
// Determinism contract (bitwise identical output whatever the batch size, the row's position,
// the grid size or the row's address alignment):
//
//  * One thread block reduces one row end to end: no split of a row over blocks, no atomics.
//  * The block size is chosen from V alone (V <= 128 -> 128, V <= 4096 -> 256, else 512).
//  * Rows are strided over a capped grid (row = blockIdx.x; row += gridDim.x): which block takes
//    a row never changes that row's arithmetic.
//  * Columns are split into groups of K = 16 / sizeof(T) consecutive columns (4 for fp32, 8 for
//    16-bit), counted from the row start. Thread t owns groups t, t + B, t + 2B, ... and visits
//    them in that order; inside a group it visits the columns in increasing order. A group is
//    fetched with one 16-byte load when the row start is 16-byte aligned and with K scalar loads
//    otherwise (and for the last, partial group): only the load instruction differs, the
//    element-to-thread assignment and the accumulation order are identical, so the result does
//    not depend on alignment.
//  * Single online pass per thread: running max m and sum s = sum exp(x - m) in fp32, with the
//    rounding error e that s carries (Kahan: the thread's sum is s - e). Per group:
//    m' = max(m, group max); s and e each times exp(m - m') (skipped when m' == m, where it
//    would be * 1); then exp(x - m') is added for each column of the group in order, by
//    compensated addition (why: kernels_cpu/logp_cpu.cpp, whose lanes do the same). s - e
//    enters the merge.
//  * (m, s) pairs are merged with merge(a, b) = (M, a.s * exp(a.m - M) + b.s * exp(b.m - M)),
//    M = max(a.m, b.m), through a warp shuffle-down tree (offsets 16, 8, 4, 2, 1), then lane 0
//    of each warp writes a __shared__ array of fixed shape [32]; warp 0 reads it (padding
//    (-FLT_MAX, 0) for missing warps) and runs the same shuffle tree.
//  * m starts at -FLT_MAX (not -inf) so masked (-inf) entries give exp(-inf) = 0 and no
//    -inf - -inf = NaN appears.
//  * No --use_fast_math: expf/logf are the accurate CUDA libdevice versions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "kc_abi_common.h"
#include "kc_logp.h"

namespace {

constexpr int kMaxWarps = 32;

// Block size from V only.
inline int block_for_vocab(int64_t vocab) {
  if (vocab <= 128) return 128;
  if (vocab <= 4096) return 256;
  return 512;
}

inline unsigned grid_for_rows(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

// ---- dtype traits ----------------------------------------------------------------------------
template <class T>
struct Traits;

template <>
struct Traits<float> {
  static constexpr int K = 4;  // elements per 16-byte group
  __device__ static inline float to_f(float v) { return v; }
  __device__ static inline float from_f(float v) { return v; }
  __device__ static inline void unpack(const uint4& u, float* x) {
    x[0] = __uint_as_float(u.x);
    x[1] = __uint_as_float(u.y);
    x[2] = __uint_as_float(u.z);
    x[3] = __uint_as_float(u.w);
  }
};

template <>
struct Traits<__nv_bfloat16> {
  static constexpr int K = 8;
  __device__ static inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static inline __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
  __device__ static inline void unpack(const uint4& u, float* x) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};

template <>
struct Traits<__half> {
  static constexpr int K = 8;
  __device__ static inline float to_f(__half v) { return __half2float(v); }
  __device__ static inline __half from_f(float v) { return __float2half_rn(v); }
  __device__ static inline void unpack(const uint4& u, float* x) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
      x[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
};

// ---- (m, s) reduction ----------------------------------------------------------------------
struct MS {
  float m;
  float s;
};

__device__ inline MS merge(MS a, MS b) {
  const float M = fmaxf(a.m, b.m);
  MS r;
  r.m = M;
  // __fmul_rn/__fadd_rn: never contracted into FMA, so every inlined copy rounds alike.
  r.s = __fadd_rn(__fmul_rn(a.s, expf(a.m - M)), __fmul_rn(b.s, expf(b.m - M)));
  return r;
}

__device__ inline MS warp_reduce(MS v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    MS o;
    o.m = __shfl_down_sync(0xffffffffu, v.m, off);
    o.s = __shfl_down_sync(0xffffffffu, v.s, off);
    v = merge(v, o);
  }
  return v;
}

// One thread's running (m, s) and the rounding error e that s carries: its sum is s - e.
struct Running {
  float m;
  float s;
  float e;
};

// Accumulate one group of n (<= K) decoded columns into acc, columns in order, by compensated
// (Kahan) addition; __fadd_rn/__fsub_rn keep the compiler from re-associating it away.
template <int K>
__device__ inline void accumulate_group(Running& acc, const float* x, int n) {
  float gm = acc.m;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (i < n) gm = fmaxf(gm, x[i]);
  if (gm != acc.m) {  // rescale only when the max moved (otherwise it is * exp(0) == * 1)
    const float f = expf(acc.m - gm);
    acc.s = __fmul_rn(acc.s, f);
    acc.e = __fmul_rn(acc.e, f);
    acc.m = gm;
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (i < n) {
      const float y = __fsub_rn(expf(x[i] - gm), acc.e);
      const float t = __fadd_rn(acc.s, y);
      acc.e = __fsub_rn(__fsub_rn(t, acc.s), y);
      acc.s = t;
    }
  }
}

// Fetch group g (columns [g*K, g*K + n)) into x. `vec` = row start is 16-byte aligned.
template <class T>
__device__ inline void load_group(const T* __restrict__ row, int64_t g, int n, bool vec, float* x) {
  constexpr int K = Traits<T>::K;
  const T* p = row + g * K;
  if (vec && n == K) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    Traits<T>::unpack(u, x);
  } else {
#pragma unroll
    for (int i = 0; i < K; ++i) x[i] = (i < n) ? Traits<T>::to_f(p[i]) : -FLT_MAX;
  }
}

// Columns of group g that exist: min(K, vocab - g*K).
template <int K>
__device__ inline int64_t cols_left(int64_t vocab, int64_t g) {
  const int64_t left = vocab - g * K;
  return left < K ? left : K;
}

// Block-wide (max, sum exp(x - max)) of one row. Every thread returns the block result.
template <class T>
__device__ MS row_stats(const T* __restrict__ row, int64_t vocab, MS* shared_ms) {
  constexpr int K = Traits<T>::K;
  const int B = blockDim.x;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
  const int64_t groups = (vocab + K - 1) / K;
  Running run;
  run.m = -FLT_MAX;
  run.s = 0.0f;
  run.e = 0.0f;
  int64_t g = threadIdx.x;
  // Two groups in flight per iteration for memory-level parallelism; the accumulation order
  // (group g, then g + B) is the same as in the one-group loop below.
  for (; g + B < groups; g += 2 * B) {
    float x0[K], x1[K];
    load_group<T>(row, g, K, vec, x0);
    const int n1 = static_cast<int>(cols_left<K>(vocab, g + B));
    load_group<T>(row, g + B, n1, vec, x1);
    accumulate_group<K>(run, x0, K);
    accumulate_group<K>(run, x1, n1);
  }
  for (; g < groups; g += B) {
    float x[K];
    const int n = static_cast<int>(cols_left<K>(vocab, g));
    load_group<T>(row, g, n, vec, x);
    accumulate_group<K>(run, x, n);
  }
  MS acc;
  acc.m = run.m;
  acc.s = __fsub_rn(run.s, run.e);

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = B >> 5;
  acc = warp_reduce(acc);
  if (lane == 0) shared_ms[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    MS v;
    if (lane < nwarps) {
      v = shared_ms[lane];
    } else {
      v.m = -FLT_MAX;
      v.s = 0.0f;
    }
    v = warp_reduce(v);
    if (lane == 0) shared_ms[kMaxWarps] = v;
  }
  __syncthreads();
  const MS r = shared_ms[kMaxWarps];
  __syncthreads();  // shared_ms is reused by the next row
  return r;
}

template <class T>
__global__ void logp_forward_kernel(const T* __restrict__ logits,
                                    const int64_t* __restrict__ target, float* __restrict__ out,
                                    int64_t rows, int64_t vocab, int64_t stride) {
  __shared__ MS shared_ms[kMaxWarps + 1];
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const int64_t t = target[n];
    if (t < 0 || t >= vocab) {  // uniform over the block: skip the row
      if (threadIdx.x == 0) out[n] = 0.0f;
      continue;
    }
    const T* row = logits + n * stride;
    const MS st = row_stats<T>(row, vocab, shared_ms);
    if (threadIdx.x == 0) {
      const float xt = Traits<T>::to_f(row[t]);
      out[n] = (xt - st.m) - logf(st.s);
    }
  }
}

template <class T>
__global__ void logp_backward_kernel(const T* __restrict__ logits,
                                     const int64_t* __restrict__ target,
                                     const float* __restrict__ grad_out, T* __restrict__ grad,
                                     int64_t rows, int64_t vocab, int64_t stride) {
  __shared__ MS shared_ms[kMaxWarps + 1];
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const int64_t t = target[n];
    T* grow = grad + n * vocab;
    if (t < 0 || t >= vocab) {
      const T z = Traits<T>::from_f(0.0f);
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) grow[j] = z;
      continue;
    }
    const T* row = logits + n * stride;
    const MS st = row_stats<T>(row, vocab, shared_ms);
    const float g = grad_out[n];
    // Element-wise: g * (onehot - exp(x - max) / sum), fp32, cast with round-to-nearest-even.
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float p = expf(Traits<T>::to_f(row[j]) - st.m) / st.s;
      const float oh = (j == t) ? 1.0f : 0.0f;
      grow[j] = Traits<T>::from_f(__fmul_rn(g, oh - p));
    }
  }
}

// Last CUDA error text, for kc_status_string(KC_ERR_LAUNCH / KC_ERR_DEVICE).
thread_local const char* g_last_cuda_error = nullptr;

int status_from(cudaError_t e) {
  if (e == cudaSuccess) return KC_OK;
  g_last_cuda_error = cudaGetErrorString(e);
  switch (e) {
    case cudaErrorInvalidConfiguration:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
      return KC_ERR_LAUNCH;
    default:
      return KC_ERR_DEVICE;
  }
}

template <class T>
int launch_forward(const void* logits, const int64_t* target, float* out, int64_t rows,
                   int64_t vocab, int64_t stride, cudaStream_t stream) {
  logp_forward_kernel<T><<<grid_for_rows(rows), block_for_vocab(vocab), 0, stream>>>(
      static_cast<const T*>(logits), target, out, rows, vocab, stride);
  return status_from(cudaGetLastError());
}

template <class T>
int launch_backward(const void* logits, const int64_t* target, const float* g, void* grad,
                    int64_t rows, int64_t vocab, int64_t stride, cudaStream_t stream) {
  logp_backward_kernel<T><<<grid_for_rows(rows), block_for_vocab(vocab), 0, stream>>>(
      static_cast<const T*>(logits), target, g, static_cast<T*>(grad), rows, vocab, stride);
  return status_from(cudaGetLastError());
}

}  // namespace

extern "C" {

KC_API int kc_abi_version(void) { return KC_ABI_VERSION; }

KC_API const char* kc_backend_name(void) { return "cuda"; }

KC_API const char* kc_status_string(int status) {
  return kc_status_text(status, g_last_cuda_error ? g_last_cuda_error : "kernel launch failed",
                        g_last_cuda_error ? g_last_cuda_error : "CUDA device error");
}

KC_API int kc_set_num_threads(int n) {
  (void)n;
  return KC_OK;
}

KC_API int kc_cuda_device_count(void) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    g_last_cuda_error = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error state
    return -1;
  }
  return count;
}

KC_API int kc_logp_forward(int dtype, const void* logits, const int64_t* target, float* out,
                           int64_t rows, int64_t vocab, int64_t row_stride, void* stream) {
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;  // launches nothing
  if (!logits || !target || !out) return KC_ERR_NULL;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KC_FLOAT32:
      return launch_forward<float>(logits, target, out, rows, vocab, row_stride, s);
    case KC_BFLOAT16:
      return launch_forward<__nv_bfloat16>(logits, target, out, rows, vocab, row_stride, s);
    default:
      return launch_forward<__half>(logits, target, out, rows, vocab, row_stride, s);
  }
}

KC_API int kc_logp_backward(int dtype, const void* logits, const int64_t* target,
                            const float* grad_out, void* grad_logits, int64_t rows, int64_t vocab,
                            int64_t row_stride, void* stream) {
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;
  if (!logits || !target || !grad_out || !grad_logits) return KC_ERR_NULL;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KC_FLOAT32:
      return launch_backward<float>(logits, target, grad_out, grad_logits, rows, vocab, row_stride,
                                    s);
    case KC_BFLOAT16:
      return launch_backward<__nv_bfloat16>(logits, target, grad_out, grad_logits, rows, vocab,
                                            row_stride, s);
    default:
      return launch_backward<__half>(logits, target, grad_out, grad_logits, rows, vocab, row_stride,
                                     s);
  }
}

}  // extern "C"
