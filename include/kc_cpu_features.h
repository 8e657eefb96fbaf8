/* kc_cpu_features.h - which x86 instruction sets this CPU can run, asked of the CPU itself:
 * cpuid through the compiler's builtins (__builtin_cpu_supports also checks that the OS saves
 * the wide registers, through xgetbv), never /proc/cpuinfo (absent on macOS, and a container
 * may show another machine's). Shared by libkc_logp_cpu and libkc_metrics_cpu, in files built
 * without ISA flags: asking is safe on any CPU. Everywhere else (ARM, ...) every answer is 0. */
#ifndef KC_CPU_FEATURES_H
#define KC_CPU_FEATURES_H

#if defined(__x86_64__) || defined(__i386__)
#define KC_CPU_X86 1
#include <cpuid.h>
#endif

/* F16C (the 16-bit float conversions), by cpuid leaf 1: not every compiler's
 * __builtin_cpu_supports knows the name "f16c". Its instructions are VEX-encoded: callers also
 * ask for AVX2, which checks the OS side. */
static inline int kc_cpu_has_f16c(void) {
#if defined(KC_CPU_X86)
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
#else
  return 0;
#endif
}

/* AVX2 + FMA + F16C: what code built with -mavx2 -mfma -mf16c needs. */
static inline int kc_cpu_has_avx2_fma_f16c(void) {
#if defined(KC_CPU_X86)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kc_cpu_has_f16c();
#else
  return 0;
#endif
}

/* The above plus AVX-512F: what code built with -mavx2 -mfma -mf16c -mavx512f needs. */
static inline int kc_cpu_has_avx512f(void) {
#if defined(KC_CPU_X86)
  return kc_cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}

#endif /* KC_CPU_FEATURES_H */
