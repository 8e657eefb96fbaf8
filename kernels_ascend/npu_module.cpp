/*
 * npu_module.cpp - the one PYBIND11_MODULE of the kernelcheck Ascend extension.
 *
 * bisheng links every source of the extension into one shared object; a second
 * PYBIND11_MODULE in any of them would define PyInit_kernelcheck_ascend twice, so every
 * Ascend entry point is registered here and the .asc files define none.
 *
 * The launchers live in the .asc files because the <<<blockDim, l2ctrl, stream>>> kernel-call
 * syntax is only available when bisheng compiles a source as Ascend C (-x asc).
 *
 * Unverified: never compiled here (no CANN, no bisheng on the machine it was written on).
 */
#include <torch/extension.h>

namespace kernelcheck_ascend {

// Defined in fused_logp.asc.
// logits: [N, V] contiguous fp32/bf16/fp16 on the NPU; target: [N] int64 on the same NPU.
// Returns fp32 [N]; logp[n] = logits[n, t] - logsumexp(logits[n, :]); t outside [0, V) -> 0.0.
at::Tensor fused_logp_forward(const at::Tensor& logits, const at::Tensor& target);

}  // namespace kernelcheck_ascend

PYBIND11_MODULE(kernelcheck_ascend, m) {
  m.doc() = "kernelcheck Ascend C kernels (unverified until run on an Ascend NPU)";
  m.def("fused_logp_forward", &kernelcheck_ascend::fused_logp_forward, pybind11::arg("logits"),
        pybind11::arg("target"),
        "Fused logp forward on the NPU: logits [N, V] (fp32/bf16/fp16, contiguous), target [N] "
        "int64 -> fp32 [N]; an out-of-range target gives 0.0.");
}
