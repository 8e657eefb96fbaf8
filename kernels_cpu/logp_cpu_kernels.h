// logp_cpu_kernels.h - the builds of libkc_logp_cpu's row loops, as logp_cpu.cpp sees them: one
// pair of function pointers per instruction set, each defined in its own file (compiled with its
// own flags). Only the declarations: this header has no code that could be compiled for one ISA
// and run on another.
#pragma once

#include <cstdint>

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
// logp_cpu_portable.cpp: plain C++, no ISA flags; every build of the library has it.
RowKernels portable_kernels();
// logp_cpu_avx2.cpp (-mavx2 -mfma -mf16c): only in x86 builds (KC_HAVE_AVX2).
RowKernels avx2_kernels();
// logp_cpu_avx512.cpp (the same plus -mavx512f): only where the compiler can (KC_HAVE_AVX512).
RowKernels avx512_kernels();
}  // namespace kc_cpu
