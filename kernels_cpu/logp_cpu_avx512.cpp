// logp_cpu_avx512.cpp - the row loops of logp_cpu_rows.h with one 16-lane AVX-512 register
// (LanesAvx512) instead of two 8-lane AVX2 ones: the same operations in each lane, so the same
// bits. Built with -mavx512f on top of the library's flags; run only where the CPU has it
// (logp_cpu.cpp checks, kc_cpu_set_isa chooses).
#include "logp_cpu_rows.h"

#if !defined(__AVX512F__)
#error "logp_cpu_avx512.cpp must be compiled with -mavx512f"
#endif

kc_cpu::RowKernels kc_cpu::avx512_kernels() {
  return {forward_any<LanesAvx512>, backward_any<LanesAvx512>};
}
