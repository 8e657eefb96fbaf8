// metrics_cpu_avx2.cpp - compare_rows.h compiled with AVX2 and F16C (CMakeLists.txt adds the
// flags to this file alone); metrics_cpu.cpp calls it only on a CPU that has both.
#define KC_METRICS_AVX2 1
#include "compare_rows.h"

namespace kc_metrics {
const CompareRows compare_rows_avx2[3] = {&compare_rows<kFloat32>, &compare_rows<kBFloat16>,
                                          &compare_rows<kFloat16>};
const DigestRows digest_rows_avx2 = &digest_rows;
}  // namespace kc_metrics
