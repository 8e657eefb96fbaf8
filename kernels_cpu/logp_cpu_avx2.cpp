// logp_cpu_avx2.cpp - the row loops of logp_cpu_rows.h on LanesAvx2 (two 8-lane AVX2 registers
// per 16 lanes). Built with -mavx2 -mfma -mf16c, in x86 builds only; run only where the CPU has
// all three (logp_cpu.cpp asks the CPU).
#include "logp_cpu_x86.h"

kc_cpu::RowKernels kc_cpu::avx2_kernels() { return row_kernels_for<LanesAvx2>(); }
