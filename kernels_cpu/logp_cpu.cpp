// logp_cpu.cpp - deterministic fused log-prob (logits[t] - logsumexp(logits)) on the CPU: the C
// ABI, the threads and the choice of build. The row loops are in logp_cpu_rows.h.
//
// Determinism contract (bitwise identical output whatever the batch size, the row's position in
// the batch, the thread count, the row's address alignment, or which build runs):
//
//  * Every row is reduced by exactly the same sequence of IEEE operations.
//  * The row is split into 16 fp32 lanes: column j (counted from the row start, never from the
//    address) always belongs to lane j % 16, in every build (the portable one: an array of 16;
//    AVX2: two __m256 registers, lanes 0-7 and 8-15; AVX-512: one __m512). Loads are unaligned
//    loads, so the address never changes which column lands in which lane and there is no
//    alignment peeling.
//  * Columns are visited in chunks of kChunk columns (a multiple of 16, counted from the row
//    start). Per chunk: pass 1 takes the per-lane max of the chunk's fp32 values (bf16/fp16 and
//    a partial fp32 chunk are first decoded to an L1-resident fp32 scratch buffer; a full fp32
//    chunk is read in place); each lane's running sum and its rounding error are rescaled to
//    the new lane max; pass 2 adds exp(x - lane_max) for the chunk's columns to the lane's sum,
//    in increasing column order, by compensated (Kahan) addition. Plain addition missed the
//    fp32 contract twice: one running sum per lane over ~9500 terms at V=151936 (lm rows), and
//    a chunk sum per lane (128 terms) on converged rows, where every term after the lane's
//    max is below half an ulp of its sum and was dropped; kernelcheck caught both. The row is
//    read from memory once.
//  * The last partial group of 16 columns is padded with -inf in the scratch buffer and goes
//    through the same lane code: exp(-inf - m) is exactly +0, which takes the compensated step
//    like any term (it may fold the carried error into the sum), at positions fixed by V
//    alone. There is no separate scalar tail path at all.
//  * The 16 lanes are combined by a fixed pairwise tree: lane i + lane i+8, then i + i+4,
//    i + i+2, i + i+1 (same tree for the max and for the rescaled sums), one scalar copy of it
//    for every build.
//  * exp is one polynomial (exp_poly) with explicit fused multiply-adds, the same in every
//    build (std::fma in the portable one). The files are built with -ffp-contract=off: no other
//    multiply-add is fused, and nothing is re-associated (no -ffast-math).
//  * ln(sum) is computed by the library itself (log_row_sum, in double), not by the C library,
//    whose logf differs between machines: the same bits on x86 and ARM, glibc or macOS.
//  * bf16/fp16 are converted by integer arithmetic with round-to-nearest-even in the portable
//    build and by AVX2/F16C instructions with the same rounding in the x86 builds.
//  * Threads own contiguous, statically partitioned row ranges; a row's arithmetic does not
//    depend on which thread runs it.
//  * Three builds of the same row loops: portable (plain C++, no ISA flags; every CPU), AVX2 and
//    AVX-512 (x86 only). Each lane sees the same IEEE operations in the same order in all three,
//    so they give the same bits (tests/native/test_cpu_kernel.py compares them); the CPU picks
//    which runs (cpuid, include/kc_cpu_features.h), or KERNELCHECK_CPU_ISA, never the batch.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kc_abi_common.h"
#include "kc_cpu_features.h"
#include "kc_logp.h"
#include "logp_cpu_kernels.h"

