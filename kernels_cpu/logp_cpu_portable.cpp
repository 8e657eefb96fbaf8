// logp_cpu_portable.cpp - the row loops of logp_cpu_rows.h on LanesPortable (16 fp32 lanes in
// plain C++), built with no ISA flags: what every CPU can run, and the only build on ARM. The
// same IEEE operations in each lane as the AVX2 and AVX-512 builds, in the same order, so the
// same bits (tests/native/test_cpu_kernel.py compares them on x86).
#include "logp_cpu_rows.h"

kc_cpu::RowKernels kc_cpu::portable_kernels() { return row_kernels_for<LanesPortable>(); }
