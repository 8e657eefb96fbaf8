/*
 * kc_logp.h - plain C ABI shared by every native kernelcheck backend (cpu, cuda, ...).
 *
 * Operator: logp[n] = logits[n, target[n]] - logsumexp(logits[n, :V])
 *           computed in fp32 as (x_t - rowmax) - log(sum_j exp(x_j - rowmax)).
 *
 *   logits     : rows x vocab elements of `dtype`, row n starts at logits + n * row_stride
 *                (row_stride counted in elements, row_stride >= vocab).
 *   target     : int64 [rows]; a target outside [0, vocab) yields exactly +0.0.
 *   out        : fp32 contiguous [rows].
 *   grad_out   : fp32 contiguous [rows] (the upstream gradient g).
 *   grad_logits: contiguous [rows, vocab] of `dtype`,
 *                g[n] * (onehot(target[n]) - softmax(logits[n])) in fp32, cast with
 *                round-to-nearest-even; rows with an out-of-range target are all +0.0.
 *   stream     : ignored by the CPU backend; a cudaStream_t for CUDA (NULL = default stream).
 *
 * rows == 0 does nothing and returns KC_OK. No torch headers, no C++ types.
 */
#ifndef KC_LOGP_H_
#define KC_LOGP_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KC_API __declspec(dllexport)
#else
#define KC_API __attribute__((visibility("default")))
#endif

#define KC_ABI_VERSION 1

enum kc_dtype { KC_FLOAT32 = 0, KC_BFLOAT16 = 1, KC_FLOAT16 = 2 };

enum kc_status {
  KC_OK = 0,
  KC_ERR_DTYPE = 1,
  KC_ERR_SHAPE = 2,
  KC_ERR_NULL = 3,
  KC_ERR_LAUNCH = 4,
  KC_ERR_DEVICE = 5
};

/* Returns KC_ABI_VERSION (1). */
KC_API int kc_abi_version(void);

/* "cpu" or "cuda". */
KC_API const char* kc_backend_name(void);

/* Static, never-NULL text for a kc_status value (or for the last CUDA error where relevant). */
KC_API const char* kc_status_string(int status);

/* Argument checks (in this order): unknown dtype -> KC_ERR_DTYPE; rows < 0, vocab <= 0 or
 * row_stride < vocab -> KC_ERR_SHAPE; rows == 0 -> KC_OK (nothing touched); a NULL pointer
 * argument -> KC_ERR_NULL. */
KC_API int kc_logp_forward(int dtype, const void* logits, const int64_t* target, float* out,
                           int64_t rows, int64_t vocab, int64_t row_stride, void* stream);

KC_API int kc_logp_backward(int dtype, const void* logits, const int64_t* target,
                            const float* grad_out, void* grad_logits, int64_t rows, int64_t vocab,
                            int64_t row_stride, void* stream);

/* CPU: number of threads over rows (0 = hardware concurrency, < 0 -> KC_ERR_SHAPE).
 * CUDA: no-op returning KC_OK. Results never depend on this setting. */
KC_API int kc_set_num_threads(int n);

/* CPU library only: which build of the row loops runs. KC_CPU_ISA_PORTABLE (plain C++, every
 * CPU; the only build on ARM), KC_CPU_ISA_AVX2 and KC_CPU_ISA_AVX512 (x86 builds) compute the same
 * bits; only the speed differs. 0 = the best this CPU has (the default). kc_cpu_set_isa returns
 * KC_ERR_DEVICE where the CPU or the build lacks it, KC_ERR_SHAPE for an unknown value;
 * kc_cpu_isa returns the one in use; kc_cpu_isa_support says whether one can run here
 * (enum kc_cpu_isa_support; -1 for an unknown value). */
enum kc_cpu_isa { KC_CPU_ISA_AVX2 = 1, KC_CPU_ISA_AVX512 = 2, KC_CPU_ISA_PORTABLE = 3 };
enum kc_cpu_isa_support {
  KC_CPU_ISA_RUNS = 0,      /* built in, and this CPU has it */
  KC_CPU_ISA_NOT_BUILT = 1, /* not in this library (not an x86 build, or the compiler lacks it) */
  KC_CPU_ISA_CPU_LACKS = 2  /* built in, but this CPU lacks the instructions */
};
KC_API int kc_cpu_set_isa(int isa);
KC_API int kc_cpu_isa_support(int isa);
KC_API int kc_cpu_isa(void);

/* CUDA library only: cudaGetDeviceCount() result, or -1 on any error (e.g. no driver). */
KC_API int kc_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif /* KC_LOGP_H_ */
