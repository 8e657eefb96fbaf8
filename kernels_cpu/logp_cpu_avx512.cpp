// logp_cpu_avx512.cpp - the row loops of logp_cpu_rows.h with one 16-lane AVX-512 register
// (LanesAvx512) instead of two 8-lane AVX2 ones: the same operations in each lane, so the same
// bits. Built with -mavx512f on top of the AVX2 build's flags; run only where the CPU has it
// (logp_cpu.cpp asks the CPU, kc_cpu_set_isa chooses).
#include "logp_cpu_x86.h"

#if !defined(__AVX512F__)
#error "logp_cpu_avx512.cpp must be compiled with -mavx512f"
#endif

kc_cpu::RowKernels kc_cpu::avx512_kernels() { return row_kernels_for<LanesAvx512>(); }