namespace {

int g_num_threads = 0;      // 0 = hardware concurrency
std::atomic<int> g_isa{0};  // KC_CPU_ISA_*; 0 = not chosen yet (the best this CPU has)

// Whether this library holds the build of `isa`: only what CMake compiled in.
bool isa_built(int isa) {
  switch (isa) {
    case KC_CPU_ISA_PORTABLE:
      return true;
#if defined(KC_HAVE_AVX2)
    case KC_CPU_ISA_AVX2:
      return true;
#endif
#if defined(KC_HAVE_AVX512)
    case KC_CPU_ISA_AVX512:
      return true;
#endif
    default:
      return false;
  }
}

// Whether this CPU can run the build of `isa` (asked of the CPU, by cpuid).
bool cpu_runs(int isa) {
  if (isa == KC_CPU_ISA_AVX512) return kc_cpu_has_avx512f();
  if (isa == KC_CPU_ISA_AVX2) return kc_cpu_has_avx2_fma_f16c();
  return isa == KC_CPU_ISA_PORTABLE;
}

int isa_support(int isa) {
  if (isa != KC_CPU_ISA_PORTABLE && isa != KC_CPU_ISA_AVX2 && isa != KC_CPU_ISA_AVX512) return -1;
  if (!isa_built(isa)) return KC_CPU_ISA_NOT_BUILT;
  return cpu_runs(isa) ? KC_CPU_ISA_RUNS : KC_CPU_ISA_CPU_LACKS;
}

int best_isa() {
  for (int isa : {KC_CPU_ISA_AVX512, KC_CPU_ISA_AVX2}) {
    if (isa_support(isa) == KC_CPU_ISA_RUNS) return isa;
  }
  return KC_CPU_ISA_PORTABLE;
}

int current_isa() {
  if (g_isa == 0) g_isa = best_isa();
  return g_isa;
}

kc_cpu::RowKernels row_kernels() {
  switch (current_isa()) {
#if defined(KC_HAVE_AVX512)
    case KC_CPU_ISA_AVX512:
      return kc_cpu::avx512_kernels();
#endif
#if defined(KC_HAVE_AVX2)
    case KC_CPU_ISA_AVX2:
      return kc_cpu::avx2_kernels();
#endif
    default:
      return kc_cpu::portable_kernels();
  }
}

// Static row partition over threads: thread k gets rows [k*rows/T, (k+1)*rows/T).
template <class F>
void parallel_rows(int64_t rows, int64_t vocab, F&& fn) {
  int64_t nt =
      g_num_threads > 0 ? g_num_threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  if (nt < 1) nt = 1;
  // Tiny problems are not worth a thread start (~1 us/row-chunk of 64K elements).
  const int64_t work_threads = std::max<int64_t>(1, rows * vocab / 65536);
  nt = std::min({nt, rows, work_threads});
  if (nt <= 1) {
    fn(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(nt - 1));
  for (int64_t k = 1; k < nt; ++k) {
    pool.emplace_back([&, k] { fn(k * rows / nt, (k + 1) * rows / nt); });
  }
  fn(0, rows / nt);
  for (auto& th : pool) th.join();
}

}  // namespace

extern "C" {

KC_API int kc_abi_version(void) { return KC_ABI_VERSION; }

KC_API const char* kc_backend_name(void) { return "cpu"; }

KC_API const char* kc_status_string(int status) {
  return kc_status_text(status, "kernel launch failed", "device error");
}

KC_API int kc_set_num_threads(int n) {
  if (n < 0) return KC_ERR_SHAPE;
  g_num_threads = n;
  return KC_OK;
}

KC_API int kc_cpu_set_isa(int isa) {
  if (isa == 0) {
    g_isa = best_isa();
    return KC_OK;
  }
  const int support = isa_support(isa);
  if (support == KC_CPU_ISA_RUNS) {
    g_isa = isa;
    return KC_OK;
  }
  return support < 0 ? KC_ERR_SHAPE : KC_ERR_DEVICE;
}

KC_API int kc_cpu_isa_support(int isa) { return isa_support(isa); }

KC_API int kc_cpu_isa(void) { return current_isa(); }

KC_API int kc_logp_forward(int dtype, const void* logits, const int64_t* target, float* out,
                           int64_t rows, int64_t vocab, int64_t row_stride, void* stream) {
  (void)stream;
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;
  if (!logits || !target || !out) return KC_ERR_NULL;
  const kc_cpu::ForwardRowsFn rows_fn = row_kernels().forward;
  parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
    rows_fn(dtype, logits, target, out, a, b, vocab, row_stride);
  });
  return KC_OK;
}

KC_API int kc_logp_backward(int dtype, const void* logits, const int64_t* target,
                            const float* grad_out, void* grad_logits, int64_t rows, int64_t vocab,
                            int64_t row_stride, void* stream) {
  (void)stream;
  const int st = kc_check_args(dtype, rows, vocab, row_stride);
  if (st != KC_OK) return st;
  if (rows == 0) return KC_OK;
  if (!logits || !target || !grad_out || !grad_logits) return KC_ERR_NULL;
  const kc_cpu::BackwardRowsFn rows_fn = row_kernels().backward;
  parallel_rows(rows, vocab, [&](int64_t a, int64_t b) {
    rows_fn(dtype, logits, target, grad_out, grad_logits, a, b, vocab, row_stride);
  });
  return KC_OK;
}

}  // extern "C"
